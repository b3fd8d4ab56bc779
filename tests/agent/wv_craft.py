#!/usr/bin/python3
"""tests/agent/wv_craft.py: sends one hand-made `wv` request to an agent and
prints its answer, for the gate and bad-input checks of the update tests.

    wv_craft.py ADDR VERB KIND [field=value ...]

ADDR is unix:PATH or HOST:PORT.  KIND names the payload message of
proto/weights.proto (begin, done, query, status) whose fields are set from
field=value (numbers, true/false, strings; hex:.. or zeros:N for bytes; done's
failed=[!]MEMBER:REASON, a PeerFailure (! = the receiver's verdict), may be given again); KIND raw sends
the bytes of hex=.. as the payload as they are.  Extra request fields:
forwarded=1, sender=NAME, args=N (the number of args: 1 is VERB alone).
Prints one line, "code=N error=TEXT payload=LEN" (exit 0), or "no answer:
WHY" (exit 3).  Protobuf is encoded by hand (no python3-protobuf on a bare
machine): varints, length-delimited fields, fixed64 for doubles."""
import os
import socket
import struct
import sys
import time

# field numbers and wire types of the messages this sends (proto/weights.proto)
SCHEMA = {
    "begin": {"job": (1, "s"), "member": (2, "s"), "version": (3, "u"), "mode": (4, "s"), "digest": (5, "b"),
              "bytes": (6, "u"), "tensors": (7, "u"), "setup": (8, "b")},
    "done": {"job": (1, "s"), "member": (2, "s"), "version": (3, "u"), "ok": (4, "u"), "reason": (5, "s"),
             "implementation_seconds": (6, "d"), "wire_bytes": (7, "u"), "density": (8, "d")},
    "query": {"job": (1, "s"), "version": (2, "u"), "member": (3, "s")},
    "status": {"job": (1, "s"), "member": (2, "s"), "held": (3, "u"), "staged": (4, "u"), "endpoint": (5, "s"),
               "failed": (6, "u"), "reason": (7, "s"), "seconds": (8, "d"), "generation": (9, "u")},
}


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, kind, value):
    if kind == "u":
        return varint(num << 3) + varint(value)
    if kind == "d":
        return varint(num << 3 | 1) + struct.pack("<d", value)
    data = value if isinstance(value, bytes) else value.encode()
    return varint(num << 3 | 2) + varint(len(data)) + data


def parse_value(kind, text):
    if kind == "u":
        return 1 if text == "true" else 0 if text == "false" else int(text, 0)
    if kind == "d":
        return float(text)
    if kind == "b":
        if text.startswith("zeros:"):  # N zero bytes (too many for a command line as hex)
            return bytes(int(text[6:]))
        return bytes.fromhex(text[4:]) if text.startswith("hex:") else text.encode()
    return text


def read_fields(data):
    """(number, wire type, value) of each field; raises on a broken message."""
    i, out = 0, []
    while i < len(data):
        key, i = read_varint(data, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(data, i)
        elif wt == 2:
            n, i = read_varint(data, i)
            v, i = data[i:i + n], i + n
        elif wt == 1:
            v, i = data[i:i + 8], i + 8
        elif wt == 5:
            v, i = data[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        out.append((num, wt, v))
    return out


def read_varint(data, i):
    n = shift = 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    addr, verb, kind = argv[1], argv[2], argv[3]
    payload, extra = b"", {}
    for kv in argv[4:]:
        k, _, v = kv.partition("=")
        if k in ("forwarded", "sender", "args"):
            extra[k] = v
        elif kind == "done" and k == "failed":
            member, _, reason = v.partition(":")
            verdict = member.startswith("!")  # the receiver's own verdict on the bytes
            body = field(1, "s", member.lstrip("!")) + field(2, "s", reason)
            payload += field(9, "b", body + (field(3, "u", 1) if verdict else b""))
        elif kind == "raw" and k == "hex":
            payload = bytes.fromhex(v)
        elif kind in SCHEMA and k in SCHEMA[kind]:
            num, t = SCHEMA[kind][k]
            payload += field(num, "s" if t == "b" else t, parse_value(t, v))
        else:
            sys.stderr.write("wv_craft: unknown field %s of %s\n" % (k, kind))
            return 2
    nonce = os.urandom(16)
    req = field(1, "s", "wv")
    for _ in range(int(extra.get("args", "1"))):
        req += field(2, "s", verb)
    req += field(3, "s", "text") + field(6, "b", payload)
    if extra.get("forwarded"):
        req += field(7, "u", 1)
    if extra.get("sender"):
        req += field(8, "s", extra["sender"])
    req += field(9, "s", addr) + field(10, "u", int(time.time() * 1000)) + field(11, "b", nonce)
    try:
        if addr.startswith("unix:"):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(addr[5:])
        else:
            host, _, port = addr.rpartition(":")
            s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(struct.pack(">I", len(req)) + req)
        n = struct.unpack(">I", recv_exact(s, 4))[0]
        ans = read_fields(recv_exact(s, n))
        s.close()
    except (OSError, EOFError, ValueError, IndexError) as e:
        print("no answer: %s" % e)
        return 3
    code, error, plen = 0, "", 0
    for num, wt, v in ans:
        if num == 1 and wt == 0:
            code = v
        elif num == 2 and wt == 2:
            error = v.decode(errors="replace")
        elif num == 5 and wt == 2:
            plen = len(v)
    print("code=%d error=%s payload=%d" % (code, error, plen))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/python3
"""tests/python/skein_test.py: the skein Python package over libskein.

Round trips of every dtype torch and libskein share (disk-delta and p2p-tcp),
odd shapes, refusals that name the tensor (non-contiguous, wrong device, a
dtype libskein lacks, too many dimensions), a receiver whose tensors differ
from the manifest refused before any byte moves (its tensors untouched), a
corrupt version leaving the previous one in place, the GIL released during
a transfer, abort and close from another thread, the job's environment as
defaults, and the ctypes structs checked against the C header by a compiler.
Seeded (TEST_SEED, printed on failure); each test bounded by an alarm.
"""
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
try:
    import torch
except ImportError:
    print("skip: torch is not installed (tools/deps.sh installs python3-torch)")
    print("# 0 passed, 0 failed, 1 skipped")
    sys.exit(0)
try:
    import numpy  # Debian's torch brings it; a pip torch may not
except ImportError:
    numpy = None
import skein
from skein import _lib as L

SEED = int(os.environ.get("TEST_SEED", "20261129"))
torch.manual_seed(SEED)
torch.set_num_threads(1)
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def tmpdir():
    return tempfile.mkdtemp(prefix="skein-py-test.")


def random_like(shape, dtype):
    """Random bits of dtype (NaNs and all): compared as bytes."""
    n = 1
    for s in shape:
        n *= s
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8)
    if dtype == torch.bool:
        return (raw % 2).bool().reshape(shape)
    return raw.view(dtype).reshape(shape).clone()


def same_bytes(a, b):
    if a.numel() == 0:
        return b.numel() == 0 and a.shape == b.shape
    return a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]
DTYPES += [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]


def p2p_round(src, dst, versions=1, **kw):
    """Publishes src `versions` times to a p2p-tcp receiver on dst in a thread."""
    recv = skein.Receiver(dst, mode="p2p-tcp", port=0, timeout=10, **kw)
    got, errs = [], []

    def run():
        try:
            for _ in range(versions):
                got.append(recv.wait(timeout=10))
        except skein.Error as e:
            errs.append(e)
    t = threading.Thread(target=run)
    t.start()
    try:
        with skein.Publisher(src, mode="p2p-tcp", host="127.0.0.1", port=recv.port, timeout=10) as pub:
            for v in range(1, versions + 1):
                pub.publish(v)
    finally:
        t.join(20)
        recv.close()
    if errs:
        raise errs[0]
    return got


@test
def every_dtype_round_trip_disk_and_p2p():
    src = {f"t.{str(dt).split('.')[-1]}": random_like((37, 5), dt) for dt in DTYPES}
    for mode in ("disk-delta", "p2p-tcp"):
        dst = {k: torch.zeros_like(v) for k, v in src.items()}
        if mode == "disk-delta":
            d = tmpdir()
            with skein.Publisher(src, mode=mode, dir=d) as pub, skein.Receiver(dst, mode=mode, dir=d) as rec:
                pub.publish(1)
                assert rec.wait(timeout=5) == 1
            shutil.rmtree(d)
        else:
            assert p2p_round(src, dst) == [1]
        for k in src:
            assert same_bytes(src[k], dst[k]), f"{mode}: {k} differs"
    assert len(DTYPES) >= 10


@test
def odd_shapes_round_trip():
    shapes = [(), (1,), (0,), (3, 0, 2), (3, 5, 7), (1,) * 8, (2, 1, 2, 1, 2, 1, 2, 1), (100003,)]
    src = {f"s{i}": random_like(s, torch.bfloat16) for i, s in enumerate(shapes)}
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    d = tmpdir()
    with skein.Publisher(src, mode="disk-delta", dir=d) as pub, skein.Receiver(dst, mode="disk-delta", dir=d) as rec:
        for v in (1, 2, 3):
            for t in src.values():
                if t.numel():
                    t.view(-1)[torch.randint(0, t.numel(), (1,))] += 1
            pub.publish(v)
            assert rec.wait(timeout=5) == v
            for k in src:
                assert same_bytes(src[k], dst[k]), f"v{v}: {k} {tuple(src[k].shape)} differs"
    shutil.rmtree(d)
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    assert p2p_round(src, dst, versions=2) == [1, 2]
    assert all(same_bytes(src[k], dst[k]) for k in src)
    try:
        skein.Publisher({"nine": torch.zeros((1,) * 9)}, mode="disk-delta", dir="/tmp")
        raise AssertionError("9 dimensions accepted")
    except skein.InvalidArgument as e:
        assert "nine" in str(e) and "dimensions" in str(e), e


def refused(named, want, cls=skein.InvalidArgument, role=skein.Publisher, **kw):
    try:
        role(named, mode="disk-delta", dir=kw.pop("dir", "/tmp"), **kw)
    except cls as e:
        for w in want:
            assert w in str(e), f"{w!r} not in {e}"
        assert "\n" not in str(e)
        return e
    raise AssertionError(f"{want} accepted")


@test
def refusals_name_the_tensor():
    w = torch.zeros(4, 6)
    e = refused({"ok": w, "layer.3.weight_t": w.t()}, ["layer.3.weight_t", "not contiguous"], role=skein.Receiver)
    assert isinstance(e, ValueError)
    refused([("sliced", torch.zeros(10)[::2])], ["sliced", "not contiguous"])
    refused([("m", torch.zeros(3, device="meta"))], ["m", "device 'meta'"])
    refused([("c", torch.zeros(3, dtype=torch.complex64))], ["c", "complex64"])
    refused([("sp", torch.eye(3).to_sparse())], ["sp", "layout"])
    refused([("x", [1, 2, 3])], ["x", "list"])
    refused([("x", torch.zeros(2)), ("x", torch.zeros(2))], ["x", "twice"])
    refused([("bad name", torch.zeros(2))], ["bad name"])
    refused({}, ["no tensors"])
    if numpy is not None:
        ro = numpy.zeros(3)
        ro.flags.writeable = False
        refused({"ro": ro}, ["ro", "read-only"], role=skein.Receiver)
    try:
        skein.Receiver({"a": torch.zeros(2)})
        raise AssertionError("no mode accepted outside a job")
    except skein.InvalidArgument as e:
        assert "mode=" in str(e), e


@test
def numpy_arrays_and_modules():
    net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2)).to(torch.bfloat16)
    eng = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2)).to(torch.bfloat16)
    d = tmpdir()
    with skein.Publisher(net.named_parameters(), mode="disk-delta", dir=d) as pub, \
            skein.Receiver(eng, mode="disk-delta", dir=d) as rec:  # a module: its state dict
        pub.publish(5)
        assert rec.wait(1) == 5
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), eng.state_dict().values()))
    shutil.rmtree(d)
    if numpy is None:
        print("  (no numpy: the NumPy half skipped)")
        return
    a = {"x": numpy.arange(12, dtype=numpy.float32).reshape(3, 4), "y": numpy.array([True, False])}
    b = {"x": numpy.zeros((3, 4), numpy.float32), "y": numpy.zeros(2, bool)}
    assert p2p_round(a, b) == [1]
    assert (a["x"] == b["x"]).all() and (a["y"] == b["y"]).all()


@test
def mismatch_refused_before_any_byte_moves():
    src = {"a": torch.randn(16), "b": torch.randn(4, 4)}
    cases = {"shape": {"a": torch.full((16,), 7.0), "b": torch.full((2, 8), 7.0)},
             "dtype": {"a": torch.full((16,), 7.0), "b": torch.full((4, 4), 7, dtype=torch.float64)},
             "name": {"a": torch.full((16,), 7.0), "c": torch.full((4, 4), 7.0)}}
    for what, dst in cases.items():
        d = tmpdir()
        with skein.Publisher(src, mode="disk-delta", dir=d) as pub, \
                skein.Receiver(dst, mode="disk-delta", dir=d) as rec:
            pub.publish(1)
            try:
                rec.wait(1)
                raise AssertionError(f"disk-delta: {what} mismatch accepted")
            except skein.MismatchError as e:
                assert "tensor" in str(e), e
        shutil.rmtree(d)
        assert all(bool((t == 7).all()) for t in dst.values()), f"disk-delta {what}: bytes moved"
        try:
            p2p_round(src, dst)
            raise AssertionError(f"p2p-tcp: {what} mismatch accepted")
        except skein.Error as e:
            assert "mismatch" in str(e) or "differ" in str(e) or what in str(e), e
        assert all(bool((t == 7).all()) for t in dst.values()), f"p2p-tcp {what}: bytes moved"


@test
def corrupt_version_keeps_the_previous_one():
    src = {"w": torch.randn(1000)}
    dst = {"w": torch.zeros(1000)}
    d = tmpdir()
    with skein.Publisher(src, mode="disk-delta", dir=d, full_every=100) as pub, \
            skein.Receiver(dst, mode="disk-delta", dir=d) as rec:
        pub.publish(1)
        assert rec.wait(1) == 1
        v1 = dst["w"].clone()
        src["w"] += 1
        pub.publish(2)
        data = os.path.join(d, "weight_v000002", "data")
        with open(data, "r+b") as f:
            b = f.read(1)
            f.seek(0)
            f.write(bytes([b[0] ^ 0xFF]))
        try:
            rec.wait(1)
            raise AssertionError("corrupt version accepted")
        except (skein.ChecksumError, skein.FormatError) as e:
            assert e.code in (4, 9) and "version 2 tensor w" in str(e), e
        assert torch.equal(dst["w"], v1) and rec.version == 1
    shutil.rmtree(d)


@test
def errors_carry_the_c_message():
    d = tmpdir()
    with skein.Publisher({"w": torch.zeros(3)}, mode="disk-delta", dir=d) as pub:
        pub.publish(3)
        try:
            pub.publish(2)
            raise AssertionError("a lower version accepted")
        except skein.InvalidArgument as e:
            assert e.code == 1 and "increase" in e.message, e
        assert pub.publish()["skein/weight_version"] == 4
    assert skein.latest_version(d) == 4
    pub.close()  # twice: fine
    try:
        pub.publish(9)
        raise AssertionError("publish after close")
    except skein.InvalidArgument as e:
        assert "closed" in str(e)
    try:
        skein.Receiver({"w": torch.zeros(3)}, mode="disk-delta", dir=os.path.join(d, "none"))
        raise AssertionError("missing folder accepted")
    except skein.IOFailure as e:
        assert "none" in str(e) and isinstance(e, OSError)
    shutil.rmtree(d)
    try:
        skein.Publisher({"w": torch.zeros(3)}, mode="broadcast")
    except skein.Unavailable as e:
        assert "inside a skein job" in str(e)


@test
def gil_released_during_transfers():
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1
    t = threading.Thread(target=spin)
    d = tmpdir()
    big = {f"w{i}": torch.randn(1 << 20) for i in range(8)}  # 32 MiB
    dst = {k: torch.zeros_like(v) for k, v in big.items()}
    with skein.Publisher(big, mode="disk-delta", dir=d) as pub, skein.Receiver(dst, mode="disk-delta", dir=d) as rec:
        t.start()
        time.sleep(0.05)
        c0 = count[0]
        assert rec.wait(timeout=0.5) is None  # nothing yet: blocks 0.5 s in C
        waiting = count[0] - c0
        c0 = count[0]
        pub.publish(1)
        publishing = count[0] - c0
        stop.set()
        t.join()
    shutil.rmtree(d)
    assert waiting > 10000, f"the other thread ran {waiting} loops in a 0.5 s wait"
    assert publishing > 1000, f"the other thread ran {publishing} loops during a 32 MiB publish"


@test
def p2p_ticket_refuses_another_sender():
    """Issue 23: a receiver given a ticket refuses a publisher with another
    nonce (before any byte of its data) and takes the one with its own."""
    src = {"w": random_like((64, 3), torch.float32)}
    dst = {"w": torch.zeros(64, 3)}
    nonce, other = os.urandom(16), os.urandom(16)
    recv = skein.Receiver(dst, mode="p2p-tcp", port=0, timeout=10)
    recv.ticket("job", 1, nonce)
    with skein.Publisher(src, mode="p2p-tcp", host="127.0.0.1", port=recv.port, timeout=3) as bad:
        bad.ticket("job", 1, other)
        t = threading.Thread(target=lambda: recv.wait(timeout=1))
        t.start()
        try:
            bad.publish(1)
            raise AssertionError("a publisher with another nonce was taken")
        except skein.Error as e:
            assert "nonce" in str(e), str(e)
        t.join(10)
    # each of the publisher's connections (its streams) is refused on its own
    assert recv.refused >= 1 and bool((dst["w"] == 0).all()), recv.refused
    got = []
    t = threading.Thread(target=lambda: got.append(recv.wait(timeout=10)))
    t.start()
    with skein.Publisher(src, mode="p2p-tcp", host="127.0.0.1", port=recv.port, timeout=10) as pub:
        pub.ticket("job", 1, nonce)
        pub.publish(1)
    t.join(20)
    recv.close()
    assert got == [1] and same_bytes(src["w"], dst["w"])


@test
def close_from_another_thread_aborts_a_wait():
    rec = skein.Receiver({"w": torch.zeros(3)}, mode="p2p-tcp", port=0)
    out = []

    def run():
        try:
            rec.wait()
        except skein.Error as e:
            out.append(e)
    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    rec.close()
    t.join(5)
    assert not t.is_alive() and out and isinstance(out[0], skein.Aborted), out
    assert time.monotonic() - t0 < 3


@test
def job_environment_gives_the_defaults():
    d = tmpdir()
    env = {"SKEIN_JOB": "rl", "SKEIN_TRANSFER_MODE": "disk-delta", "SKEIN_DISK_DIR": d,
           "SKEIN_BUFFER_SIZE": "1024", "SKEIN_MEMBER": "rl/engine-2"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        src, dst = {"w": torch.randn(1000)}, {"w": torch.zeros(1000)}
        with skein.Publisher(src) as pub, skein.Receiver(dst) as rec:
            assert pub._cfg.bucket_bytes == 1024 and pub.path == "disk-delta"
            pub.publish(1)
            assert rec.wait(1) == 1 and torch.equal(src["w"], dst["w"])
        assert os.path.exists(os.path.join(d, "receivers", "rl.engine-2"))
        os.environ["SKEIN_TRANSFER_MODE"] = "p2p"
        try:
            skein.Publisher(src)
            raise AssertionError("p2p without peers accepted")
        except skein.InvalidArgument as e:
            assert "host=" in str(e) and "coordinated" in str(e)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(d)


@test
def structs_match_the_c_header():
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise AssertionError("no C compiler to check the structs against skein_xfer.h")
    fields = {"xfer_config": (L.XferConfig, ["path", "role", "bucket_bytes", "timeout_ms", "keep_previous",
                                             "journal_dir", "disk", "p2p", "nccl", "verify_device", "threads"]),
              "xfer_stats": (L.XferStats, [f for f, _ in L.XferStats._fields_]),
              "xfer_err": (L.XferErr, ["code", "msg"])}
    sub = {"disk": (L._Disk, "xfer_config", [f for f, _ in L._Disk._fields_]),
           "p2p": (L._P2P, "xfer_config", [f for f, _ in L._P2P._fields_]),
           "nccl": (L._Nccl, "xfer_config", [f for f, _ in L._Nccl._fields_])}
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "transfer/include/skein_xfer.h"', "int main(void){"]
    want = []
    for t, (cls, fs) in fields.items():
        lines.append(f'printf("%zu\\n", sizeof({t}));')
        want.append(ctypes.sizeof(cls))
        for f in fs:
            lines.append(f'printf("%zu\\n", offsetof({t}, {f}));')
            want.append(getattr(cls, f).offset)
    for name, (cls, t, fs) in sub.items():
        for f in fs:
            lines.append(f'printf("%zu\\n", offsetof({t}, {name}.{f}) - offsetof({t}, {name}));')
            want.append(getattr(cls, f).offset)
    lines.append("return 0;}")
    d = tmpdir()
    try:
        src, exe = os.path.join(d, "abi.c"), os.path.join(d, "abi")
        with open(src, "w") as f:
            f.write("\n".join(lines))
        subprocess.run([cc, "-I", ROOT, "-o", exe, src], check=True)
        got = [int(x) for x in subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split()]
    finally:
        shutil.rmtree(d)
    assert got == want, f"C {got} != ctypes {want}"


def main():
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    passed = failed = 0

    def alarm(*_):
        raise TimeoutError("test took over 60 s")
    signal.signal(signal.SIGALRM, alarm)
    for fn in TESTS:
        if only not in fn.__name__:
            continue
        signal.alarm(60)
        t0 = time.monotonic()
        try:
            fn()
            passed += 1
            print(f"ok   {fn.__name__} ({(time.monotonic() - t0) * 1000:.0f} ms)")
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__} (TEST_SEED={SEED})")
            traceback.print_exc(limit=4)
        finally:
            signal.alarm(0)
    print(f"# {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""tests/engines/fake_sglang.py: an HTTP engine that speaks SGLang's endpoints
for weights (docs/engines.md), holding a small torch model.

Started by skein's sidecar (--rollout-engine sglang) with SKEIN_ENGINE_PORT.
Its model starts zeroed (like --load-format dummy) with the layout in
$SKEIN_ENGINE_LAYOUT; /update_weights_from_ipc receives through
skein._ckpt.serve (our receiver, written from the protocol's description)
and copies every tensor into the model (its loader).  /generate answers the
served weight_version and the sha256 of the model's bytes: the test checks
it against the trainer's digest of that version.

Like SGLang's --admin-api-key, every POST but /generate needs
"Authorization: Bearer $SKEIN_ENGINE_API_KEY" (the sidecar's key).

Faults (tests): FAKE_FAIL_FILE holds N: the next N applies fail in the
loader (an error answer; N is decremented); FAKE_NO_PROBE=1: the probe
endpoints never answer; FAKE_SLOW_LOAD=S: the loader takes S seconds a bucket
(for versions above FAKE_SLOW_AFTER).
"""
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from skein import _ckpt  # noqa: E402


def digest(params):
    h = hashlib.sha256()
    for _, t in params:
        h.update(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class Model:
    def __init__(self, layout_path):
        with open(layout_path) as f:
            items = json.load(f)
        self.params = [(it["name"], torch.zeros(it["shape"], dtype=getattr(torch, it["dtype"]))) for it in items]
        self.by_name = dict(self.params)
        self.version = ""
        self.lock = threading.Lock()
        self.paused = False


M = None


def fail_now():
    p = os.environ.get("FAKE_FAIL_FILE")
    if not p or not os.path.exists(p):
        return False
    with open(p) as f:
        n = int(f.read().strip() or 0)
    if n <= 0:
        return False
    with open(p, "w") as f:
        f.write(str(n - 1))
    return True


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def reply(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def do_GET(self):
        if self.path in ("/model_info", "/weight_version", "/get_weight_version", "/health"):
            if os.environ.get("FAKE_NO_PROBE") == "1":
                time.sleep(3600)
            return self.reply(200, {"model_path": "fake", "weight_version": M.version})
        self.reply(404, {"error": self.path})

    def do_POST(self):
        b = self.body()
        key = os.environ.get("SKEIN_ENGINE_API_KEY")
        if key and self.path != "/generate" and self.headers.get("Authorization") != f"Bearer {key}":
            return self.reply(401, {"success": False, "message": "admin API key required"})
        if self.path == "/pause_generation":
            M.paused = True
            return self.reply(200, {"success": True})
        if self.path == "/continue_generation":
            M.paused = False
            return self.reply(200, {"success": True})
        if self.path == "/generate":
            with M.lock:
                return self.reply(200, {"weight_version": M.version, "digest": digest(M.params), "text": "ok"})
        if self.path == "/update_weights_from_ipc":
            handles = b.get("zmq_handles") or {}
            if "cpu" not in handles:
                return self.reply(400, {"success": False, "message": f"no cpu handle in {list(handles)}"})
            fail = fail_now()
            t0 = time.perf_counter()

            def load(views):
                if fail:
                    raise RuntimeError("injected loader failure")
                if int(b.get("weight_version") or 0) > int(os.environ.get("FAKE_SLOW_AFTER") or 0):
                    time.sleep(float(os.environ.get("FAKE_SLOW_LOAD") or 0))
                for name, v in views:
                    M.by_name[name].copy_(v)
            try:
                with M.lock:
                    n = _ckpt.serve(handles["cpu"], load, timeout_s=30)
                    M.version = str(b.get("weight_version", ""))
            except Exception as e:
                return self.reply(400, {"success": False, "message": f"{type(e).__name__}: {e}"})
            print(f"fake engine: loaded {n} tensors, version {M.version} in {time.perf_counter() - t0:.3f} s",
                  flush=True)
            return self.reply(200, {"success": True, "message": "ok"})
        self.reply(404, {"error": self.path})


def main():
    global M
    M = Model(os.environ["SKEIN_ENGINE_LAYOUT"])
    port = int(os.environ["SKEIN_ENGINE_PORT"])
    srv = ThreadingHTTPServer(("127.0.0.1", port), H)
    srv.daemon_threads = True
    print(f"fake engine: pid {os.getpid()} on {os.environ.get('SKEIN_ENGINE_URL')}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()

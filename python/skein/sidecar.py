"""skein.sidecar: the skein side of a stock SGLang or vLLM engine (docs/engines.md).

`--rollout-engine sglang|vllm` makes each engine member of a job this
process (python3 -m skein.sidecar): skein supervises it on the engine's node;
it starts the stock server ($SKEIN_ENGINE_CMD, the job's --rollout-cmd) with
SKEIN_ENGINE_PORT and SKEIN_ENGINE_URL (a free port its agent picked; one picked
here when run without them), restarts it
when it dies, and outlives its restarts.  It takes part in every coordinated
update through libskein (skein.Receiver, coordinated) into a copy it holds:
one torch buffer with every tensor at a 256-byte aligned offset, in pinned
host memory by default (SKEIN_ENGINE_COPY=pinned|device|shared; shared:
host shared memory, the default without CUDA).  Once a version is committed
it applies it to the engine: POST /pause_generation, /update_weights_from_ipc
with the pathname ipc sockets it binds in a fresh 0700 folder (the protocol:
skein._ckpt), /continue_generation.  A failed apply marks the engine dirty;
after SKEIN_ENGINE_APPLY_RETRIES failures the engine is restarted with the
reason.  A restarted engine is served from the copy: no byte crosses the
network for it.

The engine is ready only when its own probe says it serves the latest
committed version (SGLang: /model_info's weight_version, then
/weight_version, /get_weight_version; vLLM, which reports none: the version
applied to that pid).  The state (starting, syncing, updating, dirty,
ready) is written as JSON to ENGINES/JOB/ENGINE.json after every change
(ENGINES: "engines" beside the agent's control socket) (skein.engines() and `skeinctl engines` read it).

The layout of the weights (names, shapes, dtypes; the trainer's manifest)
comes from $SKEIN_ENGINE_LAYOUT: a JSON list of {"name", "shape", "dtype"}.

Job modes: disk-delta and p2p receive into any copy.  broadcast,
broadcast_packed (NCCL) and colocated (the trainer's CUDA IPC handoff) receive
only into device memory (libskein's NCCL and IPC paths), so there the copy is
on the engine's GPU (SKEIN_ENGINE_COPY defaults to device; pinned or shared is
refused in one line): the sidecar is then one more NCCL rank, or, colocated,
maps the trainer's handles on the shared GPU, and the copy is itself the
protocol's buffer.  SKEIN_ENGINE_COPY=fake-device is for tests only: host
shared memory that libskein is told is device memory, allowed only with a
stand-in CUDA runtime (SKEIN_CUDART_LIB, tests/fakecuda), whose "device
memory" is host memory.
"""
import ctypes
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from . import _ckpt
from . import _engines
from . import _lib as L
from ._endpoint import Receiver

STATES = ("starting", "syncing", "updating", "dirty", "ready")
DEVICE_MODES = ("broadcast", "broadcast_packed", "colocated")  # libskein receives only into device memory
PAUSE_MODES = ("abort", "retract", "in_place")
WAIT_S = 0.5  # one coordinated wait; then the engine is looked at


def log(msg):
    print(f"sidecar {os.environ.get('SKEIN_MEMBER', '')}: {msg}", flush=True)


def env_num(name, default, kind=float):
    v = os.environ.get(name)
    if not v:
        return default
    try:
        return kind(v)
    except ValueError:
        sys.exit(f"skein sidecar: ${name}={v!r} is not a number")


def load_layout(path):
    import torch
    try:
        with open(path) as f:
            items = json.load(f)
        out = []
        for it in items:
            dt = getattr(torch, str(it["dtype"]).replace("torch.", ""), None)
            if not isinstance(dt, torch.dtype):
                raise ValueError(f"tensor {it.get('name')}: dtype {it['dtype']!r}")
            out.append((str(it["name"]), tuple(int(d) for d in it["shape"]), dt))
        if not out:
            raise ValueError("no tensors")
        return out
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"skein sidecar: $SKEIN_ENGINE_LAYOUT {path}: {e}")


def make_copy(layout, where):
    """One uint8 buffer holding every tensor at a 256-byte aligned offset;
    returns (flat, metas, named views)."""
    import torch
    metas, off = [], 0
    for name, shape, dt in layout:
        nb = torch.Size(shape).numel() * torch.empty((), dtype=dt).element_size()
        metas.append({"name": name, "shape": torch.Size(shape), "dtype": dt, "offset": off, "nbytes": nb})
        off = _ckpt.align(off + nb)
    if where == "device":  # (fake-device: shared below, declared device memory by _DeviceReceiver)
        flat = torch.zeros(off, dtype=torch.uint8, device="cuda")
    elif where == "pinned":
        flat = torch.zeros(off, dtype=torch.uint8).pin_memory()
    else:
        import torch.multiprocessing as mp
        mp.set_sharing_strategy("file_system")
        flat = torch.zeros(off, dtype=torch.uint8).share_memory_()
    views = [(m["name"], flat[m["offset"]:m["offset"] + m["nbytes"]].view(m["dtype"]).view(m["shape"]))
             for m in metas]
    return flat, metas, views


class _DeviceReceiver(Receiver):
    """SKEIN_ENGINE_COPY=fake-device (tests): the host shared copy declared to
    libskein as device 0's memory, which the stand-in runtime copies with memcpy."""

    def _build(self, path, kw):
        for e in self._entries:
            e.mem, e.device = L.MEM_CUDA, 0
        super()._build(path, kw)


def copy_where(mode, cuda, env):
    """Where the copy lives (SKEIN_ENGINE_COPY), or exits with a one-line reason.
    cuda: a callable (torch.cuda.is_available), called only when it decides."""
    where = env.get("SKEIN_ENGINE_COPY") or ""
    if where not in ("", "pinned", "device", "shared", "fake-device"):
        sys.exit(f"skein sidecar: SKEIN_ENGINE_COPY={where!r}: pinned, device or shared")
    if where == "fake-device" and not env.get("SKEIN_CUDART_LIB"):
        sys.exit("skein sidecar: SKEIN_ENGINE_COPY=fake-device is for tests with a stand-in CUDA runtime "
                 "(SKEIN_CUDART_LIB): a real one would be handed host memory as device memory")
    if mode in DEVICE_MODES:
        if not where:
            where = "device"
        if where in ("pinned", "shared"):
            sys.exit(f"skein sidecar: --update-weight-transfer-mode {mode} receives only into device memory: "
                     f"SKEIN_ENGINE_COPY={where} cannot take part (use device, the default in this mode)")
        if where == "device" and not cuda():
            sys.exit(f"skein sidecar: --update-weight-transfer-mode {mode} needs the copy on the engine's GPU, "
                     "and torch sees no CUDA device here")
        return where
    if where == "device" and not cuda():
        sys.exit("skein sidecar: SKEIN_ENGINE_COPY=device, and torch sees no CUDA device here")
    return where or ("pinned" if cuda() else "shared")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http(url, body=None, timeout=5.0, method=None):
    """(status, parsed JSON or text); status 0 when nothing answered."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"),
                                 headers={"Content-Type": "application/json"})
    key = os.environ.get("SKEIN_ENGINE_API_KEY")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, st = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, st = e.read(), e.code
    except (urllib.error.URLError, OSError, ValueError) as e:
        return 0, str(e)
    try:
        return st, json.loads(raw or b"null")
    except ValueError:
        return st, raw.decode(errors="replace")


def _pr_set_pdeathsig():
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the engine dies with its sidecar


class Engine:
    """The stock server: its process, and its HTTP API per kind."""

    def __init__(self, kind, cmd):
        self.kind, self.cmd = kind, cmd
        self.proc, self.port, self.started = None, 0, 0.0
        self.applied = 0  # vLLM: the version applied to this process

    def start(self):
        # the port the member's agent picked for it (every restart on it), else one picked here
        given = os.environ.get("SKEIN_ENGINE_PORT", "")
        self.port = int(given) if given.isdigit() and 0 < int(given) < 65536 else free_port()
        self.url = os.environ.get("SKEIN_ENGINE_URL") if given else None
        self.url = self.url or f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, SKEIN_ENGINE_PORT=str(self.port), SKEIN_ENGINE_URL=self.url)
        self.proc = subprocess.Popen(["/bin/sh", "-c", self.cmd], env=env, start_new_session=True,
                                     preexec_fn=_pr_set_pdeathsig)
        self.started, self.applied = time.time(), 0

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace=5.0):
        if not self.proc:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(grace)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        self.proc = None

    def probe(self):
        """The version the engine serves (0: none yet), or None when it does not answer."""
        if self.kind == "vllm":
            st, _ = http(self.url + "/health", timeout=1.0)
            return self.applied if st == 200 else None
        for path in ("/model_info", "/weight_version", "/get_weight_version"):
            st, j = http(self.url + path, timeout=1.0)
            if st == 0:
                return None
            if st == 200:
                wv = j.get("weight_version") if isinstance(j, dict) else j
                try:
                    return int(wv) if wv not in (None, "", "default") else 0
                except (TypeError, ValueError):
                    return 0
        return None

    def _post(self, path, body, timeout):
        st, j = http(self.url + path, body, timeout=timeout)
        ok = st == 200 and not (isinstance(j, dict) and j.get("success") is False)
        if not ok:
            msg = j.get("message") or j.get("error") if isinstance(j, dict) else j
            raise L.PeerError(f"{path}: {'HTTP ' + str(st) if st else 'no answer'}: {str(msg)[:300]}")
        return j

    def pause(self, mode, timeout):
        if self.kind == "vllm":
            return self._post("/pause", {"mode": mode}, timeout)
        return self._post("/pause_generation", {"mode": mode}, timeout)

    def resume(self, timeout):
        if self.kind == "vllm":
            return self._post("/resume", {}, timeout)
        return self._post("/continue_generation", {}, timeout)

    def update(self, handles, version, flush, timeout):
        if self.kind == "vllm":
            return self._post("/collective_rpc", {"method": "update_weights_from_ipc",
                                                  "kwargs": {"zmq_handles": handles}}, timeout)
        return self._post("/update_weights_from_ipc", {"zmq_handles": handles, "flush_cache": flush,
                                                        "weight_version": str(version)}, timeout)


def devices():
    """The device keys of the engine's GPUs (torch's UUIDs), or ["cpu"]."""
    import torch
    if not torch.cuda.is_available():
        return ["cpu"]
    out = []
    for i in range(torch.cuda.device_count()):
        u = str(getattr(torch.cuda.get_device_properties(i), "uuid", i))
        out.append((i, u if u.startswith("GPU-") else f"GPU-{u}"))
    return out


class Sidecar:
    def __init__(self):
        e = os.environ
        self.kind = e.get("SKEIN_ROLLOUT_ENGINE", "sglang")
        if self.kind not in ("sglang", "vllm"):
            sys.exit(f"skein sidecar: SKEIN_ROLLOUT_ENGINE={self.kind!r}: sglang or vllm")
        self.pause_mode = e.get("SKEIN_PAUSE_GENERATION_MODE", "retract")
        if self.pause_mode not in PAUSE_MODES:
            sys.exit(f"skein sidecar: pause mode {self.pause_mode!r}: abort, retract or in_place")
        cmd = e.get("SKEIN_ENGINE_CMD")
        if not cmd:
            sys.exit("skein sidecar: $SKEIN_ENGINE_CMD (the job's --rollout-cmd) is empty")
        if not e.get("SKEIN_ENGINE_LAYOUT"):
            sys.exit("skein sidecar: $SKEIN_ENGINE_LAYOUT (the weights' names, shapes, dtypes) is not set")
        # the engine's admin key (SGLang: --admin-api-key "$SKEIN_ENGINE_API_KEY"):
        # only skein pauses it or tells it where to load weights from
        os.environ.setdefault("SKEIN_ENGINE_API_KEY", secrets.token_hex(16))
        self.retries = env_num("SKEIN_ENGINE_APPLY_RETRIES", 3, int)
        self.start_timeout = env_num("SKEIN_ENGINE_START_TIMEOUT", 600.0)
        self.apply_timeout = env_num("SKEIN_ENGINE_APPLY_TIMEOUT", 120.0)
        self.bucket = env_num("SKEIN_BUFFER_SIZE", 512 << 20, int)
        self.mode = e.get("SKEIN_TRANSFER_MODE", "")

        def cuda():
            try:
                import torch
            except ImportError as ex:
                sys.exit(f"skein sidecar: {sys.executable} cannot import torch ({ex}); SKEIN_PYTHON names the "
                         "interpreter")
            return torch.cuda.is_available()
        self.where = where = copy_where(self.mode, cuda, e)
        self.layout = load_layout(e["SKEIN_ENGINE_LAYOUT"])
        self.flat, self.metas, self.views = make_copy(self.layout, where)
        # a bucket holds whole tensors: one larger than the bucket gets its own
        self.bucket = max(self.bucket, max(m["nbytes"] for m in self.metas))
        self.engine = Engine(self.kind, cmd)
        self.job, self.member = e.get("SKEIN_JOB", ""), e.get("SKEIN_MEMBER", "")
        try:
            sd = _engines.state_dir()
        except L.Error:
            sd = os.path.join(tempfile.gettempdir(), "skein-engines")
        self.state_path = os.path.join(sd, self.job or "nojob", f"{e.get('SKEIN_ENGINE_ID', '0')}.json")
        os.makedirs(os.path.dirname(self.state_path), mode=0o755, exist_ok=True)
        self.sock_dir = tempfile.mkdtemp(prefix="skein-ipc-")  # 0700: only this uid connects
        self.state, self.since, self.reason = "starting", time.time(), ""
        self.served = None
        self.failures = self.applies = self.restarts = 0
        self.fig = {}
        self.commit_at = 0.0
        self.staging = {}
        self.stop = threading.Event()

    # ---- state ----
    def set_state(self, st, reason=None):
        if st != self.state:
            log(f"{self.state} -> {st}{': ' + reason if reason else ''}")
            self.state, self.since = st, time.time()
        if reason is not None:
            self.reason = reason
        self.write_state()

    def write_state(self):
        d = {"member": self.member, "engine": self.kind, "node": os.environ.get("SKEIN_NODE", ""),
             "url": self.engine.url if self.engine.proc else "", "pid": self.engine.proc.pid if self.engine.proc else 0,
             "state": self.state, "weight_version": self.served or 0, "since_ms": int(self.since * 1000),
             "committed": self.recv.version if hasattr(self, "recv") else 0, "reason": self.reason,
             "applies": self.applies, "failures": self.failures, "restarts": self.restarts,
             "copy": self.where, "ipc_dir": self.sock_dir, "sidecar_pid": os.getpid()}
        d.update(self.fig)
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(d, f)
        os.replace(tmp, self.state_path)

    # ---- one apply ----
    def _staging_for(self, idx):
        import torch
        if idx not in self.staging:
            self.staging[idx] = torch.empty(2 * self.bucket, dtype=torch.uint8, device=f"cuda:{idx}")
        return self.staging[idx]

    def apply(self, v):
        """Pause, update_weights_from_ipc from the copy, continue; raises on failure."""
        eng = self.engine
        t0 = time.perf_counter()
        eng.pause(self.pause_mode, 30)
        t1 = time.perf_counter()
        socks, threads, errors, handles = [], [], [], {}
        try:
            for d in devices():
                if d == "cpu":
                    key, staging = "cpu", None
                else:
                    idx, key = d
                    same = self.where == "device" and self.flat.device.index == idx
                    staging = None if same else self._staging_for(idx)
                addr = f"ipc://{self.sock_dir}/{secrets.token_hex(16)}"
                s = _ckpt.Zmq(addr, False, self.apply_timeout)
                socks.append(s)
                handles[key] = addr

                def run(s=s, staging=staging):
                    try:
                        _ckpt.send(s, self.flat, self.metas, self.bucket, staging)
                    except Exception as e:  # reported by apply's caller
                        errors.append(e)
                threads.append(threading.Thread(target=run, daemon=True))
            for t in threads:
                t.start()
            try:
                eng.update(handles, v, self.pause_mode != "in_place", self.apply_timeout)
            except L.Error as e:
                errors.insert(0, e)
                self._unblock(handles)
            for t in threads:
                t.join(self.apply_timeout + 5)
            if errors:
                raise errors[0]
        finally:
            for s in socks:
                s.close()
            for a in handles.values():
                try:
                    os.unlink(a[len("ipc://"):])
                except OSError:
                    pass
        t2 = time.perf_counter()
        eng.resume(30)
        t3 = time.perf_counter()
        eng.applied = v
        self.fig = {**{k: v for k, v in self.fig.items() if k == "step_s"}, "pause_s": round(t1 - t0, 6), "apply_s": round(t2 - t1, 6), "continue_s": round(t3 - t2, 6),
                    "idle_s": round(t3 - t0, 6)}

    def _unblock(self, handles):
        """The engine refused before its receiver connected: answer our own
        REQ so that its sender stops at once (it then sends an Exception)."""
        import pickle
        for a in handles.values():
            try:
                z = _ckpt.Zmq(a, True, 0.2)
                try:
                    z.recv()
                    z.send(b"engine refused the update")
                    z.recv()
                finally:
                    z.close()
            except L.Error:
                pass
        del pickle

    # ---- the loop ----
    def run(self):
        self.recv = (_DeviceReceiver if self.where == "fake-device" else Receiver)(self.views)
        log(f"{self.kind} ({self.mode or 'no'} job mode): copy of {len(self.metas)} tensors, {self.flat.numel()} bytes in {self.where} memory; "
            f"receiving on {self.recv.path}")
        self.engine.start()
        log(f"engine started: pid {self.engine.proc.pid}, {self.engine.url}")
        self.set_state("starting")
        backoff, aborted_at, dirty_since = 1.0, 0, 0.0
        last_err = ["", 0.0, 0]  # the last receive error logged, when, how many since
        while not self.stop.is_set():
            try:
                # short: the engine is watched between waits; a head's answer our
                # deadline cuts off stays pending in libskein for the next wait
                got_v = self.recv.wait(timeout=WAIT_S)
                if got_v:
                    now = time.time()
                    if self.commit_at:
                        self.fig["step_s"] = round(now - self.commit_at, 6)  # perf/step_time, as seen here
                    self.commit_at = now
            except L.Aborted as e:
                aborted_at = self.recv.stats.version
                log(f"update aborted: {e}")
            except L.Error as e:
                # the same error again (an agent slow to answer while a node starts
                # many processes): once, then every 30 s with its count
                msg, now = str(e), time.time()
                if msg != last_err[0] or now - last_err[1] >= 30:
                    more = f" (and {last_err[2]} more like the last)" if last_err[2] else ""
                    log(f"receive: {msg}{more}")
                    last_err[:] = [msg, now, 0]
                else:
                    last_err[2] += 1
                time.sleep(0.2)
            held = self.recv.version
            staged = self.recv.stats.version > held and self.recv.stats.version != aborted_at
            eng = self.engine
            if not eng.alive():
                rc = eng.proc.returncode if eng.proc else None
                self.restarts += 1
                self.served = None
                self.set_state("starting", f"engine exited ({rc}); restart {self.restarts}")
                time.sleep(min(backoff, 10.0))
                backoff *= 2
                eng.start()
                log(f"engine restarted: pid {eng.proc.pid}")
                continue
            got = eng.probe()
            if got is None:
                self.served = None
                if self.state != "starting" and self.state != "dirty":
                    self.set_state("starting", "the engine's probe does not answer")
                if time.time() - eng.started > self.start_timeout:
                    self.restart(f"no answer to its probe within {self.start_timeout:g} s")
                continue
            backoff = 1.0
            self.served = got
            if held == 0:
                if self.state != "syncing":
                    self.set_state("syncing", "no committed version yet")
                continue
            if got == held:
                if self.state != "ready":
                    self.failures = 0
                    self.set_state("ready", "")
                continue
            if staged:
                continue  # the copy holds a version not yet committed: apply after the verdict
            if self.state == "dirty" and time.time() - dirty_since < 0.5:
                continue
            self.set_state("updating")
            try:
                self.apply(held)
                self.applies += 1
                got = eng.probe()
                self.served = got
                if got != held:
                    raise L.PeerError(f"the engine reports version {got} after applying {held}")
                self.failures = 0
                self.fig["commit_to_ready_s"] = round(time.time() - self.commit_at, 6) if self.commit_at else 0.0
                log(f"applied version {held}: pause {self.fig['pause_s']:.3f} s, apply {self.fig['apply_s']:.3f} s, "
                    f"continue {self.fig['continue_s']:.3f} s")
                self.set_state("ready", "")
            except (L.Error, OSError) as e:
                self.failures += 1
                dirty_since = time.time()
                self.set_state("dirty", f"apply of version {held} failed ({self.failures}/{self.retries}): {e}")
                try:
                    eng.resume(5)
                except L.Error:
                    pass
                if self.failures >= self.retries:
                    self.restart(f"{self.failures} applies of version {held} failed: {e}")

    def restart(self, reason):
        log(f"restarting the engine: {reason}")
        self.engine.stop()
        self.restarts += 1
        self.failures = 0
        self.served = None
        self.engine.start()
        self.set_state("starting", f"restarted: {reason}")

    def close(self):
        self.engine.stop()
        try:
            os.rmdir(self.sock_dir)
        except OSError:
            pass
        if hasattr(self, "recv"):
            self.recv.close()


def main():
    import faulthandler
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID`: every thread's stack in the member's log
    sc = Sidecar()

    def term(*_):
        sc.stop.set()
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, term)
    try:
        sc.run()
    finally:
        sc.close()


if __name__ == "__main__":
    main()

"""skein._engines: the job's stock engines and their readiness (docs/engines.md).

Each engine's sidecar (skein.sidecar) writes its state to
STATE_DIR/JOB/ENGINE.json on its node; STATE_DIR is "engines" beside the
agent's control socket ($SKEIN_RPC inside a job; $SKEIN_ENGINE_STATE_DIR or
state_dir= outside).  engines() asks skeinctl for every node's, and reads
this node's files where skeinctl cannot answer.
"""
import json
import os
import shutil
import subprocess
import time

from . import _lib as L

FIELDS = ("member", "engine", "node", "url", "pid", "state", "weight_version", "since_ms")


def state_dir(explicit=None):
    d = explicit or os.environ.get("SKEIN_ENGINE_STATE_DIR")
    if d:
        return d
    rpc = os.environ.get("SKEIN_RPC", "")
    if rpc.startswith("unix:"):
        return os.path.join(os.path.dirname(rpc[5:]), "engines")
    raise L.InvalidArgument("no engine state folder: inside a job SKEIN_RPC names it; outside pass state_dir= "
                            "or set SKEIN_ENGINE_STATE_DIR")


def _alive(pid):
    try:
        os.kill(int(pid), 0)
        return True
    except (OSError, ValueError, TypeError):
        return False


def read(job, sdir):
    out = []
    d = os.path.join(sdir, job)
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return out
    for n in names:
        if not n.endswith(".json"):
            continue
        try:
            with open(os.path.join(d, n)) as f:
                e = json.load(f)
        except (OSError, ValueError):
            continue
        if not _alive(e.get("sidecar_pid")):
            e["state"], e["pid"] = "gone", 0  # its sidecar is not running: never ready
        out.append(e)
    return out


def _skeinctl():
    c = os.environ.get("SKEIN_CTL") or shutil.which("skeinctl")
    if not c:
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bin", "skeinctl")
        c = here if os.path.exists(here) else None
    return c


def _cluster(job):
    """Every node's engines, through skeinctl engines (the agent at $SKEIN_RPC);
    None when it cannot answer."""
    c = _skeinctl()
    if not c:
        return None
    try:
        r = subprocess.run([c, "--timeout", "3000", "engines", job, "--format", "json"], capture_output=True,
                           timeout=10, text=True)
        return json.loads(r.stdout)["engines"] if r.returncode == 0 else None
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return None


def engines(job=None, ready=True, wait_for=None, timeout=None, state_dir_=None, all_fields=False):
    """The job's engines: [{"member", "engine", "node", "url", "pid", "state",
    "weight_version", "since_ms"}], every node's through skeinctl engines
    (found as $SKEIN_CTL, on PATH or in the source tree's bin/), else this
    node's from the sidecars' files (state_dir_= forces those).  ready: only
    those whose own probe says they serve the latest committed version.
    wait_for=V: a long poll, returns once an engine is ready at V or newer
    (only those), or at timeout (seconds; None: forever) with what there is
    then."""
    job = job or os.environ.get("SKEIN_JOB")
    if not job:
        raise L.InvalidArgument("engines(): job= is needed outside a skein job")
    sdir = state_dir(state_dir_) if state_dir_ or not _skeinctl() else None
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    while True:
        es = _cluster(job) if sdir is None else None
        if es is None:
            es = read(job, sdir or state_dir())
        if ready or wait_for is not None:
            es = [e for e in es if e.get("state") == "ready"]
        if wait_for is not None:
            es = [e for e in es if int(e.get("weight_version") or 0) >= int(wait_for)]
        if wait_for is None or es or (deadline is not None and time.monotonic() >= deadline):
            return es if all_fields else [{k: e.get(k) for k in FIELDS} for e in es]
        time.sleep(0.05)

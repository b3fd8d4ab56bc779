"""skein._engines: the job's stock engines and their readiness (docs/engines.md).

Each engine's sidecar (skein.sidecar) writes its state to
STATE_DIR/JOB/ENGINE.json on its node; STATE_DIR is "engines" beside the
agent's control socket ($SKEIN_RPC inside a job; $SKEIN_ENGINE_STATE_DIR or
state_dir= outside).  This reads the node's own engines.
"""
import json
import os
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


def engines(job=None, ready=True, wait_for=None, timeout=None, state_dir_=None, all_fields=False):
    """The job's engines on this node: [{"member", "engine", "node", "url",
    "pid", "state", "weight_version", "since_ms"}].  ready: only those whose
    own probe says they serve the latest committed version.  wait_for=V: a
    long poll, returns once an engine is ready at V or newer (only those), or
    at timeout (seconds; None: forever) with what there is then."""
    job = job or os.environ.get("SKEIN_JOB")
    if not job:
        raise L.InvalidArgument("engines(): job= is needed outside a skein job")
    sdir = state_dir(state_dir_)
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    while True:
        es = read(job, sdir)
        if ready or wait_for is not None:
            es = [e for e in es if e.get("state") == "ready"]
        if wait_for is not None:
            es = [e for e in es if int(e.get("weight_version") or 0) >= int(wait_for)]
        if wait_for is None or es or (deadline is not None and time.monotonic() >= deadline):
            return es if all_fields else [{k: e.get(k) for k in FIELDS} for e in es]
        time.sleep(0.05)

"""skein._endpoint: Publisher and Receiver, one libskein endpoint each.

The manifest is built once, at construction, from the caller's tensors
(their memory is borrowed: the object keeps them alive and libskein reads or
writes them in place), so a publish or a receive is one C call and one read
of the endpoint's statistics.  Calls into libskein hold a per-endpoint lock
(close() from another thread aborts the call in flight, then waits for it
before freeing anything) and run without the GIL.

Mode and peers: explicit keywords win; inside a skein job (SKEIN_JOB and
SKEIN_RPC set by the agent) the endpoint is coordinated (docs/updates.md):
libskein takes the job's mode, folder, bucket size, watchdog and its agent's
socket from the environment (xfer_config_from_env), a publish is a
transaction the head commits or aborts (publish() returns Miles's perf/*
figures of the head's verdict, or raises skein.Aborted with its reason) and a
receiver's wait() returns only versions the head committed (coordinate=False,
or SKEIN_COORDINATE=0: not coordinated, e.g. a trainer reading back the
folder it publishes to).  Outside a job,
p2p needs host= and port=, and a disk-delta receiver polls the folder.
"""
import ctypes
import os
import threading
import time

from . import _lib as L
from ._tensors import entries

_PATHS = {"disk-delta": "disk-delta", "p2p": "p2p", "p2p-tcp": "p2p-tcp", "colocated": "colocated"}
_NOT_YET = ("broadcast", "broadcast_packed", "p2p-rdma")
_KEYS = {"dir", "host", "port", "bucket_bytes", "timeout", "streams", "encoding", "zstd", "full_every", "gc",
         "receiver_id", "keep_previous", "journal_dir", "verify_device", "threads", "coordinate",
         "device_journal_bytes"}


def _journal_where(st):
    """Where the last version's undo journal lived: "device", "device+pinned"
    (past the device budget it spilled to pinned host memory), "pinned",
    "host" (the host journals: host tensors, or CUDA ones staged on p2p),
    or "none" (no journal: a first version, keep_previous=0)."""
    dev, spill = st.device_journal_peak, st.device_journal_spilled
    if dev or spill:
        return "device+pinned" if dev and spill else "device" if dev else "pinned"
    return "host" if st.journal_bytes else "none"


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise L.InvalidArgument(f"${name}={v!r} is not an integer") from None


def _resolve(mode, kw, role):
    """The data path and keywords, with the job's defaults filled in."""
    unknown = set(kw) - _KEYS
    if unknown:
        raise TypeError(f"unknown keyword argument(s): {', '.join(sorted(unknown))}")
    kw = {k: v for k, v in kw.items() if v is not None}
    coordinate = kw.pop("coordinate", None)
    in_job = bool(os.environ.get("SKEIN_JOB"))
    can = in_job and os.environ.get("SKEIN_RPC") and os.environ.get("SKEIN_COORDINATE") != "0"
    if coordinate and not can:
        raise L.InvalidArgument("coordinate=True needs a skein job (SKEIN_JOB and SKEIN_RPC set by the agent)")
    if can and coordinate is not False and mode in (None, os.environ.get("SKEIN_TRANSFER_MODE")):
        return None, kw  # coordinated: libskein reads the job's environment itself
    if mode is None:
        mode = os.environ.get("SKEIN_TRANSFER_MODE") if in_job else None
        if not mode:
            raise L.InvalidArgument("mode= is needed outside a skein job: disk-delta (dir=), p2p-tcp "
                                    "(host=, port=) or colocated (host=, port=)")
    if mode in _NOT_YET:
        raise L.Unavailable(f"mode {mode}: only inside a skein job, where the agents give NCCL its rendezvous "
                            "(coordinated updates); outside one use disk-delta, p2p-tcp or colocated")
    if mode not in _PATHS:
        raise L.InvalidArgument(f"mode {mode!r}: one of {', '.join(_PATHS)}")
    if in_job:
        if mode == "disk-delta" and "dir" not in kw and os.environ.get("SKEIN_DISK_DIR"):
            kw["dir"] = os.environ["SKEIN_DISK_DIR"]
        if "bucket_bytes" not in kw and _env_int("SKEIN_BUFFER_SIZE"):
            kw["bucket_bytes"] = _env_int("SKEIN_BUFFER_SIZE")
        if mode == "disk-delta" and role == L.RECEIVER and "receiver_id" not in kw and os.environ.get("SKEIN_MEMBER"):
            kw["receiver_id"] = os.environ["SKEIN_MEMBER"].replace("/", ".")
    if mode == "disk-delta" and not kw.get("dir"):
        raise L.InvalidArgument("mode disk-delta needs dir= (inside a job: --update-weight-disk-dir)")
    if mode != "disk-delta" and role == L.SENDER and (not kw.get("host") or not kw.get("port")):
        raise L.InvalidArgument(f"mode {mode}: the publisher needs host= and port= of the receiver (inside a "
                                "job, coordinated updates give it every engine's)")
    rid = kw.get("receiver_id")
    if rid is not None and (not rid or "/" in rid or rid.startswith(".")):
        raise L.InvalidArgument(f"receiver_id {rid!r}: a file name (no '/', not starting with '.')")
    return _PATHS[mode], kw


class _Endpoint:
    _ROLE = None

    def __init__(self, named_tensors, mode=None, **kw):
        self._ep = ctypes.c_void_p()
        self._m = ctypes.c_void_p()
        self._lock = threading.Lock()
        self._closed = False
        path, kw = _resolve(mode, kw, self._ROLE)
        lib = self._lib = L.lib()
        self._entries = entries(named_tensors, writable=self._ROLE == L.RECEIVER)
        self._err = L.XferErr()
        self._m = ctypes.c_void_p(lib.xfer_manifest_new())
        if not self._m.value:
            raise L.OutOfMemory("xfer_manifest_new: out of memory")
        try:
            self._build(path, kw)
        except BaseException:
            self._free()
            raise
        self.bytes = int(lib.xfer_manifest_bytes(self._m))
        self.path = lib.xfer_endpoint_path(self._ep).decode()
        self.note = lib.xfer_endpoint_note(self._ep).decode()
        self.version = 0
        self.last = {}

    def _build(self, path, kw):
        lib, err = self._lib, self._err
        for e in self._entries:
            shape = (ctypes.c_int64 * max(1, len(e.shape)))(*e.shape)
            if lib.xfer_manifest_add(self._m, e.name.encode(), e.dtype, len(e.shape), shape, e.ptr, e.mem,
                                     ctypes.byref(err)) != 0:
                err.raise_()
            if e.mem == L.MEM_CUDA:
                lib.xfer_manifest_set_device(self._m, e.device)
        c = self._cfg = L.XferConfig()
        self.coordinated = path is None
        if self.coordinated:
            if lib.xfer_config_from_env(ctypes.byref(c), self._ROLE, ctypes.byref(err)) != 0:
                err.raise_()
        else:
            lib.xfer_config_init(ctypes.byref(c))
        keep = self._strings = []  # the config's strings live as long as the endpoint

        def s(v):
            b = str(v).encode()
            keep.append(b)
            return b
        if path is not None:
            c.path = s(path)
        c.role = self._ROLE
        if "bucket_bytes" in kw:
            c.bucket_bytes = int(kw["bucket_bytes"])
        if "timeout" in kw:
            c.timeout_ms = max(1, int(float(kw["timeout"]) * 1000))
        if "keep_previous" in kw:
            c.keep_previous = 1 if kw["keep_previous"] else 0
        if "journal_dir" in kw:
            c.journal_dir = s(kw["journal_dir"])
        if "device_journal_bytes" in kw:
            n = int(kw["device_journal_bytes"])
            if n < 0:
                raise L.InvalidArgument(f"device_journal_bytes {n}: a byte count, 0 for the default")
            c.device_journal_bytes = n
        if "dir" in kw:
            c.disk.dir = s(os.fspath(kw["dir"]))
        if "encoding" in kw:
            enc = {"overwrite": L.ENC_OVERWRITE, "xor": L.ENC_XOR}.get(kw["encoding"])
            if enc is None:
                raise L.InvalidArgument(f"encoding {kw['encoding']!r}: overwrite or xor")
            c.disk.encoding = enc
        if "zstd" in kw:
            c.disk.zstd_level = int(kw["zstd"])
        if "full_every" in kw:
            c.disk.full_every = int(kw["full_every"])
        if "gc" in kw:
            c.disk.gc = 1 if kw["gc"] else 0
        if "receiver_id" in kw:
            c.disk.receiver_id = s(kw["receiver_id"])
        if "host" in kw:
            c.p2p.host = s(kw["host"])
        if "port" in kw:
            c.p2p.port = int(kw["port"])
        if "streams" in kw:
            c.p2p.streams = int(kw["streams"])
        if "verify_device" in kw:
            c.verify_device = 1 if kw["verify_device"] else 0
        if "threads" in kw:
            c.threads = int(kw["threads"])
        if lib.xfer_open(ctypes.byref(self._ep), ctypes.byref(c), self._m, ctypes.byref(err)) != 0:
            err.raise_()

    # ---- figures, with Miles's names where Miles has one ----
    def _figures(self, st, wall):
        f = {
            "perf/update_weights_time": wall,                        # the whole call, Python included
            "perf/update_weights_implementation_time": st.seconds,  # libskein's own timing of it
            "skein/weight_version": st.version,
            "skein/path": self.path,
            "skein/bytes": self.bytes,
            "skein/bytes_moved": st.bytes_moved,
            "skein/data_time": st.data_seconds,
            "skein/staging_peak_bytes": st.staging_peak,
            "skein/journal_bytes": st.journal_bytes,
            "skein/journal_spilled_bytes": st.device_journal_spilled,
            "skein/journal_device_peak_bytes": st.device_journal_peak,
            "skein/journal_where": _journal_where(st),
        }
        if self.path == "disk-delta":
            f["perf/update_weights_wire_bytes"] = st.bytes_moved
            f["perf/update_weights_density"] = st.bytes_moved / self.bytes if self.bytes else 0.0
        return f

    def _call(self):
        if self._closed:
            raise L.InvalidArgument(f"{type(self).__name__} is closed")
        return self._ep

    @property
    def stats(self):
        """libskein's statistics of the last version (an XferStats)."""
        return self._lib.xfer_endpoint_stats(self._call())

    def ticket(self, job, version, nonce):
        """p2p outside a job: the hello's ticket (job name, version, 16-byte
        nonce, bytes).  A publisher presents it; a receiver given one refuses,
        before reading any data, every sender whose hello lacks it.  None as
        nonce: no ticket.  Inside a job the head gives both ends theirs."""
        if nonce is not None and (not isinstance(nonce, (bytes, bytearray)) or len(nonce) != 16):
            raise L.InvalidArgument("ticket: the nonce is 16 bytes")
        with self._lock:
            if self._lib.xfer_p2p_ticket(self._call(), str(job).encode(), int(version),
                                         None if nonce is None else bytes(nonce), ctypes.byref(self._err)) != 0:
                self._err.raise_()

    def abort(self):
        """From any thread: the call in flight returns with skein.Aborted."""
        if not self._closed and self._ep.value:
            self._lib.xfer_abort(self._ep)

    def close(self):
        """Aborts a call in flight (another thread's), waits for it, frees. Safe twice."""
        if self._closed:
            return
        self.abort()
        with self._lock:
            self._closed = True
            self._free()

    def _free(self):
        lib = self._lib if hasattr(self, "_lib") else None
        if lib is None:
            return
        if self._ep.value:
            lib.xfer_close(ctypes.byref(self._ep))
        if self._m.value:
            lib.xfer_manifest_free(ctypes.byref(self._m))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return (f"<skein.{type(self).__name__} {self.path} {len(self._entries)} tensors, {self.bytes} bytes, "
                f"version {self.version}{' closed' if self._closed else ''}>")


class Publisher(_Endpoint):
    """Publishes the current bytes of named tensors as versions.

        pub = skein.Publisher(model.named_parameters(), mode="disk-delta", dir="/shared/w")
        figures = pub.publish(step)   # {"perf/update_weights_time": ..., ...}

    Keywords: dir, host, port, bucket_bytes, timeout (s, no-progress
    watchdog), streams, encoding ("overwrite"|"xor"), zstd (level), full_every,
    gc, verify_device, threads (see transfer/include/skein_xfer.h)."""

    _ROLE = L.SENDER

    def newest_version(self):
        """Inside a job: the newest version the job ever began, committed or
        not (0: none), from the head.  A restarted trainer publishes above
        it: versions only grow, and an aborted one is spent."""
        if not self.coordinated:
            raise L.InvalidArgument("newest_version(): only a coordinated publisher (inside a job) asks the head")
        n = ctypes.c_uint64(0)
        with self._lock:
            if self._lib.xfer_job_newest(self._call(), ctypes.byref(n), ctypes.byref(self._err)) != 0:
                self._err.raise_()
        return n.value

    def publish(self, version=None):
        """Publishes version (default: the last one + 1; increasing, > 0).
        Returns once every receiver has it (p2p, colocated) or it is durably
        in the folder (disk-delta); returns the update's figures.  Inside a
        job: once the head committed it (skein.Aborted with the head's reason
        when it aborted it; the next version may follow)."""
        v = self.version + 1 if version is None else int(version)
        lib, err = self._lib, self._err
        u = L.XferUpdateStats()
        with self._lock:
            ep = self._call()
            t0 = time.perf_counter()
            rc = lib.xfer_publish(ep, v, ctypes.byref(u), ctypes.byref(err))
            wall = time.perf_counter() - t0
            if rc != 0:
                if err.code == L.Aborted.code:
                    self.version = v  # the job's versions only go up
                err.raise_()
            st = lib.xfer_endpoint_stats(ep)
        self.version = v
        self.last = self._figures(st, wall)
        if self.coordinated:
            self.last.update({
                "perf/update_weights_time": u.update_seconds,
                "perf/update_weights_implementation_time": u.implementation_seconds,
                "perf/update_weights_wire_bytes": u.wire_bytes,
                "skein/participants": u.participants,
                "skein/dropped": u.dropped,
            })
            if self.path == "disk-delta":
                self.last["perf/update_weights_density"] = u.density
        return self.last


class Receiver(_Endpoint):
    """Receives versions into named tensors (in place).

        recv = skein.Receiver(model.named_parameters(), mode="p2p-tcp", port=0)
        print(recv.port)              # where to point the publisher
        v = recv.wait(timeout=30)     # the version the tensors now hold, None if none came

    Keywords: dir, receiver_id (disk-delta: its name under dir/receivers/,
    so the publisher's gc keeps what it needs), host, port (0: any),
    keep_previous (undo journal: a failed version leaves the previous one),
    journal_dir, bucket_bytes, timeout, streams, verify_device, threads,
    device_journal_bytes (CUDA receivers: the undo journal's device memory,
    beyond it pinned host memory; 0 or absent: sized by libskein)."""

    _ROLE = L.RECEIVER

    @property
    def port(self):
        """The port a p2p-tcp or colocated receiver listens on."""
        return int(self._lib.xfer_endpoint_port(self._call()))

    @property
    def refused(self):
        """p2p: connections refused at the door so far (no or a wrong ticket,
        no hello within 2 s, another wire)."""
        return int(self._lib.xfer_p2p_refused(self._call()))

    def wait(self, timeout=None):
        """Waits up to timeout seconds (None: forever) for a version newer than
        the one held and receives it; returns its number, or None when none
        came in time.  On an error the tensors hold the previous version
        (keep_previous, the default) and the error is raised.  Inside a job
        only committed versions return; skein.Aborted says the head aborted
        the update this receiver was taking: the tensors hold the version
        before it (self.version) and waiting may go on."""
        wait_ms = -1 if timeout is None else max(0, min(int(timeout * 1000), 2**31 - 1))
        lib, err = self._lib, self._err
        v = ctypes.c_uint64()
        with self._lock:
            ep = self._call()
            t0 = time.perf_counter()
            rc = lib.xfer_receive(ep, wait_ms, ctypes.byref(v), ctypes.byref(err))
            wall = time.perf_counter() - t0
            if rc != 0:
                if err.code == L.NoVersion.code:
                    return None
                err.raise_()
            st = lib.xfer_endpoint_stats(ep)
        self.version = v.value
        self.last = self._figures(st, wall)
        self.last["skein/versions_applied"] = st.versions_applied
        return self.version

"""skein._ckpt: checkpoint-engine's weight protocol over ZeroMQ (docs/engines.md).

Both sides, written from the protocol's description: `send` is skein's (the
engine sidecar), `serve` a receiver (tests' fake engines; stock SGLang and
vLLM run checkpoint-engine's own).  The ZeroMQ bytes go through libskein's
eng_zmq_* (libzmq from C, loaded with dlopen): no pyzmq.  Python pickles.

Per device the sender binds a REQ socket, sends the pickled (rebuild_fn,
args) of a uint8 buffer, then for each bucket (whole tensors at 256-byte
aligned offsets) fills it, takes the previous answer and sends a pickled list
of {"name", "shape", "dtype", "offset"}; then None (release) and None (the
post-load hook).  An answer other than b"" is the receiver's error: the
sender then sends an Exception (every receiver stops, no answer awaited).
The CPU variant pickles a shared-memory buffer with ForkingPickler under
torch's file_system strategy (device key "cpu").
"""
import ctypes
import io
import pickle

from . import _lib as L

ALIGN = 256
_sig_done = False


def _zlib():
    global _sig_done
    lib = L.lib()
    if not _sig_done:
        P, E, Z = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
        for name, res, args in (("eng_zmq_open", ctypes.c_int, [ctypes.POINTER(P), ctypes.c_int, E, ctypes.c_int, P, Z]),
                                ("eng_zmq_send", ctypes.c_int, [P, P, Z, P, Z]),
                                ("eng_zmq_recv", ctypes.c_longlong, [P, P, Z]),
                                ("eng_zmq_data", P, [P]),
                                ("eng_zmq_close", None, [ctypes.POINTER(P)])):
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        _sig_done = True
    return lib


class Zmq:
    """One REQ (bound) or REP (connected) socket; every call times out."""

    def __init__(self, addr, rep, timeout_s):
        self._lib = _zlib()
        self._s = ctypes.c_void_p()
        self._err = ctypes.create_string_buffer(256)
        if self._lib.eng_zmq_open(ctypes.byref(self._s), 1 if rep else 0, addr.encode(), int(timeout_s * 1000),
                                  self._err, 256) != 0:
            raise L.IOFailure(f"zmq {addr}: {self._err.value.decode()}")

    def send(self, b):
        if self._lib.eng_zmq_send(self._s, b, len(b), self._err, 256) != 0:
            raise L.IOFailure(self._err.value.decode())

    def recv(self):
        n = self._lib.eng_zmq_recv(self._s, self._err, 256)
        if n < 0:
            raise L.Timeout(self._err.value.decode()) if "timed out" in self._err.value.decode() \
                else L.IOFailure(self._err.value.decode())
        return ctypes.string_at(self._lib.eng_zmq_data(self._s), n) if n else b""

    def close(self):
        if self._s.value:
            self._lib.eng_zmq_close(ctypes.byref(self._s))


def align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def pickle_handle(buf):
    """The (rebuild_fn, args) of a uint8 buffer: CUDA IPC, or shared host memory (file_system)."""
    import torch
    from torch.multiprocessing.reductions import reduce_tensor
    if buf.is_cuda:
        return pickle.dumps(reduce_tensor(buf))
    import torch.multiprocessing as mp
    from multiprocessing.reduction import ForkingPickler
    mp.set_sharing_strategy("file_system")
    if not buf.is_shared():
        buf.share_memory_()
    f = io.BytesIO()
    ForkingPickler(f, pickle.HIGHEST_PROTOCOL).dump(reduce_tensor(buf))
    del torch
    return f.getvalue()


def buckets(metas, bucket_bytes):
    """Groups metas (in buffer order; offsets absolute) into buckets of whole tensors."""
    out, cur, start = [], [], None
    for m in metas:
        end = m["offset"] + m["nbytes"]
        if cur and end - start > bucket_bytes:
            out.append(cur)
            cur, start = [], None
        if start is None:
            start = m["offset"]
        cur.append(m)
    if cur:
        out.append(cur)
    return out


def _wire(m, base):
    return {"name": m["name"], "shape": m["shape"], "dtype": m["dtype"], "offset": m["offset"] - base}


def send(sock, flat, metas, bucket_bytes, staging=None, overlap=True):
    """Drives one receiver over `sock`.  flat: the uint8 copy holding every
    tensor at its meta offset.  With `staging` (a uint8 buffer on the
    receiver's device, >= 2 buckets) each bucket is copied into alternate
    halves of it; without, flat itself is the shared buffer (no copy).
    Raises on the receiver's error, after telling it to stop.

    A CUDA staging buffer is a pipeline: bucket k+1 is copied host->device
    (non_blocking, from pinned memory) on a stream of its own while the
    engine loads bucket k from the other half; an event per bucket says it
    landed before its list is sent, and a half is refilled only after the
    engine answered the bucket it held (the receiver answers once its load
    is done: checkpoint-engine's synchronizes, as `serve` does).
    overlap=False waits for each copy before it lets the engine's load go on
    (the measure's reference, tests/gpu/engines_gpu.py)."""
    bs = buckets(metas, bucket_bytes)
    half = staging.numel() // 2 if staging is not None else 0
    for b in bs if staging is not None else ():
        if b[-1]["offset"] + b[-1]["nbytes"] - b[0]["offset"] > half:
            raise L.InvalidArgument(f"bucket of {b[-1]['offset'] + b[-1]['nbytes'] - b[0]['offset']} bytes > "
                                    f"staging half {half}")
    cuda = staging is not None and staging.is_cuda
    if cuda:
        import torch
        stream = torch.cuda.Stream(staging.device)
        stream.wait_stream(torch.cuda.current_stream(staging.device))  # flat's last writes first

    def fill(i):  # bucket i into half i % 2; returns the event that says it landed
        lo, hi = bs[i][0]["offset"], bs[i][-1]["offset"] + bs[i][-1]["nbytes"]
        dst = (i % 2) * half
        if not cuda:
            staging[dst:dst + hi - lo].copy_(flat[lo:hi])
            return None
        with torch.cuda.stream(stream):
            staging[dst:dst + hi - lo].copy_(flat[lo:hi], non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(stream)
        return ev

    try:
        sock.send(pickle_handle(staging if staging is not None else flat))
        ev = fill(0) if staging is not None and bs else None
        for i, b in enumerate(bs):
            base = 0
            if staging is not None:
                if ev is not None:
                    ev.synchronize()  # bucket i is in its half
                base = b[0]["offset"] - (i % 2) * half
            _answer(sock.recv(), "handle" if i == 0 else "bucket")  # bucket i-1 loaded: its half is free
            sock.send(pickle.dumps([_wire(m, base) for m in b]))
            if staging is not None and i + 1 < len(bs):
                ev = fill(i + 1)  # overlaps the engine's load of bucket i
                if not overlap and ev is not None:
                    ev.synchronize()
        _answer(sock.recv(), "bucket")
        sock.send(pickle.dumps(None))
        _answer(sock.recv(), "release")
        sock.send(pickle.dumps(None))
        _answer(sock.recv(), "post-load hook")
    except L.Error as e:
        if not isinstance(e, L.Timeout):
            try:
                sock.send(pickle.dumps(RuntimeError(str(e))))
            except L.Error:
                pass
        raise
    finally:
        if cuda:
            stream.synchronize()  # no copy into the staging buffer outlives the call


def _answer(b, what):
    if b:
        raise L.PeerError(f"receiver refused the {what}: {b.decode(errors='replace')[:300]}")


def serve(addr, load, post_hook=None, device=None, timeout_s=60):
    """A receiver: connects a REP socket to addr and runs the protocol;
    load(list of (name, tensor view)) is the engine's loader.  Returns the
    number of tensors loaded; raises on the sender's Exception or an error."""
    import torch
    sock = Zmq(addr, True, timeout_s)
    try:
        fn, args = pickle.loads(sock.recv())
        try:
            if device is not None and len(args) > 6 and isinstance(args[6], int):
                args = list(args)
                args[6] = device  # the receiver's own device index (CUDA IPC)
            buf = fn(*args)
        except Exception as e:
            sock.send(f"{type(e).__name__}: {e}".encode())
            sock.recv()  # the sender's next message (its Exception) before raising
            raise
        sock.send(b"")
        n = 0
        while True:
            m = pickle.loads(sock.recv())
            if isinstance(m, Exception):
                raise L.Aborted(f"sender stopped the update: {m}")
            if m is None:
                buf = None
                sock.send(b"")
                if pickle.loads(sock.recv()) is not None:
                    raise L.FormatError("expected the post-load hook's None")
                if post_hook:
                    post_hook()
                sock.send(b"")
                return n
            try:
                views = []
                for t in m:
                    dt, shape = t["dtype"], torch.Size(t["shape"])
                    nb = shape.numel() * torch.empty((), dtype=dt).element_size()
                    views.append((t["name"], buf[t["offset"]:t["offset"] + nb].view(dt).view(shape)))
                load(views)
                if buf.is_cuda:  # the sender refills this half once answered: the load must be done
                    torch.cuda.synchronize(buf.device)
                n += len(views)
            except Exception as e:
                sock.send(f"{type(e).__name__}: {e}".encode())
                sock.recv()
                raise
            sock.send(b"")
    finally:
        sock.close()

"""skein._lib: libskein loaded with ctypes, its structs, and skein's errors.

The structs mirror transfer/include/skein_xfer.h field for field (tests/python checks
sizes and offsets against a C compiler).  libskein is found, in order, at
$SKEIN_LIB, next to this package (libskein.so), or in the source tree's
build/release/.  It is loaded on first use, so `import skein` never fails for
want of it.  ctypes.CDLL releases the GIL for the length of every call: a
transfer blocks only the thread that called it.
"""
import ctypes
import os
import threading

NAME_MAX = 255
MAX_DIMS = 8
NCCL_ID_BYTES = 128

# xfer_dtype
BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64, F8E4M3, F8E5M2 = range(12)
DTYPE_NAMES = ("bool", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64",
               "f8e4m3", "f8e5m2")
MEM_HOST, MEM_CUDA = 0, 1
SENDER, RECEIVER = 0, 1
ENC_OVERWRITE, ENC_XOR = 0, 1


# ---- errors: one class per xfer_code, each carrying the C message ----

class Error(Exception):
    """A libskein failure (or an argument refused before calling it).

    `code` is libskein's xfer_code (0 for errors raised by the package
    itself, with the C code they correspond to otherwise), `message` the
    library's one-line explanation."""

    code = 0

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidArgument(Error, ValueError):
    code = 1


class OutOfMemory(Error, MemoryError):
    code = 2


class IOFailure(Error, OSError):
    code = 3


class ChecksumError(Error):
    code = 4


class Timeout(Error, TimeoutError):
    code = 5


class PeerError(Error, ConnectionError):
    code = 6


class Unavailable(Error):
    code = 7


class ChainError(Error):
    code = 8


class FormatError(Error):
    code = 9


class MismatchError(Error, ValueError):
    code = 10


class Aborted(Error):
    code = 11


class NoVersion(Error):
    code = 12


_BY_CODE = {c.code: c for c in (InvalidArgument, OutOfMemory, IOFailure, ChecksumError, Timeout,
                                PeerError, Unavailable, ChainError, FormatError, MismatchError,
                                Aborted, NoVersion)}


# ---- structs (skein_xfer.h) ----

class XferErr(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 512)]

    def raise_(self, what=""):
        msg = self.msg.decode("utf-8", "replace")
        cls = _BY_CODE.get(self.code, Error)
        raise cls(f"{what}: {msg}" if what else msg, self.code)


class _Disk(ctypes.Structure):
    _fields_ = [("dir", ctypes.c_char_p), ("encoding", ctypes.c_int), ("zstd_level", ctypes.c_int),
                ("full_every", ctypes.c_int), ("receiver_id", ctypes.c_char_p), ("gc", ctypes.c_int)]


class _P2P(ctypes.Structure):
    _fields_ = [("host", ctypes.c_char_p), ("port", ctypes.c_int), ("streams", ctypes.c_int)]


class _Nccl(ctypes.Structure):
    _fields_ = [("id", ctypes.c_ubyte * NCCL_ID_BYTES), ("nranks", ctypes.c_int), ("rank", ctypes.c_int),
                ("root", ctypes.c_int), ("device", ctypes.c_int)]


class _Coord(ctypes.Structure):
    _fields_ = [("rpc", ctypes.c_char_p), ("job", ctypes.c_char_p), ("member", ctypes.c_char_p),
                ("generation", ctypes.c_uint64)]


class XferConfig(ctypes.Structure):
    _fields_ = [("path", ctypes.c_char_p), ("role", ctypes.c_int), ("bucket_bytes", ctypes.c_uint64),
                ("timeout_ms", ctypes.c_int), ("keep_previous", ctypes.c_int),
                ("journal_dir", ctypes.c_char_p), ("disk", _Disk), ("p2p", _P2P), ("nccl", _Nccl),
                ("verify_device", ctypes.c_int), ("threads", ctypes.c_int), ("checksum", ctypes.c_int),
                ("device_journal_bytes", ctypes.c_uint64), ("coord", _Coord)]


class XferTimings(ctypes.Structure):
    _fields_ = [("data_seconds", ctypes.c_double), ("hash_seconds", ctypes.c_double),
                ("journal_seconds", ctypes.c_double), ("undo_seconds", ctypes.c_double)]


class XferUpdateStats(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint64), ("state", ctypes.c_char * 16), ("reason", ctypes.c_char * 512),
                ("update_seconds", ctypes.c_double), ("implementation_seconds", ctypes.c_double),
                ("wire_bytes", ctypes.c_uint64), ("density", ctypes.c_double),
                ("participants", ctypes.c_uint32), ("dropped", ctypes.c_uint32),
                ("timings", XferTimings), ("engines", XferTimings)]


class XferStats(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint64), ("bytes_moved", ctypes.c_uint64), ("seconds", ctypes.c_double),
                ("data_seconds", ctypes.c_double), ("staging_peak", ctypes.c_uint64),
                ("journal_bytes", ctypes.c_uint64), ("journal_seconds", ctypes.c_double),
                ("undo_seconds", ctypes.c_double), ("versions_applied", ctypes.c_uint64),
                ("full_loaded", ctypes.c_int), ("hash_seconds", ctypes.c_double),
                ("device_journal_peak", ctypes.c_uint64), ("device_journal_spilled", ctypes.c_uint64)]


# ---- loading ----

_here = os.path.dirname(os.path.abspath(__file__))
_lib = None
_lock = threading.Lock()


def candidates():
    """Where libskein is looked for, in order."""
    out = []
    if os.environ.get("SKEIN_LIB"):
        out.append(os.environ["SKEIN_LIB"])
    out.append(os.path.join(_here, "libskein.so"))
    out.append(os.path.normpath(os.path.join(_here, "..", "..", "build", "release", "libskein.so")))
    return out


def _declare(lib):
    P, I, U64, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_char_p
    E = ctypes.POINTER(XferErr)
    sig = {
        "xfer_manifest_new": (P, []),
        "xfer_manifest_free": (None, [ctypes.POINTER(P)]),
        "xfer_manifest_add": (I, [P, S, I, I, ctypes.POINTER(ctypes.c_int64), P, I, E]),
        "xfer_manifest_set_device": (None, [P, I]),
        "xfer_manifest_count": (ctypes.c_size_t, [P]),
        "xfer_manifest_bytes": (U64, [P]),
        "xfer_config_init": (None, [ctypes.POINTER(XferConfig)]),
        "xfer_config_from_env": (I, [ctypes.POINTER(XferConfig), I, E]),
        "xfer_publish": (I, [P, U64, ctypes.POINTER(XferUpdateStats), E]),
        "xfer_endpoint_update": (XferUpdateStats, [P]),
        "xfer_job_newest": (I, [P, ctypes.POINTER(U64), E]),
        "xfer_rollback": (I, [P, E]),
        "xfer_probe": (I, [S, ctypes.c_char_p, ctypes.c_size_t]),
        "xfer_open": (I, [ctypes.POINTER(P), ctypes.POINTER(XferConfig), P, E]),
        "xfer_send": (I, [P, U64, E]),
        "xfer_receive": (I, [P, I, ctypes.POINTER(U64), E]),
        "xfer_abort": (None, [P]),
        "xfer_close": (None, [ctypes.POINTER(P)]),
        "xfer_endpoint_path": (S, [P]),
        "xfer_endpoint_note": (S, [P]),
        "xfer_endpoint_port": (I, [P]),
        "xfer_p2p_ticket": (I, [P, S, U64, S, E]),
        "xfer_p2p_refused": (U64, [P]),
        "xfer_endpoint_stats": (XferStats, [P]),
        "xfer_disk_latest": (I, [S, ctypes.POINTER(U64), E]),
        "xfer_disk_gc": (I, [S, I, ctypes.POINTER(I), E]),
        "xfer_code_name": (S, [I]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args


def lib():
    """The loaded libskein (loads it on first call)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            tried = []
            for path in candidates():
                if not os.path.exists(path):
                    tried.append(f"{path} (absent)")
                    continue
                try:
                    handle = ctypes.CDLL(path)
                    _declare(handle)
                except (OSError, AttributeError) as e:
                    tried.append(f"{path} ({e})")
                    continue
                handle.skein_path = path
                _lib = handle
                break
            else:
                raise Unavailable("libskein.so not found: set SKEIN_LIB, put it next to the skein package, "
                                  "or run make; tried " + "; ".join(tried))
    return _lib

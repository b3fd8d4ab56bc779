"""skein: publish and receive model weights through libskein, from PyTorch.

    import skein
    with skein.Publisher(model.named_parameters(), mode="disk-delta", dir=d) as pub:
        pub.publish(step)                       # -> {"perf/update_weights_time": ...}
    with skein.Receiver(engine.named_parameters(), mode="disk-delta", dir=d) as recv:
        v = recv.wait(timeout=30)               # the tensors now hold version v

ctypes over libskein.so (transfer/include/skein_xfer.h): no compiler, no pip; torch is
optional (NumPy arrays work too).  Errors are skein.Error subclasses carrying
libskein's message.  See python/README.md.
"""
import ctypes as _ctypes

from ._lib import (Aborted, ChainError, ChecksumError, Error, FormatError, InvalidArgument, IOFailure,
                   MismatchError, NoVersion, OutOfMemory, PeerError, Timeout, Unavailable)
from ._endpoint import Publisher, Receiver
from ._engines import engines
from . import _lib

__all__ = ["Publisher", "Receiver", "Error", "InvalidArgument", "OutOfMemory", "IOFailure", "ChecksumError",
           "Timeout", "PeerError", "Unavailable", "ChainError", "FormatError", "MismatchError", "Aborted",
           "NoVersion", "engines", "probe", "latest_version", "library_path"]


def library_path():
    """The libskein.so in use (loads it)."""
    return _lib.lib().skein_path


def probe(mode):
    """(True, "") when libskein can run data path `mode` here, else (False, why)."""
    why = _ctypes.create_string_buffer(256)
    ok = _lib.lib().xfer_probe(mode.encode(), why, len(why)) == 0
    return ok, why.value.decode()


def latest_version(dir):
    """The newest version published in a disk-delta folder (0 when none)."""
    v, err = _ctypes.c_uint64(), _lib.XferErr()
    if _lib.lib().xfer_disk_latest(str(dir).encode(), _ctypes.byref(v), _ctypes.byref(err)) != 0:
        err.raise_()
    return v.value

"""skein._tensors: named tensors -> libskein manifest entries.

Accepts what PyTorch code has at hand: model.named_parameters() (any
iterable of (name, tensor) pairs), a state dict or any mapping, or a module
(its state dict).  Tensors may be torch tensors (CPU or CUDA) or NumPy
arrays.  A tensor must be dense and contiguous: libskein reads and writes its
bytes in place, so a copy (what .contiguous() would make of a view) would
send stale bytes or receive into memory nobody looks at.  Every refusal names
the tensor.  torch and numpy are imported only if the caller uses them.
"""
import sys

from . import _lib as L


def _torch_dtypes():
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    m = {torch.bool: L.BOOL, torch.uint8: L.U8, torch.int8: L.I8, torch.int16: L.I16, torch.int32: L.I32,
         torch.int64: L.I64, torch.float16: L.F16, torch.bfloat16: L.BF16, torch.float32: L.F32,
         torch.float64: L.F64}
    for attr, code in (("float8_e4m3fn", L.F8E4M3), ("float8_e5m2", L.F8E5M2)):
        dt = getattr(torch, attr, None)  # torch >= 2.1
        if dt is not None:
            m[dt] = code
    return m


_NUMPY_KINDS = {("b", 1): L.BOOL, ("u", 1): L.U8, ("i", 1): L.I8, ("i", 2): L.I16, ("i", 4): L.I32,
                ("i", 8): L.I64, ("f", 2): L.F16, ("f", 4): L.F32, ("f", 8): L.F64}


class Entry:
    """One tensor as libskein sees it; `obj` keeps the tensor alive."""

    __slots__ = ("name", "dtype", "shape", "ptr", "mem", "device", "nbytes", "obj")

    def __init__(self, name, dtype, shape, ptr, mem, device, nbytes, obj):
        self.name, self.dtype, self.shape, self.ptr = name, dtype, shape, ptr
        self.mem, self.device, self.nbytes, self.obj = mem, device, nbytes, obj


def _pairs(named):
    if hasattr(named, "state_dict") and callable(named.state_dict):
        named = named.state_dict()
    if hasattr(named, "items") and callable(named.items):
        named = named.items()
    for item in named:
        try:
            name, t = item
        except (TypeError, ValueError):
            raise L.InvalidArgument("expected (name, tensor) pairs, a state dict or a module; got "
                                    f"{type(item).__name__}") from None
        if not isinstance(name, str):
            raise L.InvalidArgument(f"tensor name {name!r} is not a string")
        yield name, t


def _torch_entry(name, t, dmap, writable):
    if t.layout != sys.modules["torch"].strided:
        raise L.InvalidArgument(f"tensor {name}: layout {t.layout} (only dense tensors travel)")
    dt = dmap.get(t.dtype)
    if dt is None:
        raise L.InvalidArgument(f"tensor {name}: dtype {t.dtype} is not one libskein carries "
                                f"({', '.join(L.DTYPE_NAMES)})")
    dev = t.device
    if dev.type == "cpu":
        mem, index = L.MEM_HOST, 0
    elif dev.type == "cuda":
        mem, index = L.MEM_CUDA, dev.index if dev.index is not None else 0
    else:
        raise L.InvalidArgument(f"tensor {name}: on device '{dev}'; libskein moves CPU and CUDA memory only")
    if not t.is_contiguous():
        raise L.InvalidArgument(f"tensor {name}: not contiguous (shape {tuple(t.shape)}, stride {t.stride()}); "
                                "libskein moves the tensor's own memory: make the model hold a contiguous "
                                "tensor (a .contiguous() copy would not be the model's)")
    nbytes = t.numel() * t.element_size()
    return Entry(name, dt, tuple(int(s) for s in t.shape), t.data_ptr(), mem, index, nbytes, t)


def _numpy_entry(name, a, writable):
    dt = _NUMPY_KINDS.get((a.dtype.kind, a.dtype.itemsize))
    if dt is None or a.dtype.byteorder == ">":
        raise L.InvalidArgument(f"tensor {name}: NumPy dtype {a.dtype} is not one libskein carries")
    if not a.flags.c_contiguous:
        raise L.InvalidArgument(f"tensor {name}: not C-contiguous (shape {a.shape}, strides {a.strides})")
    if writable and not a.flags.writeable:
        raise L.InvalidArgument(f"tensor {name}: read-only array cannot receive")
    return Entry(name, dt, tuple(int(s) for s in a.shape), a.ctypes.data, L.MEM_HOST, 0, a.nbytes, a)


def entries(named, writable):
    """List of Entry for the named tensors, in the order given."""
    out, seen = [], set()
    dmap = None
    for name, t in _pairs(named):
        if name in seen:
            raise L.InvalidArgument(f"tensor {name}: given twice")
        seen.add(name)
        mod = type(t).__module__
        if mod.startswith("torch"):
            if dmap is None:
                dmap = _torch_dtypes()
            out.append(_torch_entry(name, t, dmap, writable))
        elif mod.startswith("numpy") and hasattr(t, "ctypes"):
            out.append(_numpy_entry(name, t, writable))
        else:
            raise L.InvalidArgument(f"tensor {name}: a {type(t).__name__}, not a torch tensor or NumPy array")
    if not out:
        raise L.InvalidArgument("no tensors given")
    return out

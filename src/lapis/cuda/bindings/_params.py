"""Layer 3: reading what a driver-API call points at in host memory, as cuda-python passes it: host buffers
(numpy arrays, bytes, ctypes objects, or integer addresses such as `arr.ctypes.data`) and a launch's kernel
parameters (`kernelParams` as the address of a `void*` array, a buffer holding that array, or a
`(values, types)` tuple; or `extra`'s packed buffer).
"""

import ctypes

import numpy as np

# Kernel parameters whose type is a ctypes type: each is packed into a zeroed slot of this many bytes (cuda-python's
# MAX_PARAM_SIZE), from which the driver copies the parameter's size.
SLOT = 8
_SIMPLE = (ctypes.c_bool, ctypes.c_char, ctypes.c_wchar, ctypes.c_byte, ctypes.c_ubyte, ctypes.c_short,
           ctypes.c_ushort, ctypes.c_int, ctypes.c_uint, ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong,
           ctypes.c_ulonglong, ctypes.c_size_t, ctypes.c_float, ctypes.c_double)
LAUNCH_PARAM_END, LAUNCH_PARAM_BUFFER_POINTER, LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2


class BadValue(ValueError):
    """An argument the driver refuses with CUDA_ERROR_INVALID_VALUE."""


def as_address(value) -> int | None:
    """An integer address (a Python or numpy integer, a ctypes c_void_p, a handle with __int__), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, ctypes.c_void_p):
        return value.value or 0
    if hasattr(value, "getPtr") and hasattr(value, "__int__"):
        return int(value)
    return None


def host_view(obj, nbytes: int, pinned: dict | None = None) -> np.ndarray:
    """`nbytes` of host memory as a flat uint8 array: a C-contiguous numpy array's own memory (a view of it), a
    buffer's, or the memory at an integer address (trusted, as the driver trusts it). An address inside a
    cuMemAllocHost block is a view of that pinned array, so copies take the copy engine's direct path."""
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise BadValue("host memory must be a C-contiguous numpy array")
        if nbytes > obj.nbytes:
            raise BadValue(f"{nbytes} bytes overrun the host array of {obj.nbytes}")
        if obj.flags.writeable:
            return obj.reshape(-1).view(np.uint8)[:nbytes]
        return _at(obj.ctypes.data, nbytes)       # the driver writes a read-only array as any memory
    address = as_address(obj)
    if address is None:
        if obj is None:
            raise BadValue("host memory is NULL")
        try:
            view = memoryview(obj).cast("B")
        except TypeError:
            raise TypeError(f"Provided argument is of type {type(obj)} but expected Type None, int or object with "
                            "Buffer Protocol") from None
        if nbytes > view.nbytes:
            raise BadValue(f"{nbytes} bytes overrun the host buffer of {view.nbytes}")
        if view.readonly:        # bytes: cuda-python hands the driver its memory all the same (b" " * n outputs)
            return _at(ctypes.cast(ctypes.c_char_p(bytes(obj) if not isinstance(obj, bytes) else obj),
                                   ctypes.c_void_p).value, nbytes)
        return np.frombuffer(view, np.uint8)[:nbytes]
    if address == 0:
        raise BadValue("host memory is NULL")
    for start, array in (pinned or {}).items():
        if start <= address and address + nbytes <= start + array.nbytes:
            return array[address - start:address - start + nbytes]
    return _at(address, nbytes)


def _at(address: int, nbytes: int) -> np.ndarray:
    if nbytes == 0:
        return np.zeros(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))


def read_string(image) -> bytes:
    """A module image's bytes: a bytes-like object's, a str's, or the NUL-terminated bytes at an address."""
    if isinstance(image, str):
        return image.encode()
    address = as_address(image)
    if address is not None:
        if address == 0:
            raise BadValue("the image is NULL")
        return ctypes.string_at(address)
    if image is None:
        raise BadValue("the image is NULL")
    return memoryview(image).cast("B").tobytes()


def parameter_bytes(kernel_params, extra, layout: list[dict]) -> list[bytes]:
    """Each parameter's bytes (its size from `layout`, the kernel's parameters in order), read as cuLaunchKernel
    reads them."""
    n = len(layout)
    extra_address = as_address(extra) if extra is not None else 0
    no_params = kernel_params is None or as_address(kernel_params) == 0
    if not no_params and extra_address:
        raise BadValue("kernelParams and extra are both given")
    if no_params:
        if extra_address:
            return _from_extra(extra_address, layout)
        if n:
            raise BadValue(f"the kernel takes {n} parameters and none were given (kernelParams and extra are NULL)")
        return []
    address = as_address(kernel_params)
    if address is not None:
        pointers = list((ctypes.c_void_p * n).from_address(address)) if n else []
    elif isinstance(kernel_params, tuple) and len(kernel_params) == 2 and all(isinstance(t, tuple)
                                                                                for t in kernel_params):
        values, types = kernel_params
        if len(values) != len(types):
            raise TypeError("Argument 'kernelParams' has tuples with different length")
        if len(values) != n:
            raise BadValue(f"the kernel takes {n} parameters, and kernelParams has {len(values)}")
        return [_pack(value, kind, entry["size"]) for value, kind, entry in zip(values, types, layout, strict=True)]
    else:
        try:
            raw = memoryview(kernel_params).cast("B").tobytes()
        except TypeError:
            raise TypeError("Argument 'kernelParams' is not a valid type: tuple[tuple[Any, ...], tuple[Any, ...]] "
                            "or PyObject implimenting Buffer Protocol or Int") from None
        if len(raw) < 8 * n:
            raise BadValue(f"kernelParams holds {len(raw) // 8} pointers for the kernel's {n} parameters")
        pointers = [int(p) for p in np.frombuffer(raw[:8 * n], np.uint64)]
    out = []
    for i, (pointer, entry) in enumerate(zip(pointers, layout, strict=True)):
        if not pointer:
            raise BadValue(f"kernelParams[{i}] is NULL")
        out.append(ctypes.string_at(pointer, entry["size"]))
    return out


def _from_extra(address: int, layout: list[dict]) -> list[bytes]:
    """The parameters from `extra`: {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
    CU_LAUNCH_PARAM_END}, the buffer laid out as the kernel's parameters are."""
    buffer = size = None
    for i in range(0, 64, 2):
        key = ctypes.c_void_p.from_address(address + 8 * i).value or 0
        if key == LAUNCH_PARAM_END:
            break
        value = ctypes.c_void_p.from_address(address + 8 * (i + 1)).value or 0
        if key == LAUNCH_PARAM_BUFFER_POINTER:
            buffer = value
        elif key == LAUNCH_PARAM_BUFFER_SIZE:
            size = ctypes.c_size_t.from_address(value).value if value else None
        else:
            raise BadValue(f"extra holds an unknown key {key}")
    if not buffer or size is None:
        raise BadValue("extra must give CU_LAUNCH_PARAM_BUFFER_POINTER and CU_LAUNCH_PARAM_BUFFER_SIZE")
    need = max((e["offset"] + e["size"] for e in layout), default=0)
    if size < need:
        raise BadValue(f"the parameter buffer holds {size} bytes; the kernel's parameters take {need}")
    data = ctypes.string_at(buffer, size)
    return [data[e["offset"]:e["offset"] + e["size"]] for e in layout]


def _pack(value, kind, size: int) -> bytes:
    """One (value, type) of a kernelParams tuple, as cuda-python packs it: type None takes the bytes at the value's
    getPtr() (a handle, such as a CUdeviceptr) or a ctypes Structure's address, or a FastEnum as an int; a ctypes
    type converts the value into a zeroed slot."""
    if kind is None:
        get_ptr = getattr(value, "getPtr", None)
        if callable(get_ptr):
            return ctypes.string_at(get_ptr(), size)
        if isinstance(value, ctypes.Structure):
            return ctypes.string_at(ctypes.addressof(value), size)
        if _is_fast_enum(value):
            return _slot(int(value).to_bytes(4, "little", signed=True), size)
        raise TypeError(f"Provided argument is of type {type(value)} but expected Type {ctypes.Structure}, "
                        f"{ctypes.c_void_p} or CUDA Binding structure with getPtr() attribute")
    if kind in _SIMPLE:
        if not isinstance(value, kind):
            value = kind(value.item() if isinstance(value, np.generic) else value)
        return _slot(bytes(value), size)
    if kind is ctypes.c_void_p:
        if isinstance(value, int | ctypes.c_void_p):
            address = value.value or 0 if isinstance(value, ctypes.c_void_p) else value
        elif callable(getattr(value, "getPtr", None)):
            address = value.getPtr()
        else:
            raise TypeError(f"Provided argument is of type {type(value)} but expected Type {int}, {ctypes.c_void_p} "
                            "or CUDA Binding structure with getPtr() attribute")
        return _slot((address & ((1 << 64) - 1)).to_bytes(8, "little"), size)
    raise TypeError(f"Unsupported type: {kind!r}")


def _slot(raw: bytes, size: int) -> bytes:
    return (raw + bytes(max(SLOT, size) - len(raw)))[:size]


def _is_fast_enum(value) -> bool:
    return any(cls.__name__ == "FastEnum" for cls in type(value).__mro__)

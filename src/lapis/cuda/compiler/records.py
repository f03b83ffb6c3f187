"""Layer 3 compiler: record (structured) arrays in kernels, as numba's record views.

A numpy structured dtype (`np.dtype([("x", np.float32), ("y", np.int32)])`, packed or `align=True`) is the
element type `types.Record`: its scalar fields with their byte offsets, and its itemsize, as numpy lays them out.
A record array is an array argument like any other (pointer, shape, strides in elements of `itemsize` bytes).
`r[i]` of one is a `RecordRef`: the element's address, known while compiling as an array is. It is a reference, as
numba's record is a view: `rec = r[i]` binds the name to the element, and `rec.x` (or `rec['x']`) reads the field
from memory at that point, `rec.x = v` writes it there, so a later `r[i].x` sees the write. A field read or
written is one load or store of its scalar type at `element + offset` (a complex field two, its parts). A field
whose offset (or the record's itemsize) is not a multiple of its size (a packed record's) would make a misaligned
access, which the GPU faults on: it moves byte by byte instead, through a 16-byte scratch slot in the thread's
local memory (the bytes copied there, then one load of the type; or one store there, then the bytes copied out),
as numba's unaligned record loads are split into bytes. Nested records and array-valued fields are refused when
the kernel's argument is typed (`types.record_of`).
"""

from dataclasses import dataclass

from lapis.cuda.compiler import complex_values, ir
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.values import ArrayRef, Complex, Const, describe


@dataclass(frozen=True)
class RecordRef:
    """An element of a record array: its address (a global address value) and its type."""
    name: str                  # how errors name it: "an element of array 'r'"
    address: ir.Value
    type: T.Record


def element(fe, ref: ArrayRef, index) -> RecordRef:
    """ref[index] of a record array: a reference to the element."""
    if ref.type.space != "global":
        raise fe.error(f"record arrays in {ref.type.space} memory are not supported in kernels")
    return RecordRef(f"an element of array {ref.name!r}", fe.address(ref, index), ref.type.dtype)


def _field(fe, rec: RecordRef, name) -> tuple:
    """The field's type and offset, refusing a name the record does not have."""
    names = ", ".join(n for n, _, _ in rec.type.fields)
    if not isinstance(name, str):
        raise fe.error(f"a record is indexed by a field name as a constant string ({names}), not {describe(name)}")
    found = rec.type.field(name)
    if found is None:
        raise fe.error(f"record has no field {name!r} (its fields: {names})")
    return found


def _aligned(rec: RecordRef, t, offset: int) -> bool:
    size = T.component(t).itemsize
    return offset % size == 0 and rec.type.itemsize % size == 0


def _scratch(fe) -> int:
    """The byte offset of the kernel's 16-byte local-memory slot for misaligned fields (made at the first)."""
    base = getattr(fe, "record_scratch", None)
    if base is None:
        base = fe.record_scratch = -(-fe.local_bytes // 16) * 16
        fe.local_bytes = base + 16
    return base


def _copy_bytes(fe, n: int, source, target) -> None:
    """n bytes from source(k) to target(k): each an (address, space) for byte k."""
    for k in range(n):
        (src, src_space), (dst, dst_space) = source(k), target(k)
        byte = fe.emit(Op.LOAD, T.int32, [src], space=src_space, storage="uint8")
        fe.emit(Op.STORE, None, [dst, byte], space=dst_space, storage="uint8")


def _local(fe, k: int) -> tuple:
    return fe.materialize(Const(_scratch(fe) + k, T.int32), T.int32), "local"


def _load(fe, rec: RecordRef, t, offset: int, aligned: bool):
    """One scalar of type t at the element's byte offset (a small integer widened to int32)."""
    storage = {"storage": t.name} if t in T.STORAGE else {}
    if aligned:
        return fe.emit(Op.LOAD, T.int32 if storage else t, [_address(fe, rec, offset)], space="global", **storage)
    _copy_bytes(fe, t.itemsize, lambda k: (_address(fe, rec, offset + k), "global"), lambda k: _local(fe, k))
    return fe.emit(Op.LOAD, T.int32 if storage else t, [_local(fe, 0)[0]], space="local", **storage)


def _store(fe, rec: RecordRef, t, offset: int, value: ir.Value, aligned: bool) -> None:
    """value (of type t, or int32 for a small integer) into the scalar of type t at the element's byte offset."""
    storage = {"storage": t.name} if t in T.STORAGE else {}
    if aligned:
        fe.emit(Op.STORE, None, [_address(fe, rec, offset), value], space="global", **storage)
        return
    fe.emit(Op.STORE, None, [_local(fe, 0)[0], value], space="local", **storage)
    _copy_bytes(fe, t.itemsize, lambda k: _local(fe, k), lambda k: (_address(fe, rec, offset + k), "global"))


def _address(fe, rec: RecordRef, offset: int) -> ir.Value:
    if offset == 0:
        return rec.address
    return fe.emit(Op.GADDR, ir.ADDRESS, [rec.address, fe.materialize(Const(offset, T.int32), T.int32)], scale=1)


def load(fe, rec: RecordRef, name):
    """rec.name or rec['name']: the field's value, read from memory."""
    t, offset = _field(fe, rec, name)
    aligned = _aligned(rec, t, offset)
    if t.kind == "complex":
        c = T.component(t)
        return Complex(*(_load(fe, rec, c, offset + part * c.itemsize, aligned) for part in (0, 1)), t)
    return _load(fe, rec, t, offset, aligned)        # a small integer: widened to int32, as an array element


def store(fe, rec: RecordRef, name, value) -> None:
    """rec.name = value or rec['name'] = value: converted to the field's type (numba's cast) and written."""
    t, offset = _field(fe, rec, name)
    if t.kind == "complex":
        if not isinstance(value, Complex | Const | ir.Value):
            raise fe.error(f"cannot store {describe(value)} into a record field")
        z, c = complex_values.promote(fe, value, t), T.component(t)
        for part, v in enumerate((z.re, z.im)):
            _store(fe, rec, c, offset + part * c.itemsize, fe.materialize(v, c), _aligned(rec, t, offset))
        return
    if isinstance(value, Complex):
        raise complex_values.refuse(fe, value, f"as record field {name!r} of {t}")
    if not isinstance(value, Const | ir.Value):
        raise fe.error(f"cannot store {describe(value)} into record field {name!r}")
    wide = T.int32 if t in T.STORAGE else t        # a small integer: the low bytes of the value as int32
    _store(fe, rec, t, offset, fe.materialize(fe.cast(value, wide), wide), _aligned(rec, t, offset))

"""Layer 3 compiler: the types of the kernel language and numba's rules for combining them.

Scalars are int32, int64, uint32, uint64, float16, bfloat16, float32, float64, bool, complex64 and complex128 (a
pair of float32 or float64, which the frontend keeps as two float values: `complex_values.py`). The half
types are storage and arithmetic types (float16 + float16 is float16), computed in float32
and rounded back (`passes.legalize_halves`), which for +, -, *, / and sqrt gives the
correctly rounded half result. Kernel arguments follow numba: a Python int is int64 (uint64
from 2^63 up), a Python float is float64, a device array is an array of its dtype
with its number of dimensions and layout ("C", "F" or "A"). Arithmetic follows numba
(int32 + int64 -> int64, any int + float32 -> float64, int / int -> float64; uint64 with a signed
integer is int64 in an operator (`binary`: numba's integer typing, signed if either operand is) and
float64 where types merge, in comparisons, min/max and variables (`unify`: numpy's promotion, which
numba's unification follows), as numba does). One
deliberate difference: a literal in an expression is weak and takes the type of the other
operand when it can (x * 2.0 stays float32, i + 1 stays int32), as in C and JAX; a variable
assigned only literals is int64 or float64, as in numba.
"""

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class Scalar:
    name: str
    kind: str          # "int", "uint", "float", "bool", "complex" (or "vector": a register fragment)
    bits: int

    @property
    def dtype(self) -> np.dtype:
        if self.kind == "vector":
            raise TypeError(f"{self.name} is a register fragment, not an array element type")
        if self.name == "bfloat16":
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(np.bool_) if self.kind == "bool" else np.dtype(self.name)

    @property
    def half(self) -> bool:
        """A 16-bit float, kept in the low half of a 32-bit register."""
        return self.kind == "float" and self.bits == 16

    @property
    def isa_format(self) -> str:
        """The name the ISA's conversions use for this float format."""
        return {"float16": "F16", "bfloat16": "BF16", "float32": "F32", "float64": "F64"}[self.name]

    @property
    def itemsize(self) -> int:
        return 1 if self.kind == "bool" else self.bits // 8

    @property
    def wide(self) -> bool:
        """Lives in a 64-bit register pair."""
        return self.bits == 64

    def __str__(self) -> str:
        return self.name

    # numba's spelling of types on the host, for kernel signatures: float32[:, ::1] is a C-contiguous 2-d array
    # type, float32(float32, int32) a device function's signature; float32(1.5) converts a number, as numba's does.
    def __getitem__(self, dims) -> "ArrayType":
        return array_type(self, dims)

    def __call__(self, *args):
        if len(args) == 1 and not isinstance(args[0], Scalar | ArrayType):
            return self.dtype.type(args[0])
        return Signature(self, _types(args))


@dataclass(frozen=True)
class Weak:
    """The type of a literal before it meets another type: 'int' or 'float'."""
    kind: str

    def __str__(self) -> str:
        return f"literal {self.kind}"


int32 = Scalar("int32", "int", 32)
int64 = Scalar("int64", "int", 64)
uint32 = Scalar("uint32", "uint", 32)
uint64 = Scalar("uint64", "uint", 64)
float16 = Scalar("float16", "float", 16)
bfloat16 = Scalar("bfloat16", "float", 16)
float32 = Scalar("float32", "float", 32)
float64 = Scalar("float64", "float", 64)
boolean = Scalar("bool", "bool", 1)
# Complex numbers: a pair of float32 or float64 (real, imaginary). The frontend keeps each part a float value of
# its own (`values.Complex`, `complex_values.py`), so no IR value and no register is ever complex.
complex64 = Scalar("complex64", "complex", 64)
complex128 = Scalar("complex128", "complex", 128)
WEAK_INT, WEAK_FLOAT, WEAK_COMPLEX = Weak("int"), Weak("float"), Weak("complex")
# Matrix-instruction fragments: several 32-bit registers held together (an even pair or an aligned quad).
u32x2 = Scalar("u32x2", "vector", 64)
u32x4 = Scalar("u32x4", "vector", 128)
f32x4 = Scalar("f32x4", "vector", 128)
FRAGMENTS = {t.name: t for t in (u32x2, u32x4, f32x4)}
# Array element types only: an element loads into an int32 register (sign- or zero-extended, so it keeps its
# value and computes as numba's, which widens them) and stores its low bytes (wrapping, as numpy's cast).
int8, uint8 = Scalar("int8", "int", 8), Scalar("uint8", "uint", 8)
int16, uint16 = Scalar("int16", "int", 16), Scalar("uint16", "uint", 16)
STORAGE = frozenset({int8, uint8, int16, uint16})
SCALARS = {t.name: t for t in (int32, int64, uint32, uint64, float16, bfloat16, float32, float64, boolean,
                               int8, uint8, int16, uint16, complex64, complex128)}


@dataclass(frozen=True)
class Record:
    """A numpy record (structured) dtype as an array element type (numba's `Record`, `from_dtype`): its scalar
    fields as (name, type, byte offset) and its itemsize, as numpy lays them out (packed, or `align=True`). An
    element is read and written field by field, in memory (`records.py`); nested records and array-valued fields
    are refused."""
    fields: tuple               # ((name, Scalar, offset), ...) in numpy's order
    itemsize: int
    aligned: bool = False
    kind = "record"

    @property
    def name(self) -> str:
        return str(self)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype({"names": [f[0] for f in self.fields], "formats": [f[1].dtype for f in self.fields],
                         "offsets": [f[2] for f in self.fields], "itemsize": self.itemsize}, align=self.aligned)

    def field(self, name: str):
        """(type, offset) of the field `name`, or None."""
        return next(((t, offset) for n, t, offset in self.fields if n == name), None)

    def __str__(self) -> str:          # numba's spelling (and the compile cache's key: every offset is in it)
        fields = ",".join(f"{n}[type={t};offset={offset}]" for n, t, offset in self.fields)
        return f"Record({fields};{self.itemsize};{self.aligned})"

    def __getitem__(self, dims) -> "ArrayType":
        return array_type(self, dims)


@dataclass(frozen=True)
class ArrayType:
    dtype: "Scalar | Record"
    ndim: int
    layout: str = "A"          # "C", "F" or "A"
    space: str = "global"      # "global", "shared" or "local"
    shape: tuple[int, ...] | None = None    # static shape (shared and local arrays)

    def __str__(self) -> str:
        where = "" if self.space == "global" else f" in {self.space} memory"
        return f"array({self.dtype}, {self.ndim}d, {self.layout}){where}"


@dataclass(frozen=True)
class Signature:
    """numba's signature object: `void(float32[:], int32)` (a kernel's) or `float32(float32)` (a device function's)."""
    return_type: "Scalar | Void"
    args: tuple

    def __str__(self) -> str:
        return f"{self.return_type}({', '.join(map(str, self.args))})"


class Void:
    """numba's `void`, the return type of a kernel: void(float32[:], int32) is a kernel's signature."""

    def __call__(self, *args) -> Signature:
        return Signature(self, _types(args))

    def __repr__(self) -> str:
        return "void"


void = Void()


def _types(args: tuple) -> tuple:
    for a in args:
        if not isinstance(a, Scalar | ArrayType):
            raise TypeError(f"a signature's argument types are types such as float32 or float32[:], not {a!r}")
    return tuple(args)


def array_type(dtype: Scalar, dims) -> ArrayType:
    """numba's array type from its subscript: [:] or [::1] one dimension, [:, :] two, with '::1' on the last
    dimension C-contiguous and on the first F-contiguous (the one dimension of [::1] is C)."""
    dims = dims if isinstance(dims, tuple) else (dims,)
    steps = []
    for d in dims:
        if not isinstance(d, slice) or d.start is not None or d.stop is not None or d.step not in (None, 1):
            raise TypeError(f"an array type's dimensions are ':' or '::1', as in {dtype}[:, ::1]; got {d!r}")
        steps.append(d.step)
    if steps.count(1) > 1 or 1 in steps[1:-1]:
        raise TypeError(f"an array type has '::1' on its first or last dimension only, once; got {dtype}{list(dims)}")
    layout = "C" if steps[-1] == 1 else "F" if steps[0] == 1 else "A"
    return ArrayType(dtype, len(steps), layout)


def scalar_of(dtype) -> Scalar:
    """The kernel-language scalar for a numpy dtype, a type object or a name."""
    if isinstance(dtype, Scalar):
        return dtype
    known = _SCALAR_OF_DTYPE.get(dtype) if isinstance(dtype, np.dtype) else None
    if known is not None:                     # every launch asks for its arrays' dtypes
        return known
    if isinstance(dtype, np.dtype) and not dtype.isnative:       # '>f4': numba refuses it too
        raise TypeError(f"Unsupported array dtype: {dtype.str}: its byte order is not this machine's (a kernel would "
                        "read its bytes in the wrong order); convert with .astype(a.dtype.newbyteorder('='))")
    name = np.dtype(dtype).name if not isinstance(dtype, str) or dtype in np.sctypeDict else dtype
    if name == "bool":
        return boolean
    if name not in SCALARS:
        raise TypeError(f"dtype {name} is not supported in kernels (use one of {', '.join(SCALARS)})")
    if isinstance(dtype, np.dtype):
        _SCALAR_OF_DTYPE[dtype] = SCALARS[name]
    return SCALARS[name]


_SCALAR_OF_DTYPE: dict[np.dtype, Scalar] = {np.dtype(bool): boolean}


def element_of(dtype):
    """An array's element type for a numpy dtype: `scalar_of`'s, or a `Record` for a structured dtype."""
    if isinstance(dtype, Record):
        return dtype
    if isinstance(dtype, np.dtype) and dtype.fields is not None:
        return record_of(dtype)
    return scalar_of(dtype)


def record_of(dtype: np.dtype) -> Record:
    """The `Record` type of a structured dtype (numba's `from_dtype`), refusing what kernels cannot read."""
    known = _RECORD_OF_DTYPE.get(dtype)
    if known is not None:
        return known
    fields = []
    for name in dtype.names:
        field, offset = dtype.fields[name][:2]
        if field.fields is not None:
            raise TypeError(f"record dtype {dtype}: field {name!r} is itself a record; nested records are not "
                            "supported in kernels")
        if field.subdtype is not None:
            raise TypeError(f"record dtype {dtype}: field {name!r} is an array ({field}); array-valued fields are "
                            "not supported in kernels")
        if not field.isnative:
            raise TypeError(f"record dtype {dtype}: field {name!r} is not in the machine's byte order")
        fields.append((name, scalar_of(field), offset))
    record = _RECORD_OF_DTYPE[dtype] = Record(tuple(fields), dtype.itemsize, dtype.isalignedstruct)
    return record


_RECORD_OF_DTYPE: dict[np.dtype, Record] = {}


def concrete(t):
    """A weak literal type made concrete, as numba types a variable holding a literal."""
    if t == WEAK_INT:
        return int64
    if t == WEAK_FLOAT:
        return float64
    if t == WEAK_COMPLEX:
        return complex128
    return t


def is_complex(t) -> bool:
    """Whether t is a complex type (complex64, complex128 or a complex literal's)."""
    return getattr(t, "kind", None) == "complex"


def component(t):
    """The type of a complex type's parts (float32 for complex64, float64 for complex128, a float literal's for a
    complex literal's); any other type is its own."""
    if t == WEAK_COMPLEX:
        return WEAK_FLOAT
    if t == complex64:
        return float32
    if t == complex128:
        return float64
    return t


def complex_of(t):
    """The complex type whose parts have type t (a float32 or narrower float: complex64; an integer: complex128)."""
    if isinstance(t, Weak):
        return WEAK_COMPLEX
    if t.kind == "complex":
        return t
    return complex64 if t.kind == "float" and t.bits <= 32 else complex128


def unify(a, b):
    """The type two numeric types combine to, numba's way (with weak literals)."""
    if a == b:
        return a
    if is_complex(a) or is_complex(b):        # numba's: the parts' types unified (a bool takes the other's)
        if getattr(a, "kind", None) == "bool" or getattr(b, "kind", None) == "bool":
            return b if a.kind == "bool" else a
        return complex_of(unify(component(a), component(b)))
    if isinstance(a, Weak) and isinstance(b, Weak):
        return WEAK_FLOAT if "float" in (a.kind, b.kind) else WEAK_INT
    if isinstance(a, Weak):
        a, b = b, a
    if isinstance(b, Weak):        # a is concrete
        if a.kind == "bool":
            return int64 if b.kind == "int" else float64
        if b.kind == "int" or a.kind == "float":
            return a
        return float64             # an integer meets a float literal
    if a.kind == "bool":
        a = uint64 if b == uint64 else int64
    if b.kind == "bool":
        b = uint64 if a == uint64 else int64
    if a == b:
        return a
    if a.kind == "float" or b.kind == "float":
        if a.kind == "float" and b.kind == "float":
            if a.bits == b.bits:             # float16 meets bfloat16
                return float32
            return a if a.bits > b.bits else b
        f = a if a.kind == "float" else b
        i = b if f is a else a
        return float32 if f == float32 and i.bits <= 16 else float64
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    if uint64 in (a, b):           # signed meets uint64: no integer type holds both (numpy's float64)
        return float64
    return int64                   # signed meets a narrower unsigned


def binary(a, b):
    """The type of an arithmetic or bitwise operator's result (+ - * // % & | ^): `unify`'s, except that uint64
    with a signed integer or a bool is int64, numba's integer typing (signed if either operand is, at least 64
    bits), not numpy's float64."""
    other = b if a == uint64 else a if b == uint64 else None
    if isinstance(other, Scalar) and other.kind in ("int", "bool"):
        return int64
    return unify(a, b)


def can_hold(var, value) -> bool:
    """Whether assigning a value of type `value` to a variable of type `var` loses nothing numba
    would have kept, i.e. the variable need not widen."""
    return unify(var, value) == var

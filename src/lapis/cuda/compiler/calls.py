"""Layer 3 compiler: every call a kernel may make, in one table.

A kernel calls intrinsics (`cuda.grid`, `cuda.atomic.add`, ...), Python builtins (`abs`, `min`,
`float`, `complex`, ...), dtypes as casts (`cuda.float32(x)`), `math` functions and `cmath`'s (on complex numbers,
`complex_values.py`). Each has one `Builtin`
entry in `CALLS`, keyed by the object the kernel names: the name it goes by, its parameters
(each with the `Kind` of value it accepts) and the function that lowers a call to IR.
`Frontend.expr_Call` looks the callee up and binds the arguments to the parameters
(`Builtin.bind`: count, keywords, kinds) before lowering, so every misuse is a `CompileError`
at the call's file and line, and a lowering only ever sees arguments of the kinds it asked for.
Device functions are not here: the frontend compiles their bodies in place (`Frontend.inline`).
"""

import cmath
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lapis.cuda import cooperative_groups, libdevice, libdevice64, libdevice64_derived
from lapis.cuda.compiler import complex_values, ir
from lapis.cuda.compiler import intrinsics as K
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.values import ArrayRef, Complex, Const, describe, dtype_of, fold

NOTHING = Const(0, T.WEAK_INT)        # what a call without a result gives, as `syncthreads()`


# -- what a parameter accepts -------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    """A kind of argument: the test a value must pass, and the words an error uses for it."""
    what: str
    accepts: Callable[[object], bool]


def _number_type(x):
    """The type of a number (a Const or a scalar Value); None for anything else."""
    if isinstance(x, Const | ir.Value) and getattr(x.type, "kind", None) not in (None, "vector"):
        return x.type
    return None


def _is_integer(x) -> bool:
    return getattr(_number_type(x), "kind", None) in ("int", "uint")


def _is_int_constant(x) -> bool:
    return isinstance(x, Const) and isinstance(x.value, int) and x.type != T.boolean


NUMBER = Kind("a number", lambda x: _number_type(x) is not None)
REAL_OR_COMPLEX = Kind("a number (real or complex)", lambda x: isinstance(x, Complex) or _number_type(x) is not None)
INTEGER = Kind("an integer", _is_integer)
INDEX = Kind("an integer or a tuple of integers",
             lambda x: all(map(_is_integer, x)) if isinstance(x, tuple) else _is_integer(x))
INT_CONSTANT = Kind("an integer constant", _is_int_constant)
def constant_shape(x) -> tuple | None:
    """x as a shape known when the kernel compiles, a tuple of int Consts, or None: an int literal or a tuple of
    them, and also what names one, as numba folds constants: a global or closure tuple of ints (`SHAPE = 16, 16`),
    a local bound to a constant (`N = 100`, which the frontend keeps as a constant instruction)."""
    items = x if isinstance(x, tuple) else (x,)
    shape = []
    for item in items:
        if isinstance(item, ir.Value) and item.op is Op.CONST:
            item = Const(item.attrs["value"], item.type)
        elif isinstance(item, int) and not isinstance(item, bool):
            item = Const(item, T.WEAK_INT)
        if not _is_int_constant(item):
            return None
        shape.append(item)
    return tuple(shape)


SHAPE = Kind("a constant shape (an integer or a tuple of integers)", lambda x: constant_shape(x) is not None)
NDIM = Kind("a constant 1, 2 or 3", lambda x: _is_int_constant(x) and x.value in (1, 2, 3))
SHUFFLED = Kind("a number other than a bool (shuffle int(flag) and compare after)",
                lambda x: _number_type(x) not in (None, T.boolean))
DTYPE = Kind("a dtype (such as cuda.float32)", lambda x: dtype_of(x) is not None)
HALF_DTYPE = Kind("cuda.float16 or cuda.bfloat16", lambda x: dtype_of(x) in (T.float16, T.bfloat16))
HOST_ARRAY = Kind("a numpy array known when the kernel compiles", lambda x: isinstance(x, np.ndarray))
FRAGMENT = Kind("a matrix fragment", lambda x: isinstance(x, ir.Value) and x.type.kind == "vector")


def array_of(dtypes: tuple[T.Scalar, ...], spaces: tuple[str, ...]) -> Kind:
    """An array in one of `spaces` with one of `dtypes` as its element type."""
    what = f"a {' or '.join(spaces)} array of {', '.join(t.name for t in dtypes)}"
    return Kind(what, lambda x: isinstance(x, ArrayRef) and x.type.space in spaces and x.type.dtype in dtypes)


def fragment(t: T.Scalar) -> Kind:
    return Kind(f"a {t} fragment", lambda x: isinstance(x, ir.Value) and x.type == t)


# -- the entries --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    name: str
    kind: Kind = NUMBER
    optional: bool = False


@dataclass(frozen=True)
class Builtin:
    """A function kernels may call: its name, its parameters, and how a checked call lowers to IR."""
    name: str
    params: tuple[Param, ...]
    lower: Callable                   # (frontend, the bound arguments) -> the call's value
    variadic: bool = False            # the last parameter repeats, as min(a, b, c)
    keywords: bool = False            # parameters may be passed by name, as shared.array(shape=..., dtype=...)

    def bind(self, args: list, keywords: dict, error: Callable[[str], Exception]) -> list:
        """The arguments in parameter order (an optional one left out ends the list), once their count,
        their names and their kinds are right; else `error(message)` is raised."""
        required = sum(not p.optional for p in self.params)
        if keywords and not self.keywords:
            raise error(f"{self.name}() takes no keyword arguments")
        if not self.variadic and len(args) > len(self.params):
            raise error(f"{self.name}() takes {self._count()}, got {len(args)}")
        bound = dict(enumerate(args))
        for name, value in keywords.items():
            index = next((i for i, p in enumerate(self.params) if p.name == name), None)
            if index is None:
                raise error(f"{self.name}() got an unexpected keyword argument {name!r}")
            if index in bound:
                raise error(f"{self.name}() got multiple values for argument {name!r}")
            bound[index] = value
        given = len(bound)
        if given < required or sorted(bound) != list(range(given)):
            raise error(f"{self.name}() takes {self._count()}, got {given}")
        for i, value in bound.items():
            param = self.params[min(i, len(self.params) - 1)]
            if not param.kind.accepts(value):
                raise error(f"{self.name}() argument {i + 1} ({param.name}) must be {param.kind.what}, "
                            f"not {describe(value)}")
        return [bound[i] for i in range(given)]

    def _count(self) -> str:
        names = ", ".join(p.name for p in self.params)
        low, high = sum(not p.optional for p in self.params), len(self.params)
        if self.variadic:
            return f"{low} or more arguments ({names}, ...)"
        if high == 0:
            return "no arguments"
        count = f"{low} to {high}" if low != high else str(high)
        return f"{count} argument{'s' if high != 1 else ''} ({names})"


def lookup(fn) -> Builtin | None:
    """The table's entry for what a kernel calls, if it has one."""
    try:
        return CALLS.get(fn)
    except TypeError:                 # an unhashable value (an array) is no function
        return None


# -- lowerings: (frontend, arguments) -> value ------------------------------------------------
def _barrier(fe, args):
    fe.emit(Op.BARRIER, None)
    return NOTHING


def _this_grid(fe, args):
    return K.grid_group


def _grid_sync(fe, args):
    word = fe.hidden_array(cooperative_groups.BARRIER_WORD, T.uint32)
    fe.inline(cooperative_groups.grid_sync, [word])
    return NOTHING


def _bits_of_width(name: str):
    """cuda.brev, clz or ffs: libdevice's function of the argument's width (32 or 64 bits), as CUDA has __brev
    and __brevll."""
    def lower(fe, args):
        (x,) = args
        t = fe.typeof(x)
        bits = 64 if isinstance(t, T.Scalar) and t.bits == 64 else 32
        return fe.inline(getattr(libdevice, f"{name}{bits}"), [x])
    return lower


def _fma(fe, args):
    """cuda.fma(a, b, c): one fused multiply-add in the arguments' float type (float64 for integers), whatever the
    optimiser does to a * b + c written out (a product it shares with another expression is not contracted)."""
    t = T.WEAK_FLOAT
    for a in args:
        t = T.unify(t, fe.typeof(a))
    t = T.float64 if isinstance(t, T.Weak) or t.kind != "float" else t
    if t.half:
        raise fe.error("cuda.fma takes float32 or float64 numbers (cuda.fp16.hfma is the half-precision one)")
    return fe.emit(Op.MATH, t, [fe.materialize(fe.cast(a, t), t) for a in args], fn="fma")


def _fence(scope: str):
    def lower(fe, args):
        fe.emit(Op.FENCE, None, scope=scope)
        return NOTHING
    return lower


def _syncwarp(fe, args):
    return NOTHING                    # lanes at one PC already execute together (see the docs)


def _grid(absolute: bool):
    """cuda.grid(ndim), the thread's absolute index, or cuda.gridsize(ndim), the grid's size in threads."""
    def lower(fe, args):
        ndim = args[0].value
        out = []
        for axis in "xyz"[:ndim]:
            if absolute:
                value = fe.binop(Op.ADD, fe.binop(Op.MUL, fe.dim3(K.blockIdx, axis), fe.dim3(K.blockDim, axis)),
                                 fe.dim3(K.threadIdx, axis))
            else:
                value = fe.binop(Op.MUL, fe.dim3(K.blockDim, axis), fe.dim3(K.gridDim, axis))
            out.append(value)
        return out[0] if ndim == 1 else tuple(out)
    return lower


def _array(space: str):
    """cuda.shared.array or cuda.local.array."""
    def lower(fe, args):
        shape, dtype = args
        t = dtype_of(dtype)
        if space == "local" and t in T.STORAGE:
            raise fe.error(f"local arrays of {t} are not supported; make it int32 (global and shared arrays of "
                           f"{t} are)")
        return fe.allocate_array(space, constant_shape(shape), t)
    return lower


def _const_array(fe, args):
    return fe.constant_array(np.ascontiguousarray(args[0]))


def _atomic(op: str):
    """cuda.atomic.<op>(array, index, value[, value]): the old value of array[index]."""
    def lower(fe, args):
        ref, index, *values = args
        t = ref.type.dtype
        values = [fe.materialize(fe.cast(v, t), t) for v in values]
        kind = op
        if op == "sub":
            kind, values = "add", [fe.materialize(fe.neg(values[0]), t)]
        return fe.emit(Op.ATOMIC, t, [fe.address(ref, index), *values], op=kind, space=ref.type.space)
    return lower


def _atomic_update(name: str):
    """cuda.atomic.<name>(array, index, value) for and_, or_, xor, inc, dec: one ATOMG/ATOMS; for inc and dec of
    int64, which the ISA's 64-bit atomics (unsigned) would compare wrongly, libdevice's compare-and-swap loop,
    inlined. The old value."""
    op = name.rstrip("_")

    def lower(fe, args):
        ref, index, value = args
        t = ref.type.dtype
        if op in ("inc", "dec") and t == T.int64:
            return fe.inline(libdevice.ATOMIC_UPDATES[op], [ref, index, fe.materialize(fe.cast(value, t), t)])
        return _atomic(op)(fe, args)
    return lower


def _compare_and_swap(fe, args):
    ref, old, value = args
    return _atomic("cas")(fe, [ref, Const(0, T.WEAK_INT), old, value])


def _shuffle(mode: str):
    def lower(fe, args):
        _, value, lane = args
        t = T.concrete(fe.typeof(value))
        return fe.emit(Op.SHFL, t, [fe.materialize(value, t), fe.materialize(fe.cast(lane, T.int32), T.int32)],
                       mode=mode)
    return lower


def _vote(mode: str):
    def lower(fe, args):
        pred = fe.materialize(fe.to_bool(args[1]), T.boolean)
        return fe.emit(Op.VOTE, T.boolean, [pred], mode=mode)
    return lower


def _ballot(fe, args):
    return fe.emit(Op.BALLOT, T.uint32, [fe.materialize(fe.to_bool(args[1]), T.boolean)])


def _mma_load(fe, args):
    ref, index, count = args
    if ref.type.dtype == T.float32 and count.value != 4:
        raise fe.error("cuda.mma.load reads float32 words four at a time (an f32x4 fragment)")
    t = T.f32x4 if ref.type.dtype == T.float32 else T.u32x2 if count.value == 2 else T.u32x4
    return fe.emit(Op.VLOAD, t, [fe.address(ref, index)], space=ref.type.space)


def _mma_store(fe, args):
    ref, index, frag = args
    if (ref.type.dtype == T.float32) != (frag.type == T.f32x4):
        raise fe.error(f"cuda.mma.store writes an f32x4 fragment to a float32 array and a u32x2 or u32x4 one to a "
                       f"uint32 array, not a {frag.type} fragment to a {ref.type.dtype} array")
    fe.emit(Op.VSTORE, None, [fe.address(ref, index), frag], space=ref.type.space)
    return NOTHING


def _mma_zeros(fe, args):
    return fe.emit(Op.VZERO, T.f32x4, [])


def _mma_sync(fe, args):
    a, b, c, dtype = args
    return fe.emit(Op.MMA, T.f32x4, [a, b, c], kind=dtype_of(dtype).isa_format)


def _mma_get(fe, args):
    frag, index = args
    words = frag.type.bits // 32
    if not 0 <= index.value < words:
        raise fe.error(f"fragment index {index.value} is outside 0..{words - 1}")
    return fe.emit(Op.VGET, T.float32 if frag.type == T.f32x4 else T.uint32, [frag], index=index.value)


def _mma_pack(fe, args):
    words = [fe.materialize(fe.cast(x, T.float32), T.float32) for x in args]
    return fe.emit(Op.VPACK, T.f32x4, words)


def _extremum(op: Op):
    """min(a, b, ...) or max(a, b, ...)."""
    def lower(fe, args):
        result = args[0]
        for a in args[1:]:
            result = fe.binop(op, result, a)
        return result
    return lower


def _round(fe, args):
    """round(x): Python's, to the nearest integer with ties to even (FRND.RN), as an int64 (numba's); an integer
    is itself. round(x, ndigits) is refused."""
    x, ndigits = (*args, None)[:2]
    if ndigits is not None:
        raise fe.error("round(x, ndigits) is not supported in kernels; round(x) is")
    t = fe.typeof(x)
    if isinstance(x, Const) and isinstance(x.value, int | float):
        return Const(round(x.value), T.WEAK_INT)
    if getattr(t, "kind", "") != "float" and t != T.WEAK_FLOAT:
        return x
    t = T.concrete(t)
    return fe.cast(fe.emit(Op.MATH, t, [fe.materialize(x, t)], fn="rint"), T.int64)


def _scaled_by(factor: float):
    """math.degrees or math.radians: one multiplication by 180/pi or pi/180, as CPython computes them."""
    def lower(fe, args):
        (x,) = args
        t = fe.typeof(x)
        if getattr(t, "kind", "") not in ("float", "") and t != T.WEAK_FLOAT:
            x = fe.cast(x, T.float64)
        return fe.binop(Op.MUL, x, Const(factor, T.WEAK_FLOAT))
    return lower


def _abs(fe, args):
    (x,) = args
    if isinstance(x, Complex):
        return complex_values.absolute(fe, x)
    t = fe.typeof(x)
    if isinstance(x, Const):
        return Const(abs(x.value), t)
    if t.kind == "float":
        return fe.emit(Op.MATH, t, [x], fn="fabs")
    if t.kind == "uint":                      # its own absolute value (max(x, -x) would compare unsigned)
        return x
    return fe.binop(Op.MAX, x, fe.neg(x))


def _cast(t: T.Scalar):
    """float(x), int(x), cuda.float32(x), ...: x converted to t; to a small integer type (np.uint8(x)) the int32
    holding the value it wraps to, as an element of that type holds it."""
    def lower(fe, args):
        if t in T.STORAGE:
            mask, sign = (1 << t.bits) - 1, (1 << (t.bits - 1)) if t.kind == "int" else 0
            low = fe.binop(Op.AND, fe.cast(args[0], T.int32), Const(mask, T.WEAK_INT))
            return fe.binop(Op.SUB, fe.binop(Op.XOR, low, Const(sign, T.WEAK_INT)), Const(sign, T.WEAK_INT))
        return fe.to_bool(args[0]) if t == T.boolean else fe.cast(args[0], t)
    return lower


def _int(fe, args):
    """int(x): int64, or a uint64 kept as it is (numba's int() of a uint64 is a uint64)."""
    (x,) = args
    return x if fe.typeof(x) == T.uint64 else fe.cast(x, T.int64)


def _complex(fe, args):
    """complex(), complex(x), complex(re, im)."""
    return complex_values.construct(fe, args)


def _complex_cast(t: T.Scalar):
    """np.complex64(x), cuda.complex128(x), ...: x (real or complex) converted to t."""
    def lower(fe, args):
        return complex_values.convert(fe, args[0], t)
    return lower


def _cmath(name: str):
    def lower(fe, args):
        return complex_values.cmath_call(fe, name, args)
    return lower


def _numpy_math(name: str):
    """A numpy ufunc called on a number: math's function of the same meaning, or cmath's for a complex (np.exp(z)
    is cmath.exp(z), as numba compiles it)."""
    def lower(fe, args):
        if any(isinstance(a, Complex) for a in args):
            if len(args) != 1 or name not in complex_values.CMATH:
                raise fe.error(f"numpy's {name} of a complex number is not supported in kernels")
            return complex_values.cmath_call(fe, name, args)
        return _math(name)(fe, args)
    return lower


def _conjugate(fe, args):
    return complex_values.call_method(fe, complex_values.Method("conjugate", args[0]), [])


def _part(attr: str):
    """np.real(x), np.imag(x)."""
    def lower(fe, args):
        return complex_values.attribute(fe, args[0], attr)
    return lower


def _range(fe, args):
    raise fe.error("range() can only be used as the iterable of a for loop")


SIZED = Kind("an array or a tuple", lambda x: isinstance(x, ArrayRef | tuple))


def _len(fe, args):
    """len(): a tuple's length, or an array's first dimension (numba's)."""
    (x,) = args
    if isinstance(x, tuple):
        return Const(len(x), T.WEAK_INT)
    if x.type.ndim == 0:
        raise fe.error("len() of a 0-d array")
    return fe.shape(x)[0]


# Math the hardware does in one instruction: the special function unit's approximations (MUFU, in
# float32), and what is exact in any float type. The rest is libdevice's, in float32.
SPECIAL_FUNCTION_UNIT = frozenset({"sqrt", "sin", "cos", "exp2", "log2", "rcp"})
EXACT = frozenset({"fabs", "floor", "ceil", "trunc"})
LIBDEVICE = {"exp": libdevice.expf, "log": libdevice.logf, "log10": libdevice.log10f, "log1p": libdevice.log1pf,
             "tan": libdevice.tanf, "atan": libdevice.atanf, "atan2": libdevice.atan2f,
             "expm1": libdevice.expm1f, "sinh": libdevice.sinhf, "cosh": libdevice.coshf, "tanh": libdevice.tanhf,
             "erf": libdevice.erff, "erfc": libdevice.erfcf, "pow": libdevice.powf,
             "asin": libdevice.asinf, "acos": libdevice.acosf, "cbrt": libdevice.cbrt}


# float64 functions, computed in float64 (every math function has one); those without a float32
# function of their own (asinh, acosh, atanh, hypot, fmod, gamma, lgamma) are computed in float64 for float32 too,
# and rounded (fmod exactly: a float32 remainder is a float32)
LIBDEVICE_FLOAT64 = {"sqrt": libdevice64.sqrt, "exp": libdevice64.exp, "log": libdevice64.log,
                     "log10": libdevice64.log10, "pow": libdevice64.pow, "sin": libdevice64.sin,
                     "cos": libdevice64.cos, "tan": libdevice64.tan,
                     **{name: getattr(libdevice64_derived, name)
                        for name in ("log2", "log1p", "expm1", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
                                     "cbrt", "hypot", "atan", "atan2", "asin", "acos", "fmod", "gamma",
                                     "lgamma", "exp2", "erf", "erfc")}}


def math_function(fe, name: str, args: list):
    """math.<name>(*args), or x ** y: folded when every argument is a constant; else computed in the
    arguments' float type (float64 for integers) by one instruction or libdevice's function. The
    special function unit and libdevice work in float32: the arguments go in converted to it, and
    the result comes back converted to the call's type."""
    t = T.WEAK_FLOAT
    for a in args:
        t = T.unify(t, fe.typeof(a))
    t = T.WEAK_FLOAT if isinstance(t, T.Weak) else t if t.kind == "float" else T.float64
    if all(isinstance(a, Const) for a in args):
        host = (lambda x: 1 / x) if name == "rcp" else getattr(math, name)
        value = fold(host, *(a.value for a in args))
        if value is not None:
            return Const(value, t)
    t = T.concrete(t)
    args = [fe.cast(a, t) for a in args]
    if name in EXACT:
        return fe.emit(Op.MATH, t, [fe.materialize(a, t) for a in args], fn=name)
    if t == T.float64 and name in LIBDEVICE_FLOAT64:
        return fe.inline(LIBDEVICE_FLOAT64[name], [fe.materialize(a, t) for a in args])
    if name not in LIBDEVICE and name not in SPECIAL_FUNCTION_UNIT:
        wide = [fe.materialize(fe.cast(a, T.float64), T.float64) for a in args]
        return fe.cast(fe.inline(LIBDEVICE_FLOAT64[name], wide), t)
    args = [fe.materialize(fe.cast(a, T.float32), T.float32) for a in args]
    if name in SPECIAL_FUNCTION_UNIT:
        return fe.cast(fe.emit(Op.MATH, T.float32, args, fn=name), t)
    return fe.cast(fe.inline(LIBDEVICE[name], args), t)


def _math(name: str):
    def lower(fe, args):
        return fe.power(*args) if name == "pow" else math_function(fe, name, args)
    return lower


def _classify(fn):
    """math.isnan, math.isinf or math.isfinite."""
    def lower(fe, args):
        (x,) = args
        if isinstance(x, Const):
            return Const(fn(x.value), T.boolean)
        t = fe.typeof(x)
        if t.kind != "float":
            return Const(fn is math.isfinite, T.boolean)
        x = fe.materialize(x, t)
        nan = fe.compare("ne", x, x)
        if fn is math.isnan:
            return nan
        inf = fe.compare("eq", fe.emit(Op.MATH, t, [x], fn="fabs"), Const(math.inf, T.WEAK_FLOAT))
        if fn is math.isinf:
            return inf
        return fe.to_bool(fe.emit(Op.NOT, T.boolean, [fe.emit(Op.OR, T.boolean, [nan, inf])]))
    return lower


# -- the table ----------------------------------------------------------------------------------
X = (Param("x"),)
MASKED = (Param("mask"), Param("predicate"))
SHUFFLE = (Param("mask"), Param("value", SHUFFLED))
ARRAY_SHAPE = (Param("shape", SHAPE), Param("dtype", DTYPE))
ATOMIC_TYPES = {"add": (T.int32, T.uint32, T.float32, T.int64, T.uint64, T.float64),
                "sub": (T.int32, T.uint32, T.float32, T.int64, T.uint64, T.float64),
                "max": (T.int32, T.uint32, T.uint64, T.float32, T.float64),
                "min": (T.int32, T.uint32, T.uint64, T.float32, T.float64),
                "exch": (T.int32, T.uint32, T.float32, T.int64, T.uint64, T.float64),
                "cas": (T.int32, T.uint32, T.int64, T.uint64)}

NUMPY_UNARY = {np.sin: "sin", np.cos: "cos", np.tan: "tan", np.exp: "exp", np.exp2: "exp2", np.expm1: "expm1",
               np.log: "log", np.log2: "log2", np.log10: "log10", np.log1p: "log1p", np.sqrt: "sqrt", np.cbrt: "cbrt",
               np.sinh: "sinh", np.cosh: "cosh", np.tanh: "tanh", np.arcsin: "asin", np.arccos: "acos",
               np.arctan: "atan", np.arcsinh: "asinh", np.arccosh: "acosh", np.arctanh: "atanh", np.fabs: "fabs",
               np.floor: "floor", np.ceil: "ceil", np.trunc: "trunc"}
NUMPY_BINARY = {np.arctan2: "atan2", np.hypot: "hypot", np.fmod: "fmod"}

CALLS: dict[object, Builtin] = {
    K.syncthreads: Builtin("cuda.syncthreads", (), _barrier),
    K.syncwarp: Builtin("cuda.syncwarp", (Param("mask", optional=True),), _syncwarp),
    K.cg.this_grid: Builtin("cuda.cg.this_grid", (), _this_grid),
    K.grid_group.sync: Builtin("cuda.cg.GridGroup.sync", (), _grid_sync),
    K.threadfence: Builtin("cuda.threadfence", (), _fence("GPU")),
    **{getattr(K, name): Builtin(f"cuda.{name}", (Param("x", INTEGER),), _bits_of_width(name))
       for name in ("brev", "clz", "ffs")},
    K.fma: Builtin("cuda.fma", (Param("a", NUMBER), Param("b", NUMBER), Param("c", NUMBER)), _fma),
    K.threadfence_block: Builtin("cuda.threadfence_block", (), _fence("CTA")),
    K.threadfence_system: Builtin("cuda.threadfence_system", (), _fence("SYS")),
    K.grid: Builtin("cuda.grid", (Param("ndim", NDIM),), _grid(absolute=True)),
    K.gridsize: Builtin("cuda.gridsize", (Param("ndim", NDIM),), _grid(absolute=False)),
    K.shared.array: Builtin("cuda.shared.array", ARRAY_SHAPE, _array("shared"), keywords=True),
    K.local.array: Builtin("cuda.local.array", ARRAY_SHAPE, _array("local"), keywords=True),
    K.const.array_like: Builtin("cuda.const.array_like", (Param("ary", HOST_ARRAY),), _const_array),
    **{getattr(K.atomic, op): Builtin(
        f"cuda.atomic.{op}", (Param("array", array_of(types, ("global", "shared"))), Param("index", INDEX),
                              *((Param("old"),) if op == "cas" else ()), Param("value")), _atomic(op))
       for op, types in ATOMIC_TYPES.items()},
    # The ISA's float MIN and MAX are IEEE's minimumNumber and maximumNumber (a NaN loses): numba's nanmin, nanmax
    **{getattr(K.atomic, f"nan{op}"): Builtin(
        f"cuda.atomic.nan{op}", (Param("array", array_of(ATOMIC_TYPES[op], ("global", "shared"))),
                                 Param("index", INDEX), Param("value")), _atomic(op))
       for op in ("max", "min")},
    **{getattr(K.atomic, name): Builtin(
        f"cuda.atomic.{name}", (Param("array", array_of(ATOMIC_TYPES["cas"], ("global", "shared"))),
                                Param("index", INDEX), Param("value")), _atomic_update(name))
       for name in ("and_", "or_", "xor", "inc", "dec")},
    K.atomic.compare_and_swap: Builtin("cuda.atomic.compare_and_swap", (
        Param("array", array_of(ATOMIC_TYPES["cas"], ("global", "shared"))), Param("old"), Param("value")),
        _compare_and_swap),
    K.shfl_sync: Builtin("cuda.shfl_sync", (*SHUFFLE, Param("src_lane", INTEGER)), _shuffle("IDX")),
    K.shfl_up_sync: Builtin("cuda.shfl_up_sync", (*SHUFFLE, Param("delta", INTEGER)), _shuffle("UP")),
    K.shfl_down_sync: Builtin("cuda.shfl_down_sync", (*SHUFFLE, Param("delta", INTEGER)), _shuffle("DOWN")),
    K.shfl_xor_sync: Builtin("cuda.shfl_xor_sync", (*SHUFFLE, Param("lane_mask", INTEGER)), _shuffle("BFLY")),
    K.all_sync: Builtin("cuda.all_sync", MASKED, _vote("ALL")),
    K.any_sync: Builtin("cuda.any_sync", MASKED, _vote("ANY")),
    K.ballot_sync: Builtin("cuda.ballot_sync", MASKED, _ballot),
    K.mma.load: Builtin("cuda.mma.load", (Param("array", array_of((T.uint32, T.float32), ("shared", "global"))),
                                          Param("index", INDEX),
                                          Param("count", Kind("a constant 2 or 4", lambda x: _is_int_constant(x)
                                                              and x.value in (2, 4)))), _mma_load),
    K.mma.store: Builtin("cuda.mma.store", (Param("array", array_of((T.uint32, T.float32), ("shared", "global"))),
                                            Param("index", INDEX), Param("fragment", FRAGMENT)), _mma_store),
    K.mma.zeros: Builtin("cuda.mma.zeros", (), _mma_zeros),
    K.mma.mma_sync: Builtin("cuda.mma.mma_sync", (Param("a", fragment(T.u32x4)), Param("b", fragment(T.u32x2)),
                                                  Param("c", fragment(T.f32x4)), Param("dtype", HALF_DTYPE)),
                            _mma_sync),
    K.mma.get: Builtin("cuda.mma.get", (Param("fragment", FRAGMENT), Param("i", INT_CONSTANT)), _mma_get),
    K.mma.pack: Builtin("cuda.mma.pack", tuple(Param(name, NUMBER) for name in "abcd"), _mma_pack),
    min: Builtin("min", (Param("a"), Param("b")), _extremum(Op.MIN), variadic=True),
    max: Builtin("max", (Param("a"), Param("b")), _extremum(Op.MAX), variadic=True),
    abs: Builtin("abs", (Param("x", REAL_OR_COMPLEX),), _abs),
    round: Builtin("round", (Param("number", NUMBER), Param("ndigits", optional=True)), _round),
    pow: Builtin("pow", (Param("base", NUMBER), Param("exp", NUMBER)), lambda fe, args: fe.power(*args)),
    math.degrees: Builtin("math.degrees", X, _scaled_by(180.0 / math.pi)),
    math.radians: Builtin("math.radians", X, _scaled_by(math.pi / 180.0)),
    complex: Builtin("complex", (Param("real", REAL_OR_COMPLEX, optional=True), Param("imag", optional=True)),
                     _complex, keywords=True),
    len: Builtin("len", (Param("obj", SIZED),), _len),
    float: Builtin("float", X, _cast(T.float64)),
    int: Builtin("int", X, _int),
    bool: Builtin("bool", (Param("x", REAL_OR_COMPLEX),), _cast(T.boolean)),
    range: Builtin("range", (Param("start", INTEGER), Param("stop", INTEGER, optional=True),
                             Param("step", INTEGER, optional=True)), _range),
    **{fn: Builtin(f"math.{fn.__name__}", X, _math(fn.__name__))
       for fn in (math.sqrt, math.exp, math.log, math.sin, math.cos, math.fabs, math.floor, math.ceil, math.trunc,
                  math.tanh, math.exp2, math.log2, math.log10, math.log1p, math.expm1, math.sinh, math.cosh,
                  math.erf, math.erfc, math.tan, math.atan, math.asin, math.acos, math.gamma, math.lgamma,
                  math.asinh, math.acosh, math.atanh, math.cbrt)},
    **{fn: Builtin(f"math.{fn.__name__}", (Param("x"), Param("y")), _math(fn.__name__))
       for fn in (math.pow, math.hypot, math.atan2, math.fmod)},
    **{fn: Builtin(f"math.{fn.__name__}", X, _classify(fn)) for fn in (math.isnan, math.isinf, math.isfinite)},
    # cmath's functions of a complex (or a real) number (complex_values.py, libdevice_complex.py)
    **{getattr(cmath, name): Builtin(f"cmath.{name}", (Param("z", REAL_OR_COMPLEX),), _cmath(name))
       for name in complex_values.CMATH if name != "log"},
    cmath.log: Builtin("cmath.log", (Param("z", REAL_OR_COMPLEX), Param("base", REAL_OR_COMPLEX, optional=True)),
                       _cmath("log")),
    cmath.rect: Builtin("cmath.rect", (Param("r"), Param("phi")), _cmath("rect")),
    # numpy's ufuncs called on numbers, as numba compiles them in kernels: math's functions of the same meaning
    # (cmath's for a complex)
    **{fn: Builtin(f"numpy.{fn.__name__}", (Param("x", REAL_OR_COMPLEX),), _numpy_math(name))
       for fn, name in NUMPY_UNARY.items()},
    np.absolute: Builtin("numpy.absolute", (Param("x", REAL_OR_COMPLEX),), _abs),
    np.conjugate: Builtin("numpy.conjugate", (Param("x", REAL_OR_COMPLEX),), _conjugate),
    np.real: Builtin("numpy.real", (Param("x", REAL_OR_COMPLEX),), _part("real")),
    np.imag: Builtin("numpy.imag", (Param("x", REAL_OR_COMPLEX),), _part("imag")),
    **{fn: Builtin(f"numpy.{fn.__name__}", (Param("x"), Param("y")), _math(name)) for fn, name in NUMPY_BINARY.items()},
    **{fn: Builtin(f"numpy.{fn.__name__}", X, _classify(getattr(math, fn.__name__)))
       for fn in (np.isnan, np.isinf, np.isfinite)},
    K.fast_rcp: Builtin("fast_rcp", X, _math("rcp")),
    # A dtype called is a cast: cuda.float32(x), np.int32(x), np.complex64(x), and an array's x.dtype(v).
    **{key: Builtin(t.name, X, _cast(t)) for t in T.SCALARS.values() if t.kind != "complex"
       for key in (t, t.dtype.type)},
    **{key: Builtin(t.name, (Param("x", REAL_OR_COMPLEX),), _complex_cast(t)) for t in (T.complex64, T.complex128)
       for key in (t, t.dtype.type)},
}

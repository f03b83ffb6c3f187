"""Layer 3, compiler: print() in a kernel, as numba.cuda compiles it and as CUDA's device printf works.

CUDA's printf writes each call's format and arguments into a FIFO in device memory (1 MiB by default,
cudaLimitPrintfFifoSize), and the host formats and prints the records at its next synchronization, in the order
the calls reserved their space; output past the FIFO's end is lost. Here print(a, "text", b) compiles to one 64-bit
atomic add on the FIFO's first word, which reserves 1 + (number of values) words after the last record, and, if
they fit, stores into them the call's number and each value: integers and booleans as int64 (a uint64's bits,
printed unsigned), floats as float64 (numba formats them with %lld, %llu and %f). The text, and which value is which,
stays in the compiled kernel's table (`CompiledKernel.prints`), under a number made from the kernel's file, line and
items, so records of kernels compiled in other processes (the on-disk cache) do not collide. The FIFO is two hidden
arguments, one memory read as int64 and as float64 (`FIFO_INT`, `FIFO_FLOAT`); `lapis.cuda.printf_fifo` keeps it and
prints the records.
"""

import ast
import hashlib

from lapis.cuda.compiler import ir
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.values import Const

FIFO_INT, FIFO_FLOAT = "$printf", "$printf_f"
KINDS = {"int": "int", "uint": "int", "bool": "bool", "float": "float"}     # a value's kind -> how it is stored


def lower_print(fe, node: ast.Call) -> Const:
    """Compile `print(...)` (the call `node`) into the kernel being built by `fe`; returns None, as print does."""
    if node.keywords:
        raise fe.error("print() in a kernel takes no keywords (sep=, end= and file= are not supported)")
    items, values = [], []
    for arg in node.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            items.append(("text", arg.value))
            continue
        value = fe.expr(arg) if not isinstance(arg, ast.Starred) else None
        kind = KINDS.get(getattr(fe.typeof(value), "kind", None)) if isinstance(value, Const | ir.Value) else None
        if kind is None:
            raise fe.error("print() in a kernel prints numbers and string literals")
        if fe.typeof(value) == T.uint64:
            kind = "uint"                     # its bits as int64, printed unsigned (numba's %llu)
        stored = T.float64 if kind == "float" else T.int64
        items.append((kind,))
        values.append(fe.materialize(fe.cast(value, stored), stored))
    number = _number(fe, items)
    fe.func.prints[number] = tuple(items)
    fifo, fifo_f = fe.hidden_array(FIFO_INT, T.int64), fe.hidden_array(FIFO_FLOAT, T.float64)
    words = 1 + len(values)
    at = fe.emit(Op.ATOMIC, T.int64, [fe.address(fifo, Const(0, T.WEAK_INT)), fe.materialize(Const(words, T.int64))],
                 op="add", space="global")
    end = fe.binop(Op.ADD, at, Const(1 + words, T.WEAK_INT))          # word 0 is the count: records start at 1
    fits, after = fe.new_block("print"), fe.new_block("printed")
    fe.branch(fe.compare("le", end, fe.shape(fifo)[0]), fits, after)
    fe.place(fits)
    fe.seal(fits)
    first = fe.binop(Op.ADD, at, Const(1, T.WEAK_INT))
    fe.assign_subscript(fifo, first, Const(number, T.int64))
    for k, value in enumerate(values):
        target = fifo_f if value.type == T.float64 else fifo
        fe.assign_subscript(target, fe.binop(Op.ADD, first, Const(1 + k, T.WEAK_INT)), value)
    fe.jump(after)
    fe.place(after)
    fe.seal(after)
    return Const(None, T.WEAK_INT)


def _number(fe, items: list) -> int:
    """The call's number in the FIFO's records: from where it is and what it prints (62 bits, positive)."""
    digest = hashlib.sha256(repr((fe.filename, fe.line, fe.kernel, items)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2

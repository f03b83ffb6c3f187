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
import re

import numpy as np

from lapis.cuda.compiler import ir
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.values import Const

FIFO_INT, FIFO_FLOAT = "$printf", "$printf_f"
FIFO_WORDS = (1 << 20) // 8       # CUDA's default cudaLimitPrintfFifoSize, 1 MiB, in int64 words
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
    return record_number(fe.filename, fe.line, fe.kernel, items)


def record_number(filename: str, line: int, kernel: str, items) -> int:
    """A call's number in the FIFO's records: from where it is and what it prints (62 bits, positive)."""
    digest = hashlib.sha256(repr((filename, line, kernel, items)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2


# C's printf conversions: %[flags][width][.precision][length]conversion
C_CONVERSION = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d+|\*))?(hh|h|ll|l|j|z|t|L)?([diouxXeEfFgGaAcsp%])")


def c_format_arguments(fmt: str, refuse) -> tuple[list[tuple[int, str, int]], tuple]:
    """Where CUDA's printf finds each argument of format `fmt` in its argument buffer (C's default promotions:
    an int in 4 bytes, a long, pointer or double in 8, each at its alignment): (offset, kind, size) per value;
    and the record's items for the FIFO, (("printf", fmt, kinds),). `refuse(why)` makes the error for what is not
    supported (%s, * widths)."""
    kinds, offset = [], 0
    for m in C_CONVERSION.finditer(fmt):
        flags, width, precision, length, conversion = m.groups()
        if conversion == "%":
            continue
        if "*" in (width, precision) or conversion in "sn":
            raise refuse(f"conversion {m.group(0)!r} is not supported (numbers and characters are)")
        kind = "float" if conversion in "eEfFgGaA" else "int" if conversion in "dic" else "uint"
        size = 8 if kind == "float" or conversion == "p" or length in ("l", "ll", "j", "z", "t") else 4
        offset = -(-offset // size) * size
        kinds.append((offset, kind, size))
        offset += size
    return kinds, (("printf", fmt, tuple((kind, size) for _, kind, size in kinds)),)


def c_format(fmt: str, values: list) -> str:
    """printf's output on the host: `fmt` with `values`, (kind, int64 word) pairs (an integer's bits, or a double's),
    formatted in C's ways (a length modifier sets an integer's width: 32 bits without one, 64 with l or ll)."""
    out, at, last = [], 0, 0
    for m in C_CONVERSION.finditer(fmt):
        out.append(fmt[last:m.start()])
        last = m.end()
        flags, width, precision, length, conversion = m.groups()
        if conversion == "%":
            out.append("%")
            continue
        kind, word = values[at]
        at += 1
        spec = f"%{flags}{width or ''}{'.' + precision if precision is not None else ''}"
        if kind == "float":
            x = float(np.int64(word).view(np.float64))
            out.append(x.hex() if conversion in "aA" else (spec + conversion) % x)
        elif conversion == "c":
            out.append((spec + "c") % chr(word & 0xFF))
        elif conversion == "p":
            out.append(hex(word & (2**64 - 1)))
        else:
            bits = 64 if length in ("l", "ll", "j", "z", "t") else 32
            v = word & ((1 << bits) - 1)
            if kind == "int" and v >= 1 << (bits - 1):
                v -= 1 << bits
            out.append((spec + ("d" if conversion in "iu" else conversion)) % v)
    out.append(fmt[last:])
    return "".join(out)

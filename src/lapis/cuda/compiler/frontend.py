"""Layer 3 compiler, stage 1: Python AST -> typed SSA IR.

Reads the kernel's source with `inspect` and walks its AST, building SSA directly through the
`IRBuilder` it is (builder.py: Braun et al.'s SSA construction, numba's typing, constant
folding, local CSE). A variable has one type, so when a later assignment needs a wider one the
walk restarts with the wider type. Calls are checked and lowered by the table in calls.py;
device functions are compiled in place (`Frontend.inline`). `for` loops over a constant range
of at most UNROLL_LIMIT trips are unrolled, which turns indices into constants, so
`cuda.local.array`s indexed by them live in registers. A complex number is a pair of float values
(complex_values.py), as a tuple of numbers is one variable per element. Errors name the file and line of the
offending construct.
"""

import ast
import copy
import inspect
import linecache
import operator
import sys
from dataclasses import dataclass

import numpy as np

from lapis import abi
from lapis.cuda.compiler import array_views, calls, complex_values, ir, records
from lapis.cuda.compiler import intrinsics as K
from lapis.cuda.compiler import types as T
from lapis.cuda.compiler.builder import IRBuilder, literal_type
from lapis.cuda.compiler.device_function import DeviceFunction, as_device_function, function_def
from lapis.cuda.compiler.errors import CompileError
from lapis.cuda.compiler.ir import Op
from lapis.cuda.compiler.printing import lower_print
from lapis.cuda.compiler.values import ArrayRef, Complex, Const, describe, fold

UNROLL_LIMIT = 32
CAPTURED = "$global "         # the hidden argument of a global device array: "$global module:name"
MAX_RETYPES = 16


class _Retype(Exception):
    """A variable needs a wider type than the walk assumed: restart."""


def kernarg_layout(argtypes: list) -> tuple[list[dict], int]:
    """Where each argument lives in the kernarg segment: an array is a 64-bit data pointer
    followed by its shape and strides (in elements) as int64; a scalar is its own bytes (a complex its two
    floats, aligned as one)."""
    layout, offset = [], 0
    for t in argtypes:
        if isinstance(t, T.ArrayType):
            offset = -(-offset // 8) * 8
            layout.append({"kind": "array", "offset": offset, "dtype": t.dtype.name, "ndim": t.ndim,
                           "layout": t.layout, "size": 8 + 16 * t.ndim})
            offset += 8 + 16 * t.ndim
        else:
            # a bool, a half or an 8- or 16-bit integer takes a word: a half in its low bits, an integer widened
            # (as registers hold them), read with one MOV of the word
            size = 4 if t.kind == "bool" or t.bits <= 16 else t.itemsize
            align = size // 2 if t.kind == "complex" else size
            offset = -(-offset // align) * align
            layout.append({"kind": "scalar", "offset": offset, "dtype": t.name, "size": size})
            offset += size
    return layout, -(-offset // 8) * 8


class Frontend(IRBuilder):
    """Walks a kernel's AST and builds its IR (see builder.py for the building)."""

    def __init__(self, pyfunc, argtypes: list, var_types: dict | None = None, hints: dict | None = None):
        self.pyfunc = pyfunc
        self.kernel = pyfunc.__name__
        try:
            lines, first = inspect.getsourcelines(pyfunc)
        except (OSError, TypeError) as e:
            raise CompileError(f"cannot read the source of {self.kernel!r} ({e}): lapis compiles a kernel from its "
                               "Python source, and this one was defined where Python keeps none (python -c, exec of "
                               "a string, a bare interactive prompt). Define it in a .py file, or exec code compiled "
                               "with a file name whose text linecache holds: linecache.cache[name] = (len(text), "
                               "None, text.splitlines(True), name)") from None
        self.filename = inspect.getsourcefile(pyfunc) or "<kernel>"
        self.first_line = first
        try:
            self.fdef = function_def(pyfunc, "".join(lines))
        except ValueError as e:
            raise CompileError(f"cannot compile {self.kernel!r}: {e}") from None
        self.line = first
        self.globals = dict(pyfunc.__globals__)
        if pyfunc.__closure__:
            self.globals.update(zip(pyfunc.__code__.co_freevars, (c.cell_contents for c in pyfunc.__closure__),
                                    strict=True))
        names = [a.arg for a in self.fdef.args.args]
        if len(names) != len(argtypes):
            raise self.error(f"kernel takes {len(names)} arguments but was called with {len(argtypes)}")
        self.argtypes = dict(zip(names, argtypes, strict=True))
        layout, size = kernarg_layout(argtypes)
        super().__init__(ir.Function(self.kernel, list(zip(names, argtypes, strict=True)), arg_layout=layout,
                                     kernarg_size=size, filename=self.filename, first_line=first),
                         dict(var_types or {}), self.filename, first, self.kernel)
        self.arg_offsets = {n: entry["offset"] for n, entry in zip(names, layout, strict=True)}
        bindings = [t.id for node in ast.walk(self.fdef) for t in _targets(node)]
        self.assigned = set(bindings)
        self.rebound = {name for name in self.assigned if bindings.count(name) > 1}     # bound more than once
        self.static: dict[str, object] = {}          # names bound at compile time: constants, arrays, modules
        # How many run-time branches and loops enclose the code being walked, and where each static name was bound
        # (`assign_name`): a static name is one value for the whole kernel, so no run-time path may choose it.
        self.depth = 0
        self.static_at: dict[str, tuple[int, int]] = {}      # name -> (depth, line)
        self.loops: list[tuple[ir.Block, ir.Block]] = []     # (continue target, break target)
        self.sregs: dict[str, ir.Value] = {}
        self.shared_bytes = 0
        self.local_bytes = 0
        # What an earlier attempt learned (the walk restarts when it learns something): which local
        # arrays are indexed at run time (they live in local memory, not registers), and where the
        # dynamic shared array starts (after every static one).
        self.hints = hints if hints is not None else {}
        self.hints.setdefault("memory_locals", set())
        self.dynamic_shared = False
        self.inlining: list[tuple[DeviceFunction, str, ir.Block, int]] = []   # (callee, prefix, exit, loop depth)
        self.returned_tuples: dict[str, int] = {}    # inlined call -> how many values its returns give
        for name, t in self.argtypes.items():     # scalar arguments the body reassigns are variables
            if name in self.assigned and not isinstance(t, T.ArrayType):
                self.var_types[name] = t
                if t.kind == "complex":
                    complex_values.write(self, name, complex_values.param(self, self.arg_offsets[name], t))
                else:
                    self.write(name, self.entry, self.param(self.arg_offsets[name], t))

    def at(self, node) -> None:
        """Errors and emitted values from here on belong to node's line."""
        if hasattr(node, "lineno"):
            self.line = self.first_line + node.lineno - 1

    # -- complex numbers where the builder expects real ones (complex_values.py) -----------------
    def typeof(self, x):
        return x.type if isinstance(x, Complex) else super().typeof(x)

    def materialize(self, x, t=None) -> ir.Value:
        if isinstance(x, Complex):
            raise complex_values.refuse(self, x, "here" if t is None else f"as a {t}")
        return super().materialize(x, t)

    def cast(self, x, t):
        if isinstance(x, Complex):
            raise complex_values.refuse(self, x, f"as a {t}")
        return super().cast(x, t)

    def to_bool(self, x):
        return complex_values.truth(self, x) if isinstance(x, Complex) else super().to_bool(x)

    def compare(self, op: str, a, b):
        if isinstance(a, Complex) or isinstance(b, Complex):
            return complex_values.compare(self, op, a, b)
        return super().compare(op, a, b)

    def widen(self, name: str, t) -> None:
        """Restart the walk with the variable `name` of the wider type t."""
        self.var_types[name] = t
        raise _Retype(name)

    # -- driving --------------------------------------------------------------------------------
    def build(self) -> ir.Function:
        self.statements(self.fdef.body)
        if self.current is not None:
            self.current.term = ir.Return()
            self.current = None
        if self.dynamic_shared and self.hints.get("dynamic_shared_base") != self.shared_bytes:
            self.hints["dynamic_shared_base"] = self.shared_bytes
            raise _Retype("dynamic shared memory")
        self.func.shared_bytes = self.shared_bytes
        self.func.local_bytes = self.local_bytes
        self.func.variable_types = {name: t for name, t in self.var_types.items() if name.isidentifier()}
        return self.func

    def statements(self, body: list) -> None:
        for node in body:
            if self.current is None:
                return            # unreachable after return, break or continue
            self.at(node)
            method = getattr(self, "stmt_" + type(node).__name__, None)
            if method is None:
                raise self.error(f"unsupported construct: {_construct(node)} is not supported in kernels")
            method(node)

    # -- statements -----------------------------------------------------------------------------
    def stmt_Pass(self, node) -> None:
        pass

    def stmt_Expr(self, node) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return                # a docstring
        self.expr(node.value)

    def stmt_Return(self, node) -> None:
        has_value = _returned(node) is not None
        if self.inlining:                      # in an inlined device function: the result, then its end
            _, prefix, exit_, _ = self.inlining[-1]
            if has_value:
                value = self.expr(node.value)
                if isinstance(value, tuple):         # a tuple result: one variable per element
                    arity = self.returned_tuples.setdefault(prefix, len(value))
                    if arity != len(value):
                        raise self.error("every return of a device function must give the same number of values")
                    for k, item in enumerate(value):
                        self.assign_name(f"{prefix}$return.{k}", item)
                else:
                    self.assign_name(prefix + "$return", value)
            self.jump(exit_)
            return
        if has_value:
            raise self.error("a kernel cannot return a value; write results into an array argument")
        self.current.term = ir.Return()
        self.current = None

    def stmt_Assign(self, node) -> None:
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value)

    def stmt_AugAssign(self, node) -> None:
        if isinstance(node.target, ast.Subscript):
            ref, index = self.expr(node.target.value), self.expr(node.target.slice)
            current = self.subscript(ref, index)
            self.assign_subscript(ref, index, self.arith(node.op, current, self.expr(node.value)))
        else:
            self.assign(node.target, self.arith(node.op, self.expr(node.target), self.expr(node.value)))

    def stmt_AnnAssign(self, node) -> None:
        if node.value is None:
            return
        self.assign(node.target, self.expr(node.value))

    def bind_static(self, target, value) -> None:
        """Assign, keeping constants constant (an unrolled loop's variable), unpacking tuples."""
        if isinstance(target, ast.Tuple | ast.List) and isinstance(value, tuple) and len(value) == len(target.elts):
            for t, v in zip(target.elts, value, strict=True):
                self.bind_static(t, v)
        elif isinstance(target, ast.Name) and isinstance(value, Const):
            self.static.pop(target.id, None)
            self.static[target.id] = value
        else:
            self.assign(target, value)

    def assign(self, target, value) -> None:
        if isinstance(target, ast.Name):
            self.assign_name(target.id, value)
        elif isinstance(target, ast.Subscript):
            self.assign_subscript(self.expr(target.value), self.expr(target.slice), value)
        elif isinstance(target, ast.Attribute) and isinstance(base := self.expr(target.value), records.RecordRef):
            records.store(self, base, target.attr, value)
        elif isinstance(target, ast.Tuple | ast.List):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                raise self.error(f"cannot unpack {describe(value)} into {len(target.elts)} names")
            for t, v in zip(target.elts, value, strict=True):
                self.assign(t, v)
        else:
            raise self.error(f"unsupported assignment target: {_construct(target)}")

    def assign_name(self, name: str, value) -> None:
        if isinstance(value, tuple) and value and all(isinstance(v, Const | ir.Value | Complex) for v in value):
            self.assign_numbers(name, value)
            return
        if isinstance(value, Complex) or T.is_complex(self.var_types.get(name)):
            complex_values.assign(self, name, value)     # two float variables (complex_values.py)
            return
        if not isinstance(value, Const | ir.Value):
            # An array, a tuple, a module: known at compile time, so the same on every path. Rebinding a name
            # bound outside a run-time branch or loop to another one inside it would choose at run time.
            old = self.static.get(name)
            depth, line = self.static_at.get(name, (0, self.line))
            if old is not None and old != value and depth < self.depth:
                raise self.error(f"{name!r} names {describe(old)} (line {line}) and is bound to another one "
                                 "inside a branch or loop decided at run time; a kernel's array names are fixed "
                                 "when it compiles: index each array where the branch chooses it")
            self.static[name] = value
            self.static_at[name] = (self.depth, self.line)
            return
        self.static.pop(name, None)
        t = self.typeof(value)
        hint = self.var_types.get(name)
        if hint is None:
            hint = self.var_types[name] = T.concrete(t)
        elif not T.can_hold(hint, t):
            self.var_types[name] = T.concrete(T.unify(hint, t))
            raise _Retype(name)
        self.write(name, self.current, self.materialize(value, hint))

    def assign_numbers(self, name: str, value: tuple) -> None:
        """A tuple of numbers: each element also a variable (name$0, name$1, ...), so that a run-time branch or
        loop may rebind the name (numba's tuples are values). A name bound only once keeps the tuple itself too,
        constants and all (a shared array's shape)."""
        old = self.static.get(name)
        if isinstance(old, _Numbers) and old.arity != len(value):
            raise self.error(f"{name!r} is a tuple of {old.arity} and is bound to one of {len(value)}; a kernel's "
                             "tuple keeps its length")
        for k, v in enumerate(value):
            self.assign_name(f"{name}${k}", v)
        self.static[name] = _Numbers(len(value), None if name in self.rebound else value)
        self.static_at[name] = (self.depth, self.line)

    def stmt_Assert(self, node) -> None:
        """assert cond[, "message"]: a lane where cond fails stops the kernel with a trap (BPT.TRAP n) that the
        fault names as this assertion, as CUDA's device-side assert; passing lanes branch over it. (numba
        compiles assertions only with debug=True; lapis always does: a failed one would go on with a wrong
        value.)"""
        message = node.msg
        if message is not None and not (isinstance(message, ast.Constant) and isinstance(message.value, str)):
            raise self.error("an assertion's message in a kernel must be a string literal")
        source = linecache.getline(self.filename, self.line).split("  #")[0].strip()     # the user's own names
        self.trap_unless(self.to_bool(self.expr(node.test)), source or "assert")

    def trap_unless(self, cond, what: str) -> None:
        """Lanes where cond (a run-time bool or a constant) fails stop the kernel with a BPT.TRAP that the fault
        names as `what`, at this line; the others branch over it."""
        if isinstance(cond, Const) and cond.value:
            return
        number = len(self.func.assertions) + 1
        self.func.assertions[number] = f"{self.filename}:{self.line}: {what}"
        failed, passed = self.new_block("assert_failed"), self.new_block("assert_passed")
        if isinstance(cond, Const):
            self.jump(failed)
        else:
            self.branch(cond, passed, failed)
        self.place(failed)
        self.seal(failed)
        self.emit(Op.TRAP, None, number=number)
        self.current.term = ir.Return()
        self.current = None
        if passed.preds:
            self.place(passed)
        self.seal(passed)

    def stmt_If(self, node) -> None:
        cond = self.to_bool(self.expr(node.test))
        if isinstance(cond, Const):                 # decided at compile time
            self.statements(node.body if cond.value else node.orelse)
            return
        then, join = self.new_block("then"), self.new_block("endif")
        other = self.new_block("else") if node.orelse else join
        line = self.line
        self.branch(cond, then, other)
        before = dict(self.static)
        self.depth += 1
        self.place(then)
        self.seal(then)
        self.statements(node.body)
        then_static = self.static
        self.jump(join)
        self.static = dict(before)
        if node.orelse:
            self.place(other)
            self.seal(other)
            self.statements(node.orelse)
        else_static = self.static
        self.jump(join)
        self.depth -= 1
        self.static = _merge_static(then_static, else_static, line)
        if join.preds:
            self.place(join)
        self.seal(join)

    def stmt_While(self, node) -> None:
        if node.orelse:
            raise self.error("unsupported construct: while ... else")
        header, body, exit_ = self.new_block("while"), self.new_block("body"), self.new_block("endwhile")
        self.jump(header)
        self.place(header)
        cond = self.to_bool(self.expr(node.test))
        if isinstance(cond, Const) and not cond.value:
            self.jump(exit_)
        elif isinstance(cond, Const):
            self.jump(body)
        else:
            self.branch(cond, body, exit_)
        self.place(body)
        self.seal(body)
        self.loops.append((header, exit_))
        self.depth += 1
        self.statements(node.body)
        self.depth -= 1
        self.loops.pop()
        self.jump(header)
        self.seal(header)
        if exit_.preds:
            self.place(exit_)
        self.seal(exit_)

    def _innermost_loop(self, what: str) -> tuple[ir.Block, ir.Block]:
        depth = self.inlining[-1][3] if self.inlining else 0      # a device function's loops are its own
        if len(self.loops) <= depth:
            raise self.error(f"'{what}' outside a loop")
        return self.loops[-1]

    def stmt_Break(self, node) -> None:
        self.jump(self._innermost_loop("break")[1])

    def stmt_Continue(self, node) -> None:
        self.jump(self._innermost_loop("continue")[0])

    def stmt_For(self, node) -> None:
        if node.orelse:
            raise self.error("unsupported construct: for ... else")
        it = node.iter
        if isinstance(it, ast.Tuple) and not _has_jumps(node.body):
            for item in self.expr(it):              # a tuple display: unrolled, as numba's literal_unroll
                if self.current is None:
                    return
                self.bind_static(node.target, item)
                self.statements(node.body)
            return
        if not isinstance(node.target, ast.Name):
            raise self.error("the loop variable of a kernel 'for' over a range must be a plain name")
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and self.lookup("range") is range):
            raise self.error("a kernel 'for' loop must iterate over range(...) or a tuple display")
        bounds = self.arguments(calls.CALLS[range], it)
        start, stop, step = (Const(0, T.WEAK_INT), bounds[0], Const(1, T.WEAK_INT)) if len(bounds) == 1 else \
            (bounds[0], bounds[1], bounds[2] if len(bounds) == 3 else Const(1, T.WEAK_INT))
        if isinstance(step, Const) and step.value == 0:
            raise self.error("range() step must not be zero")
        name = node.target.id
        if isinstance(start, Const) and isinstance(stop, Const) and not _has_jumps(node.body):
            values = range(start.value, stop.value, step.value)
            if len(values) <= UNROLL_LIMIT:
                for v in values:                    # unrolled: the loop variable is a constant
                    if self.current is None:
                        return
                    self.static.pop(name, None)
                    self.static[name] = Const(v, T.unify(T.unify(start.type, stop.type), step.type))
                    self.statements(node.body)
                return
        # the counter's type, numba's: range(n - 1, -1, -1) of a uint64 n counts in int64
        t = T.binary(T.binary(self.typeof(start), self.typeof(stop)), self.typeof(step))
        t = T.concrete(T.binary(T.binary(literal_type(start, t), literal_type(stop, t)), literal_type(step, t)))
        self.counter += 1
        counter, limit = f"$i{self.counter}", f"$stop{self.counter}"
        if not isinstance(step, Const):         # a run-time step (a grid-stride loop's): its sign picks the test
            self.trap_unless(self.compare("ne", step, Const(0, T.WEAK_INT)), "range() arg 3 must not be zero")
            step = self.materialize(step, t)
            up, down = self.compare("gt", step, Const(0, T.WEAK_INT)), self.compare("lt", step, Const(0, T.WEAK_INT))
        self.assign_name(counter, self.cast(start, t))
        self.assign_name(limit, self.materialize(stop, t))
        header, body = self.new_block("for"), self.new_block("body")
        latch, exit_ = self.new_block("next"), self.new_block("endfor")
        self.jump(header)
        self.place(header)
        i = self.read(counter, header)
        if isinstance(step, Const):
            cond = self.compare("lt" if step.value > 0 else "gt", i, self.read(limit, header))
        else:
            stop_here = self.read(limit, header)
            cond = self.logical(Op.OR, self.logical(Op.AND, up, self.compare("lt", i, stop_here)),
                                self.logical(Op.AND, down, self.compare("gt", i, stop_here)))
        self.branch(cond, body, exit_)
        self.place(body)
        self.seal(body)
        self.assign_name(name, self.read(counter, body))
        self.loops.append((latch, exit_))
        self.depth += 1
        self.statements(node.body)
        self.depth -= 1
        self.loops.pop()
        self.jump(latch)
        if latch.preds:
            self.place(latch)
            self.seal(latch)
            self.assign_name(counter, self.binop(Op.ADD, self.read(counter, latch),
                                                 Const(step.value, t) if isinstance(step, Const) else step))
            self.jump(header)
        else:
            self.seal(latch)
        self.seal(header)
        self.place(exit_)
        self.seal(exit_)

    # -- expressions ----------------------------------------------------------------------------
    def expr(self, node):
        self.at(node)
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.error(f"unsupported construct: {_construct(node)} is not supported in kernels")
        return method(node)

    def expr_Constant(self, node):
        v = node.value
        if isinstance(v, bool):
            return Const(v, T.boolean)
        if isinstance(v, int):
            return _int_constant(v)
        if isinstance(v, float):
            return Const(v, T.WEAK_FLOAT)
        if isinstance(v, complex):                  # 1j, 2 + 3j: a complex literal (complex128 in a variable)
            return complex_values.constant(v)
        if isinstance(v, str):                      # a compile-time value, as a closure's op name
            return v
        raise self.error(f"unsupported constant {v!r} (kernels compute with numbers only)")

    def expr_Tuple(self, node):
        return tuple(self.expr(e) for e in node.elts)

    def expr_Slice(self, node):
        return array_views.Slice(*(None if part is None else self.expr(part)
                                   for part in (node.lower, node.upper, node.step)))

    def expr_Lambda(self, node):
        """A lambda written in the kernel (numba inlines it): a compile-time value, its body compiled where it is
        called, with its free names read there, as a closure reads them when it runs."""
        return _Lambda(node)

    def call_lambda(self, node: ast.Lambda, args: list):
        params = [a.arg for a in node.args.args]
        if node.args.vararg or node.args.kwarg or node.args.kwonlyargs or node.args.defaults or \
                node.args.posonlyargs or len(params) != len(args):
            raise self.error(f"this lambda takes {len(params)} arguments by position, got {len(args)}")
        self.counter += 1
        prefix = f"<lambda>#{self.counter}."
        for name, value in zip(params, args, strict=True):
            self.assign_name(prefix + name, value)
        return self.expr(_Renamer(set(params), prefix).visit(copy.deepcopy(node.body)))

    def expr_Name(self, node):
        return self.lookup(node.id)

    def lookup(self, name: str):
        if name in self.static:
            value = self.static[name]
            if isinstance(value, _Numbers):
                return value.value if value.value is not None else \
                    tuple(self.lookup(f"{name}${k}") for k in range(value.arity))
            if isinstance(value, _Diverged):
                raise self.error(f"{name!r} names {value.what} after the branch at line {value.line}, decided at run "
                                 "time; a kernel's array names are fixed when it compiles: index each array inside "
                                 "the branch that chooses it")
            return value
        if name in self.var_types:
            if T.is_complex(self.var_types[name]):
                return complex_values.read(self, name)
            return self.read(name, self.current)
        if name in self.argtypes:
            t = self.argtypes[name]
            if isinstance(t, T.ArrayType):
                return ArrayRef(name, t, param_offset=self.arg_offsets[name])
            if t.kind == "complex":
                return complex_values.param(self, self.arg_offsets[name], t)
            return self.param(self.arg_offsets[name], t)
        if name in self.globals:
            value = self.globals[name]
            if type(value).__name__ == "DeviceNDArray" and hasattr(value, "copy_to_host"):     # (no import cycle)
                return self.captured_device_array(name, value)
            return self.static_value(value, name)
        builtins = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)
        if name in builtins:
            return builtins[name]
        raise self.error(f"name {name!r} is not defined")

    def static_value(self, value, name: str):
        if value is K.laneid:
            return self.emit(Op.SREG, T.int32, name="laneid")
        if value is K.warpsize:
            return self.emit(Op.DIM, T.int32, offset=abi.CBANK_WARP_SIZE)
        if isinstance(value, bool):
            return Const(value, T.boolean)
        if isinstance(value, int):
            return _int_constant(value)
        if isinstance(value, float):
            return Const(value, T.WEAK_FLOAT)
        if isinstance(value, complex):
            return complex_values.constant(value)
        if isinstance(value, np.complexfloating):
            return complex_values.constant(value, T.scalar_of(value.dtype))
        if isinstance(value, np.generic) and not isinstance(value, np.str_):
            return Const(value.item(), T.scalar_of(value.dtype))
        return value

    def param(self, offset: int, t) -> ir.Value:
        return self.emit(Op.PARAM, t, offset=abi.KERNARG_CBANK_OFFSET + offset)

    def expr_BinOp(self, node):
        return self.arith(node.op, self.expr(node.left), self.expr(node.right))

    def arith(self, operator: ast.operator, a, b):
        """a <operator> b, for one of Python's binary operators."""
        if isinstance(a, Complex) or isinstance(b, Complex):
            return complex_values.arith(self, operator, a, b)
        if isinstance(operator, ast.Pow):
            return self.power(a, b)
        op = _BINOPS.get(type(operator))
        if op is None:
            raise self.error(f"unsupported operator {type(operator).__name__}")
        return self.binop(op, a, b)

    def power(self, a, b):
        if isinstance(b, Const) and isinstance(b.value, int) and 0 <= b.value <= 8:
            result = Const(1, T.WEAK_INT)
            for _ in range(b.value):
                result = self.binop(Op.MUL, result, a)
            return result
        if isinstance(a, Const) and isinstance(b, Const):
            value = fold(operator.pow, a.value, b.value)
            if value is not None:
                return Const(value, T.unify(a.type, b.type))
        return calls.math_function(self, "pow", [a, b])

    def expr_UnaryOp(self, node):
        x = self.expr(node.operand)
        if isinstance(x, Complex) and not isinstance(node.op, ast.Not | ast.UAdd):
            if isinstance(node.op, ast.USub):
                return complex_values.negate(self, x)
            raise self.error("~ on a complex number")
        if isinstance(node.op, ast.USub):
            return self.neg(x)
        if isinstance(node.op, ast.UAdd):
            return x
        if isinstance(node.op, ast.Not):
            x = self.to_bool(x)
            return Const(not x.value, T.boolean) if isinstance(x, Const) else self.emit(Op.NOT, T.boolean, [x])
        if isinstance(node.op, ast.Invert):
            if self.typeof(x) == T.boolean:
                raise self.error("~ on a bool; use 'not'")
            return self.binop(Op.XOR, x, Const(-1, T.WEAK_INT))
        raise self.error(f"unsupported unary operator {type(node.op).__name__}")

    def expr_Compare(self, node):
        result, left = None, self.expr(node.left)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            name = _CMPOPS.get(type(op))
            if name is None:
                raise self.error(f"unsupported comparison {type(op).__name__}")
            right = self.expr(right_node)
            c = self.compare_strings(name, left, right) if isinstance(left, str) or isinstance(right, str) \
                else self.compare(name, left, right)
            result = c if result is None else self.logical(Op.AND, result, c)
            left = right
        return result

    def compare_strings(self, name: str, left, right) -> Const:
        """Strings exist only at compile time (a kernel made per operation names it by a string
        constant), so comparing two of them decides a branch before any code is emitted."""
        if not (isinstance(left, str) and isinstance(right, str)) or name not in ("eq", "ne"):
            raise self.error("strings are compile-time constants: compare them with == or != to another string")
        return Const((left == right) == (name == "eq"), T.boolean)

    def expr_BoolOp(self, node):
        op = Op.AND if isinstance(node.op, ast.And) else Op.OR
        result = self.expr(node.values[0])
        for value_node in node.values[1:]:
            if _is_simple(value_node):
                result = self.logical(op, result, self.expr(value_node))
                continue
            # The right side may fault (it reads memory): evaluate it only when needed.
            left = self.to_bool(result)
            if isinstance(left, Const):
                result = self.expr(value_node) if (left.value if op is Op.AND else not left.value) else left
                continue
            self.counter += 1
            tmp = f"$bool{self.counter}"
            self.assign_name(tmp, left)
            rhs, join = self.new_block("rhs"), self.new_block("endbool")
            if op is Op.AND:
                self.branch(left, rhs, join)
            else:
                self.branch(left, join, rhs)
            self.place(rhs)
            self.seal(rhs)
            self.assign_name(tmp, self.to_bool(self.expr(value_node)))
            self.jump(join)
            self.place(join)
            self.seal(join)
            result = self.read(tmp, join)
        return self.to_bool(result)

    def expr_IfExp(self, node):
        cond = self.to_bool(self.expr(node.test))
        if isinstance(cond, Const):
            return self.expr(node.body if cond.value else node.orelse)
        if _is_simple(node.body) and _is_simple(node.orelse):
            a, b = self.expr(node.body), self.expr(node.orelse)
            t = T.concrete(T.unify(self.typeof(a), self.typeof(b)))
            if t.kind == "complex":                  # part by part
                a, b = complex_values.promote(self, a, t), complex_values.promote(self, b, t)
                c = T.component(t)
                return Complex(*(self.emit(Op.SELECT, c, [cond, self.materialize(x, c), self.materialize(y, c)])
                                 for x, y in ((a.re, b.re), (a.im, b.im))), t)
            return self.emit(Op.SELECT, t, [cond, self.materialize(a, t), self.materialize(b, t)])
        self.counter += 1
        tmp = f"$ifexp{self.counter}"
        then, other, join = self.new_block("then"), self.new_block("else"), self.new_block("endif")
        self.branch(cond, then, other)
        for block, branch in ((then, node.body), (other, node.orelse)):
            self.place(block)
            self.seal(block)
            self.assign_name(tmp, self.expr(branch))
            self.jump(join)
        self.place(join)
        self.seal(join)
        return self.lookup(tmp)

    def expr_Attribute(self, node):
        base = self.expr(node.value)
        attr = node.attr
        if isinstance(base, K.Dim3):
            if attr not in ("x", "y", "z"):
                raise self.error(f"{base.name} has .x, .y and .z, not .{attr}")
            return self.dim3(base, attr)
        if isinstance(base, ArrayRef):
            if attr == "shape":
                return self.shape(base)
            if attr == "ndim":
                return Const(base.type.ndim, T.WEAK_INT)
            if attr == "dtype":
                return base.type.dtype
            if attr == "size":
                size = Const(1, T.WEAK_INT)
                for s in self.shape(base):
                    size = self.binop(Op.MUL, size, s)
                return size
            raise self.error(f"arrays in kernels have .shape, .ndim, .size and .dtype, not .{attr}")
        if isinstance(base, records.RecordRef):
            return records.load(self, base, attr)
        if base is K.laneid or base is K.warpsize:
            raise self.error(f"{base.name} has no attributes")
        if isinstance(base, Complex) or isinstance(base, Const | ir.Value) and attr in ("real", "imag", "conjugate"):
            return complex_values.attribute(self, base, attr)
        if isinstance(base, Const | ir.Value | tuple):
            raise self.error(f"{describe(base)} has no attribute {attr!r}")
        try:
            return self.static_value(getattr(base, attr), attr)
        except AttributeError:
            raise self.error(f"{describe(base)} has no attribute {attr!r}") from None

    def dim3(self, which: K.Dim3, axis: str):
        if which is K.threadIdx or which is K.blockIdx:
            name = f"{'tid' if which is K.threadIdx else 'ctaid'}.{axis}"
            if name not in self.sregs:          # read once, in the entry block
                saved, self.current = self.current, self.entry
                self.sregs[name] = self.emit(Op.SREG, T.int32, name=name)
                self.current = saved
            return self.sregs[name]
        base = abi.CBANK_BLOCK_DIM if which is K.blockDim else abi.CBANK_GRID_DIM
        return self.emit(Op.DIM, T.int32, offset=base + 4 * "xyz".index(axis))

    def shape(self, ref: ArrayRef) -> tuple:
        return array_views.shape(self, ref)

    def strides(self, ref: ArrayRef) -> list:
        """Element strides: constants where the layout fixes them, else read from the kernarg."""
        t = ref.type
        if t.shape is not None:
            strides, acc = [], 1
            for s in reversed(t.shape):
                strides.insert(0, Const(acc, T.WEAK_INT))
                acc *= s
            return strides
        params = [self.param(ref.param_offset + 8 + 8 * t.ndim + 8 * k, T.int64) for k in range(t.ndim)]
        if t.layout == "C":
            params[-1] = Const(1, T.WEAK_INT)
        elif t.layout == "F":
            params[0] = Const(1, T.WEAK_INT)
        return params

    def expr_Subscript(self, node):
        return self.subscript(self.expr(node.value), self.expr(node.slice))

    def subscript(self, base, index):
        if isinstance(base, tuple):
            if not isinstance(index, Const) or not isinstance(index.value, int):
                raise self.error("a tuple can only be indexed by a constant")
            try:
                return base[index.value]
            except IndexError:
                raise self.error(f"tuple index {index.value} out of range") from None
        if isinstance(base, records.RecordRef):
            return records.load(self, base, index)
        if isinstance(base, np.ndarray):           # a global or closure numpy array: numba freezes it into the
            base = self.constant_array(np.ascontiguousarray(base))     # kernel when it compiles, as const memory
        if not isinstance(base, ArrayRef):
            raise self.error(f"{describe(base)} cannot be indexed")
        items = index if isinstance(index, tuple) else (index,)
        if 0 < len(items) < base.type.ndim or any(isinstance(x, array_views.Slice) for x in items):
            return array_views.view(self, base, items)
        t = base.type.dtype
        if t.kind == "record":
            return records.element(self, base, index)
        if t.kind == "complex":
            return complex_values.load(self, base, index, _SPACE.get(base.type.space))
        if base.type.space == "local":
            return self.read(self.local_slot(base, index), self.current)
        if t in T.STORAGE:                          # a small integer: loaded widened to int32
            return self.emit(Op.LOAD, T.int32, [self.address(base, index)], space=_SPACE[base.type.space],
                             storage=t.name)
        return self.emit(Op.LOAD, t, [self.address(base, index)], space=_SPACE[base.type.space])

    def assign_subscript(self, base, index, value) -> None:
        if isinstance(base, records.RecordRef):
            records.store(self, base, index, value)
            return
        if not isinstance(base, ArrayRef):
            raise self.error(f"cannot assign into {describe(base)}")
        if any(isinstance(x, array_views.Slice) for x in (index if isinstance(index, tuple) else (index,))):
            raise self.error("assigning to a slice is not supported in kernels: store each element")
        t = base.type.dtype
        if t.kind == "record":
            raise self.error(f"cannot assign a whole element of record array {base.name!r}: assign its fields")
        if t.kind == "complex":
            complex_values.store(self, base, index, value, _SPACE.get(base.type.space))
            return
        if isinstance(value, Complex):
            raise complex_values.refuse(self, value, f"as an element of {describe(base)} of {t}")
        if not isinstance(value, Const | ir.Value):
            raise self.error(f"cannot store {describe(value)} into an array")
        if base.type.space == "local":
            slot = self.local_slot(base, index)
            self.write(slot, self.current, self.materialize(self.cast(value, t), t))
            return
        addr = self.address(base, index)
        if t in T.STORAGE:                          # a small integer: its low bytes of the value as int32
            self.emit(Op.STORE, None, [addr, self.materialize(self.cast(value, T.int32), T.int32)],
                      space=_SPACE[base.type.space], storage=t.name)
            return
        self.emit(Op.STORE, None, [addr, self.materialize(self.cast(value, t), t)], space=_SPACE[base.type.space])

    def indices(self, ref: ArrayRef, index) -> list:
        items = list(index) if isinstance(index, tuple) else [index]
        if len(items) != ref.type.ndim:
            raise self.error(f"array {ref.name!r} has {ref.type.ndim} dimension(s) but is indexed with "
                             f"{len(items)}")
        for x in items:
            if not isinstance(x, Const | ir.Value) or self.typeof(x) in (T.WEAK_FLOAT,) or \
                    getattr(self.typeof(x), "kind", "int") == "float":
                raise self.error(f"array index must be an integer, not {describe(x)}")
        return items

    def local_slot(self, ref: ArrayRef, index) -> str:
        items = self.indices(ref, index)
        if ref.parent is not None:
            return self.local_slot(ref.parent, array_views.parent_indices(self, ref, items))
        if not all(isinstance(x, Const) for x in items):
            self.hints["memory_locals"].add(ref.name)     # indexed at run time: restart with it in memory
            raise _Retype(ref.name)
        flat = 0
        for x, size in zip(items, ref.type.shape, strict=True):
            at = x.value + size if x.value < 0 else x.value          # numba's wraparound: a[-1] is the last
            if not 0 <= at < size:
                raise self.error(f"index {x.value} is out of bounds for local array {ref.name!r} of shape "
                                 f"{ref.type.shape}")
            flat = flat * size + at
        slot = f"{ref.name}[{flat}]"
        self.var_types.setdefault(slot, ref.type.dtype)
        return slot

    def address(self, ref: ArrayRef, index, part: int = 0) -> ir.Value:
        """The address of ref[index] (of its real or imaginary part, `part` 0 or 1, in a complex array)."""
        items = self.indices(ref, index)
        if any(isinstance(x, Const) and x.value < 0 for x in items):    # numba's wraparound: a[-1] is the last
            extents = self.shape(ref)                # of this array or view (a global array's from its kernarg)
            items = [self.binop(Op.ADD, n, x) if isinstance(x, Const) and x.value < 0 else x
                     for x, n in zip(items, extents, strict=True)]
        if ref.parent is not None:                  # a view: its parent's element
            return self.address(ref.parent, array_views.parent_indices(self, ref, items), part)
        flat = Const(0, T.WEAK_INT)
        for x, stride in zip(items, self.strides(ref), strict=True):
            flat = self.binop(Op.ADD, flat, self.binop(Op.MUL, x, stride))
        itemsize = ref.type.dtype.itemsize
        if ref.type.dtype.kind == "complex":        # an element is two floats: address the part's
            itemsize //= 2
            flat = self.binop(Op.ADD, self.binop(Op.MUL, flat, Const(2, T.WEAK_INT)), Const(part, T.WEAK_INT))
        if ref.type.space in ("shared", "local_memory"):
            flat = self.cast(flat, T.int32)
            byte = self.binop(Op.ADD, self.binop(Op.MUL, flat, Const(itemsize, T.WEAK_INT)),
                              Const(ref.base, T.WEAK_INT))
            return self.materialize(byte, T.int32)
        if isinstance(flat, Const):
            flat = self.cast(flat, T.int32 if -2**31 <= flat.value < 2**31 else T.int64)
        elif flat.type != T.int32:
            flat = self.cast(flat, T.int64)
        ptr = self.param(ref.param_offset, ir.ADDRESS)
        return self.emit(Op.GADDR, ir.ADDRESS, [ptr, self.materialize(flat)], scale=itemsize)

    # -- calls ----------------------------------------------------------------------------------
    def expr_Call(self, node):
        fn = self.expr(node.func)
        if fn is print:
            return lower_print(self, node)
        if isinstance(fn, complex_values.Method):
            return complex_values.call_method(self, fn, [self.expr(a) for a in node.args] + node.keywords)
        if isinstance(fn, _Lambda):
            if node.keywords:
                raise self.error("a lambda in a kernel takes its arguments by position")
            return self.call_lambda(fn.node, [self.expr(a) for a in node.args])
        fn = as_device_function(fn) or fn           # a real numba @jit function too, as numba compiles it here
        if isinstance(fn, DeviceFunction):
            if node.keywords:
                raise self.error(f"device function {fn.__name__!r} takes its arguments by position")
            return self.inline(fn, [self.expr(a) for a in node.args])
        builtin = calls.lookup(fn)
        if builtin is None:
            raise self.error(f"call to {describe(fn)} is not supported in kernels")
        return builtin.lower(self, self.arguments(builtin, node))

    def arguments(self, builtin: calls.Builtin, node: ast.Call) -> list:
        """A call's arguments, evaluated and checked against the table's entry (see calls.py)."""
        args = [self.expr(a) for a in node.args]
        keywords = {k.arg: self.expr(k.value) for k in node.keywords}
        self.at(node)
        return builtin.bind(args, keywords, self.error)

    def constant_array(self, data: np.ndarray) -> ArrayRef:
        """cuda.const.array_like's data, fixed at compile time.

        The data travels with the compiled kernel; the dispatcher copies it to the device once per
        context and passes its address as a hidden argument after the kernel's own."""
        index = next((k for k, known in enumerate(self.func.const_arrays) if known.dtype == data.dtype
                      and known.shape == data.shape and np.array_equal(known, data)), None)
        if index is None:
            index = len(self.func.const_arrays)
            self.func.const_arrays.append(data)
        return self.hidden_array(f"$const{index}", T.scalar_of(data.dtype), data.shape)

    def captured_device_array(self, name: str, array) -> ArrayRef:
        """A module's global device array that the kernel reads, as numba captures it: by reference (a write to it
        between launches is seen), its dtype and shape fixed when the kernel compiles. It travels as a hidden
        argument named after the module and the global, which the dispatcher looks up at each launch."""
        module = self.globals.get("__name__")
        if module is None or sys.modules.get(module) is None or vars(sys.modules[module]).get(name) is not array:
            raise self.error(f"{name!r} is a device array a kernel reads from its closure; make it an argument or a "
                             "module global")
        if not array.flags["C_CONTIGUOUS"]:
            raise self.error(f"global device array {name!r} must be C-contiguous")
        ref = self.hidden_array(f"{CAPTURED}{module}:{name}", T.element_of(array.dtype), tuple(array.shape))
        entry = next(e for e in self.func.arg_layout if e.get("name") == ref.name)
        entry["shape"] = list(array.shape)          # the shape compiled in, which each launch's array must have
        return ref

    def hidden_array(self, name: str, dtype: T.Scalar, shape: tuple | None = None) -> ArrayRef:
        """A C-contiguous array the kernel takes as a hidden argument after its own, named `name` in its argument
        layout (a constant array's copy, the printf FIFO; the dispatcher passes it), laid out at its first use."""
        t = T.ArrayType(dtype, 1 if shape is None else len(shape), "C", "global", shape)
        entry = next((e for e in self.func.arg_layout if e.get("name") == name), None)
        if entry is None:
            layout, _ = kernarg_layout([t])
            offset = -(-self.func.kernarg_size // 8) * 8
            entry = {**layout[0], "offset": offset, "name": name}
            self.func.arg_layout.append(entry)
            self.func.kernarg_size = -(-(offset + layout[0]["size"]) // 8) * 8
        return ArrayRef(name, t, param_offset=entry["offset"])

    def inline(self, fn: DeviceFunction, args: list):
        """Compile a device function's body here, its parameters bound to `args`.

        A body whose one `return` ends it compiles straight into the caller's block, so the code
        around the call optimizes as if it were written out (contraction into FFMA, local CSE); any
        other `return` jumps to a block after the body, where the result is read."""
        if any(f is fn for f, *_ in self.inlining):
            raise self.error(f"device function {fn.__name__!r} calls itself; recursion is not supported")
        try:
            fdef, filename, first = fn.parsed()
        except (OSError, TypeError, ValueError) as e:
            raise self.error(f"cannot read the source of device function {fn.__name__!r}: {e}") from None
        params = [a.arg for a in fdef.args.args]
        if len(params) != len(args) or fdef.args.vararg or fdef.args.kwonlyargs:
            raise self.error(f"device function {fn.__name__!r} takes {len(params)} arguments, got {len(args)}")
        self.counter += 1
        prefix = f"{fn.__name__}#{self.counter}."
        assigned = {t.id for n in ast.walk(fdef) for t in _targets(n)}
        names = set(params) | assigned
        body = [_Renamer(names, prefix).visit(stmt) for stmt in copy.deepcopy(fdef.body)]
        for name, value in zip(params, args, strict=True):
            if isinstance(value, Const) and name not in assigned:    # a constant the body only reads: typed as a
                self.static[prefix + name] = Const(value.value, T.concrete(value.type))   # variable, `if flag:` folds
            else:
                self.assign_name(prefix + name, value)
        in_place = _returns_once_at_the_end(body)
        exit_ = None if in_place else self.new_block("return")
        saved = (self.filename, self.first_line, self.line, self.globals)
        self.filename, self.first_line = filename, first
        self.globals = dict(fn.py_func.__globals__)
        if fn.py_func.__closure__:              # a device function made by a factory: its closure constants
            self.globals.update(zip(fn.py_func.__code__.co_freevars,
                                    (c.cell_contents for c in fn.py_func.__closure__), strict=True))
        self.inlining.append((fn, prefix, exit_, len(self.loops)))
        try:
            if in_place:
                self.statements(body[:-1])
                self.at(body[-1])
                value = _returned(body[-1])
                result = Const(0, T.WEAK_INT) if value is None else self.expr(value)
            else:
                self.statements(body)
        finally:
            self.inlining.pop()
            self.filename, self.first_line, self.line, self.globals = saved
        if in_place:
            return result
        self.jump(exit_)
        self.place(exit_)
        self.seal(exit_)
        if not exit_.preds:
            raise self.error(f"device function {fn.__name__!r} never returns")
        if prefix in self.returned_tuples:
            return tuple(self.lookup(f"{prefix}$return.{k}") for k in range(self.returned_tuples[prefix]))
        result = prefix + "$return"
        if result in self.static:              # an array or a tuple, the same from every return (else an error)
            return self.lookup(result)
        if result in self.var_types:
            return self.lookup(result)
        return Const(0, T.WEAK_INT)

    def allocate_array(self, space: str, shape: tuple, dtype: T.Scalar) -> ArrayRef:
        """A cuda.shared.array ("shared") or cuda.local.array ("local") of a constant shape."""
        self.counter += 1
        if space == "shared" and len(shape) == 1 and shape[0].value == 0:
            # Dynamic shared memory: sized at launch (kernel[grid, block, stream, nbytes]), after the static.
            self.dynamic_shared = True
            base = -(-self.hints.get("dynamic_shared_base", 0) // 16) * 16
            return ArrayRef(f"shared{self.counter}", T.ArrayType(dtype, 1, "C", "shared", (2**31 - 1,)), base=base)
        if not all(s.value > 0 for s in shape):
            raise self.error(f"the shape of cuda.{space}.array must be positive (or 0 for dynamic shared memory)")
        dims = tuple(s.value for s in shape)
        size = int(np.prod(dims)) * dtype.itemsize
        if space == "shared":
            base = -(-self.shared_bytes // 16) * 16
            self.shared_bytes = base + size
            return ArrayRef(f"shared{self.counter}", T.ArrayType(dtype, len(dims), "C", "shared", dims), base=base)
        name = f"local{self.counter}"
        if name in self.hints["memory_locals"] and dtype.kind == "vector":
            raise self.error(f"a local array of {dtype} fragments must be indexed with constants (it lives in "
                             "registers)")
        if name in self.hints["memory_locals"]:      # indexed at run time: in the thread's local memory
            base = -(-self.local_bytes // 8) * 8
            self.local_bytes = base + size
            return ArrayRef(name, T.ArrayType(dtype, len(dims), "C", "local_memory", dims), base=base)
        return ArrayRef(name, T.ArrayType(dtype, len(dims), "C", "local", dims))


class _Lambda:
    """A lambda defined in a kernel, as the compiler holds it: its AST."""

    def __init__(self, node: ast.Lambda):
        self.node = node

    def __repr__(self) -> str:
        return "a lambda"


@dataclass(frozen=True)
class _Diverged:
    """A static name the two sides of a run-time branch bound to different values (an error once read)."""
    what: str
    line: int


@dataclass(frozen=True)
class _Numbers:
    """A name bound to a tuple of numbers (`Frontend.assign_numbers`): its length, and the tuple itself while
    the name is bound only once (None: read its element variables)."""
    arity: int
    value: tuple | None


def _merge_static(then: dict, other: dict, line: int) -> dict:
    """The static names after a run-time branch from those of its two sides: a name they bound differently is
    `_Diverged`. (A side that returns, breaks or continues counts too: a return from an inlined device function
    goes on to its caller.)"""
    merged = dict(then)
    for name, value in other.items():
        if name in then and then[name] != value:
            merged[name] = _Diverged(f"{describe(then[name])} on one side and {describe(value)} on the other", line)
        elif name not in then:
            merged[name] = value
    return merged


class _Renamer(ast.NodeTransformer):
    """Gives an inlined function's own names a prefix, so they cannot meet the caller's."""

    def __init__(self, names: set[str], prefix: str):
        self.names, self.prefix = names, prefix

    def visit_Name(self, node):
        if node.id in self.names:
            node.id = self.prefix + node.id
        return node


def _targets(node):
    """The names a statement binds: those its targets store to (`x`, `a, b`), not those a target reads (`a[i] = v`
    reads `a` and `i`)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.For):
        targets = [node.target]
    else:
        return
    for t in targets:
        yield from (n for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))


def _int_constant(value: int) -> Const:
    """An int the kernel names: a weak literal, or a uint64 from 2^63 up, as numba types an int only uint64 holds."""
    return Const(value, T.uint64 if 2**63 <= value < 2**64 else T.WEAK_INT)


def _returned(node: ast.Return):
    """What a return statement gives back: an expression, or None for a bare `return` (or `return None`)."""
    if node.value is None or isinstance(node.value, ast.Constant) and node.value.value is None:
        return None
    return node.value


def _returns_once_at_the_end(body: list) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return) and \
        not any(isinstance(n, ast.Return) for stmt in body[:-1] for n in ast.walk(stmt))


def _has_jumps(body: list) -> bool:
    return any(isinstance(n, ast.Break | ast.Continue) for stmt in body for n in ast.walk(stmt))


def _is_simple(node) -> bool:
    """No memory reads or calls: safe to evaluate even when the result is not needed."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            return False
        if isinstance(n, ast.Subscript) and not (isinstance(n.value, ast.Attribute) and n.value.attr == "shape"):
            return False
    return True


def _construct(node) -> str:
    names = {"Try": "'try' statement", "With": "'with' statement", "Lambda": "lambda", "ListComp":
             "list comprehension", "Dict": "dict display", "List": "list display", "Global": "'global' statement",
             "FunctionDef": "nested function definition", "Yield": "yield", "Raise": "'raise' statement",
             "JoinedStr": "f-string", "Starred": "starred expression", "Slice": "slice"}
    return names.get(type(node).__name__, f"'{type(node).__name__}'")


_BINOPS = {ast.Add: Op.ADD, ast.Sub: Op.SUB, ast.Mult: Op.MUL, ast.Div: Op.FDIV, ast.FloorDiv: Op.DIV,
           ast.Mod: Op.MOD, ast.BitAnd: Op.AND, ast.BitOr: Op.OR, ast.BitXor: Op.XOR, ast.LShift: Op.SHL,
           ast.RShift: Op.SHR}       # ** is a call of the math library (Frontend.power)

_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_SPACE = {"global": "global", "shared": "shared", "local_memory": "local"}


def build_ir(pyfunc, argtypes: list) -> ir.Function:
    """The typed SSA IR of a kernel for the given argument types."""
    var_types: dict = {}
    hints: dict = {}
    for _ in range(MAX_RETYPES):
        frontend = Frontend(pyfunc, argtypes, var_types, hints)
        try:
            return frontend.build()
        except _Retype:
            var_types = frontend.var_types
        except RecursionError:
            raise frontend.error("kernel too deeply nested") from None
    raise CompileError("variable types did not settle", kernel=pyfunc.__name__)

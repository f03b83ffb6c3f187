"""Layer 3: `@cuda.jit(device=True)` functions, which kernels call and the compiler inlines.

    @cuda.jit(device=True)
    def clamp(x, lo, hi):
        return min(max(x, lo), hi)

A device function has no code of its own: at each call the frontend compiles its body in
place, with its parameters bound to the call's arguments (numbers, arrays or tuples), as nvcc
inlines `__device__` functions it can see. A body that returns once, at its end, becomes part
of the caller's block; other `return`s jump to the end of the inlined body. Recursion is not
supported (there is no call stack).
"""

import ast
import inspect
import textwrap


class DeviceFunction:
    def __init__(self, pyfunc):
        self.py_func = pyfunc
        self.__name__ = pyfunc.__name__
        self.__doc__ = pyfunc.__doc__
        self._parsed = None

    def __repr__(self) -> str:
        return f"<lapis device function {self.__name__}>"

    @property
    def arity(self) -> int:
        """How many arguments it takes."""
        return self.py_func.__code__.co_argcount

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"device function {self.__name__!r} can only be called from a kernel or another "
                           "device function")

    def parsed(self) -> tuple[ast.FunctionDef, str, int]:
        """(definition, file, first line) of the source, read once."""
        if self._parsed is None:
            lines, first = inspect.getsourcelines(self.py_func)
            fdef = function_def(self.py_func, "".join(lines))
            self._parsed = (fdef, inspect.getsourcefile(self.py_func) or "<device function>", first)
        return self._parsed

    def source(self) -> str:
        return inspect.getsource(self.py_func)


def function_def(pyfunc, source: str) -> ast.FunctionDef:
    """The definition of `pyfunc` in `source`, the lines Python keeps for it: its `def`, or for a lambda (numba
    compiles `cuda.reduce(lambda a, b: a + b)` and `cuda.jit(device=True)(lambda x: x * 2)`) a `def` that returns
    the lambda's body. Raises ValueError when the lines hold neither, or several lambdas of its arguments."""
    tree = parse_source(pyfunc, source)
    fdef = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fdef is not None or pyfunc.__name__ != "<lambda>":
        if fdef is None:
            raise ValueError(f"no definition of {pyfunc.__name__!r} in its source lines")
        return fdef
    names = list(pyfunc.__code__.co_varnames[:pyfunc.__code__.co_argcount])
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and [a.arg for a in n.args.args] == names]
    if len(found) != 1:
        raise ValueError(f"{len(found)} lambdas of ({', '.join(names)}) on the lines that define this one: give the "
                         "function a def of its own")
    body = ast.Return(found[0].body)
    fdef = ast.FunctionDef(name="<lambda>", args=found[0].args, body=[body], decorator_list=[], returns=None)
    return ast.fix_missing_locations(ast.copy_location(fdef, found[0]))


def parse_source(pyfunc, source: str) -> ast.Module:
    """The source lines Python keeps for `pyfunc`, parsed. A lambda's may be the middle of an expression that
    spans more lines (an argument of a call): they are parsed as one parenthesized expression then."""
    text = textwrap.dedent(source)
    try:
        return ast.parse(text)
    except SyntaxError:
        if pyfunc.__name__ != "<lambda>":
            raise
        try:
            return ast.parse(f"({text.strip().rstrip(',')})")
        except SyntaxError:
            raise ValueError("the lines that define this lambda do not parse on their own: give the function a def "
                             "of its own") from None


class HostDeviceFunction(DeviceFunction):
    """A function both sides call: the host runs it as Python, a kernel inlines it (numba's @jit functions,
    which numba compiles for the GPU where a kernel calls them)."""

    def __call__(self, *args, **kwargs):
        return self.py_func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<lapis host and device function {self.__name__}>"


_NUMBA_FUNCTIONS: dict[int, tuple[object, HostDeviceFunction]] = {}     # id(dispatcher) -> (it, its stand-in)


def as_device_function(value) -> DeviceFunction | None:
    """What a kernel calls `value` as: a DeviceFunction as it is; a real numba @jit function (numba's
    CPUDispatcher, which numba compiles for the GPU where a kernel calls it) as a HostDeviceFunction of its Python
    function, the same one at every call (recursion is found by identity); anything else None."""
    if isinstance(value, DeviceFunction):
        return value
    if type(value).__name__ != "CPUDispatcher" or not callable(getattr(value, "py_func", None)):
        return None
    kept = _NUMBA_FUNCTIONS.get(id(value))
    if kept is None or kept[0] is not value:
        kept = _NUMBA_FUNCTIONS[id(value)] = (value, HostDeviceFunction(value.py_func))
    return kept[1]

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
            tree = ast.parse(textwrap.dedent("".join(lines)))
            fdef = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
            self._parsed = (fdef, inspect.getsourcefile(self.py_func) or "<device function>", first)
        return self._parsed

    def source(self) -> str:
        return inspect.getsource(self.py_func)

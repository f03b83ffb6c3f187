"""Layer 3 compiler: the one error a kernel author sees from it."""


class CompileError(Exception):
    """A kernel the compiler cannot translate; names the file, line and construct."""

    def __init__(self, message: str, filename: str = "<kernel>", line: int = 0, kernel: str = ""):
        where = f"{filename}:{line}: " if line else ""
        super().__init__(f"{where}{message}" + (f" (in kernel {kernel!r})" if kernel else ""))
        self.filename, self.line, self.kernel = filename, line, kernel

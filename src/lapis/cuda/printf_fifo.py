"""Layer 3: a context's printf FIFO: device memory that kernels' print() calls fill (`compiler/printing.py`) and
the host prints at the context's next synchronization once every stream is idle, as CUDA prints device printf
output at cudaDeviceSynchronize, cudaStreamSynchronize and blocking copies.

The FIFO is FIFO_BYTES of int64 words (CUDA's default cudaLimitPrintfFifoSize): word 0 counts the words the
calls have reserved, records follow. A record is a call's number (in the `prints` table of the kernel that made
it) and its values; a call that did not fit wrote nothing, and the records after it did not fit either. Flushing
reads the records, prints one line per record (its items joined by spaces, as print does, numbers formatted as
numba's %lld and %f), zeros what was used (so a stale number never reads as a record) and warns if output was
lost.
"""

import sys
import warnings

import numpy as np

from lapis.cuda.compiler.printing import FIFO_FLOAT, FIFO_WORDS, c_format
from lapis.cuda.devicearray import DeviceNDArray

FIFO_BYTES = FIFO_WORDS * 8


class PrintfFifo:
    def __init__(self, context):
        self.context = context
        self.words = DeviceNDArray.allocate(context, FIFO_BYTES // 8, np.int64)
        self.floats = self.words.view(np.float64)
        self._zero(FIFO_BYTES // 8)
        self.formats: dict[int, tuple] = {}     # print number -> its items, from every kernel launched with it
        self.written = False                    # a kernel that prints was launched since the last flush

    def argument(self, compiled, name: str) -> DeviceNDArray:
        """The FIFO as the hidden argument `name` of a launch of `compiled` (which may print)."""
        self.formats.update(compiled.prints)
        self.written = True
        return self.floats if name == FIFO_FLOAT else self.words

    def flush(self) -> None:
        """Print the records the kernels launched since the last flush wrote, and empty the FIFO. The caller has
        seen every stream's work complete."""
        if not self.written:
            return
        self.written = False
        rt, agent = self.context.rt, self.context.agent
        reserved = int(rt.copy_to_host(agent, self.words.ptr, 8).view(np.int64)[0])
        used = min(reserved, self.words.size - 1)
        words = rt.copy_to_host(agent, self.words.ptr + 8, used * 8).view(np.int64)
        self._zero(1 + used)
        lines, k = [], 0
        while k < used and int(words[k]) in self.formats:
            items = self.formats[int(words[k])]
            lines.append(self._line(items, words, k + 1))
            k += 1 + _values(items)
        if lines:
            sys.stdout.write("".join(line if printf else line + "\n" for line, printf in lines))
            sys.stdout.flush()
        if reserved > k:
            warnings.warn(f"kernels printed more than the printf FIFO's {FIFO_BYTES} bytes hold on "
                          f"{self.context.device}: {reserved - k} words of output were lost", RuntimeWarning,
                          stacklevel=3)

    @staticmethod
    def _line(items: tuple, words: np.ndarray, at: int) -> tuple[str, bool]:
        """A record's output, and whether it is C printf's (which writes its own newlines; print() ends a line)."""
        if items[0][0] == "printf":                # CUDA C++'s printf: its format, with the values in C's ways
            _, fmt, kinds = items[0]
            return c_format(fmt, [(kind, int(words[at + i])) for i, (kind, _) in enumerate(kinds)]), True
        parts = []
        for item in items:
            if item[0] == "text":
                parts.append(item[1])
                continue
            word = words[at]
            at += 1
            parts.append(f"{float(word.view(np.float64)):f}" if item[0] == "float" else
                         str(bool(word)) if item[0] == "bool" else
                         str(int(word.view(np.uint64))) if item[0] == "uint" else str(int(word)))
        return " ".join(parts), False

    def _zero(self, words: int) -> None:
        self.context.rt.copy_to_device(self.context.agent, self.words.ptr, np.zeros(words, np.int64))


def _values(items: tuple) -> int:
    """The words of a record's values after its number."""
    if items[0][0] == "printf":
        return len(items[0][2])
    return sum(item[0] != "text" for item in items)


def fifo_of(context) -> PrintfFifo:
    """The context's printf FIFO, made at the first launch of a kernel that prints."""
    if context.printf is None:
        context.printf = PrintfFifo(context)
    return context.printf

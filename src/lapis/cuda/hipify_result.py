"""Layer 3: what `lapis hipify` gives back, for Python programs (`hipify`) and CUDA C++ (`hipify_cpp`) alike."""

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Result:
    """A rewritten program, the counts of what was rewritten by kind, the warnings, and the kinds hipify-perl's
    statistics line lists (each rewriter's own)."""
    source: str
    counts: Counter = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)

    @property
    def converted(self) -> int:
        return sum(self.counts.values())

    def statistics(self, name: str) -> str:
        """hipify-perl's summary line."""
        kinds = " ".join(f"{k}:{self.counts.get(k, 0)}" for k in self.kinds)
        loc = len(self.source.splitlines())
        return f"info: converted {self.converted} CUDA->HIP refs ( {kinds} ) warn:{len(self.warnings)} LOC:{loc} " \
               f"in '{name}'"

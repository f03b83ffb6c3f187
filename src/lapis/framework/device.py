"""Layer 5: devices. `lapis.device('cuda')` is the first NVIDIA-profile GPU (H200-like),
`lapis.device('hip')` the first AMD-profile GPU (MI300X-like), `cpu` is numpy. With only AMD-profile
GPUs present (LAPIS_GPUS=mi300x), 'cuda' names those, as in PyTorch's ROCm builds."""

import re

from lapis import cuda as _cuda
from lapis import hip as _hip

_TYPES = ("cpu", "cuda", "hip")


_PARSED: dict[str, tuple[str, int | None]] = {}      # device strings seen, parsed: every op names its device


def _parse(text: str) -> tuple[str, int | None]:
    """A device string ('cuda', 'cuda:1') as (type, index or None)."""
    m = re.fullmatch(r"([a-z]+)(?::(\d+))?", text)
    if not m or m.group(1) not in _TYPES:
        raise RuntimeError(f"Expected one of {', '.join(_TYPES)} device type at start of device string: {text}")
    parsed = _PARSED[text] = m.group(1), None if m.group(2) is None else int(m.group(2))
    return parsed


class device:  # noqa: N801 - the name torch users write
    def __init__(self, type: "str | device", index: int | None = None):  # noqa: A002
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        if not isinstance(type, str):
            raise TypeError(f"device() expects a string such as 'cuda' or 'cuda:0', not {type!r}")
        parsed = _PARSED.get(type) or _parse(type)
        if parsed[1] is not None:
            if index is not None:
                raise RuntimeError(f"device string {type!r} already has an index; do not pass index={index}")
            index = parsed[1]
        if parsed[0] == "cpu" and index not in (None, 0):
            raise RuntimeError(f"there is one cpu device, not cpu:{index}")
        self.type = parsed[0]
        self.index = None if self.type == "cpu" else index

    @property
    def api(self):
        """The programming interface (Layer 3) this device is reached through. As in PyTorch's ROCm builds,
        'cuda' names the AMD-profile GPUs when no NVIDIA-profile one is present (LAPIS_GPUS=mi300x)."""
        if self.type == "cuda" and not _cuda.is_available() and _hip.is_available():
            return _hip
        return {"cuda": _cuda, "hip": _hip}[self.type]

    def normalized(self) -> "device":
        return self if self.type == "cpu" or self.index is not None else device(self.type, 0)

    def __eq__(self, other) -> bool:
        if other is self:
            return True
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"device(type='{self.type}')" if self.index is None else \
            f"device(type='{self.type}', index={self.index})"

"""Layer 5: devices. `lapis.device('cuda')` is the first NVIDIA-profile GPU (H200-like),
`lapis.device('hip')` the first AMD-profile GPU (MI300X-like), `cpu` is numpy. With only AMD-profile
GPUs present (LAPIS_GPUS=mi300x), 'cuda' names those, as in PyTorch's ROCm builds."""

import re

from lapis import cuda as _cuda
from lapis import hip as _hip

_TYPES = ("cpu", "cuda", "hip")


class device:  # noqa: N801 - the name torch users write
    def __init__(self, type: "str | device", index: int | None = None):  # noqa: A002
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        if not isinstance(type, str):
            raise TypeError(f"device() expects a string such as 'cuda' or 'cuda:0', not {type!r}")
        m = re.fullmatch(r"([a-z]+)(?::(\d+))?", type)
        if not m or m.group(1) not in _TYPES:
            raise RuntimeError(f"Expected one of {', '.join(_TYPES)} device type at start of device string: {type}")
        if m.group(2) is not None:
            if index is not None:
                raise RuntimeError(f"device string {type!r} already has an index; do not pass index={index}")
            index = int(m.group(2))
        if m.group(1) == "cpu" and index not in (None, 0):
            raise RuntimeError(f"there is one cpu device, not cpu:{index}")
        self.type = m.group(1)
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

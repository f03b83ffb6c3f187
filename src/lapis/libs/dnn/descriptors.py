"""Layer 4, DNN: the descriptors (cuDNN's tensor, filter and convolution descriptors) and the error
every routine raises, before launching anything, for arguments cuDNN would refuse."""

from dataclasses import dataclass

import numpy as np


class DnnError(ValueError):
    """Invalid arguments (CUDNN_STATUS_BAD_PARAM); nothing was launched."""


@dataclass(frozen=True)
class TensorDescriptor:
    """A 4-D tensor's dimensions in NCHW order and its memory format (cudnnSetTensor4dDescriptor)."""
    dims: tuple[int, int, int, int]
    layout: str = "NCHW"

    def __post_init__(self):
        if len(self.dims) != 4 or min(self.dims) < 0:
            raise DnnError(f"a tensor descriptor takes four non-negative dimensions (N, C, H, W), not {self.dims}")
        if self.layout not in ("NCHW", "NHWC"):
            raise DnnError(f"layout must be NCHW or NHWC, not {self.layout!r}")

    @property
    def size(self) -> int:
        return int(np.prod(self.dims))

    def strides(self) -> tuple[int, int, int, int]:
        """Element strides of N, C, H, W."""
        n, c, h, w = self.dims
        if self.layout == "NCHW":
            return c * h * w, h * w, w, 1
        return h * w * c, 1, w * c, c


@dataclass(frozen=True)
class FilterDescriptor:
    """Filters (K, C/groups, R, S) and their memory format (cudnnSetFilter4dDescriptor): "NCHW" is KCRS,
    "NHWC" is KRSC. Routines also take a plain (K, C/groups, R, S) tuple, meaning KCRS. It reads as
    its dimensions (`k, cg, r, s = filt`)."""
    dims: tuple[int, int, int, int]
    layout: str = "NCHW"

    def __post_init__(self):
        if len(self.dims) != 4 or min(self.dims) < 1:
            raise DnnError(f"a filter descriptor takes four positive dimensions (K, C/groups, R, S), not {self.dims}")
        if self.layout not in ("NCHW", "NHWC"):
            raise DnnError(f"layout must be NCHW (KCRS) or NHWC (KRSC), not {self.layout!r}")

    def __iter__(self):
        return iter(self.dims)

    def __getitem__(self, i):
        return self.dims[i]

    def __len__(self) -> int:
        return 4

    def strides(self) -> tuple[int, int, int, int]:
        """Element strides of K, C, R, S."""
        _, cg, r, s = self.dims
        return (cg * r * s, r * s, s, 1) if self.layout == "NCHW" else (r * s * cg, 1, s * cg, cg)


@dataclass(frozen=True)
class ConvolutionDescriptor:
    """Padding, stride and dilation per spatial dimension, and the group count (cudnnConvolutionDescriptor)."""
    padding: tuple[int, int] = (0, 0)
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1


def _filter(f) -> FilterDescriptor:
    return f if isinstance(f, FilterDescriptor) else FilterDescriptor(tuple(int(d) for d in f))

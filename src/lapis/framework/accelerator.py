"""Layer 5: `lapis.accelerator`, torch.accelerator's place (torch 2.6+): the device-generic face of the current
accelerator. lapis's is 'cuda': the NVIDIA-profile GPUs through `lapis.cuda` (the AMD-profile ones when only they are
present, `LAPIS_GPUS=mi300x`, as PyTorch's ROCm builds call theirs 'cuda' too). Each call is Layer 3's torch.cuda
name for the same thing (`lapis.cuda.device_count`, `current_device`, `set_device`, `synchronize`, ...)."""

import warnings

from lapis.framework.device import device as _device

_TYPE = "cuda"


def _api():
    """The programming interface (Layer 3) behind 'cuda' now."""
    return _device(_TYPE).api


def current_accelerator(check_available: bool = False) -> _device | None:
    """device(type='cuda'); None if `check_available` and no GPU is present."""
    if check_available and not is_available():
        return None
    return _device(_TYPE)


def is_available() -> bool:
    return _api().is_available()


def device_count() -> int:
    return _api().device_count()


def _index(device, optional: bool) -> int:
    """torch's _get_device_index: an int as it is, a device (or its name) of the accelerator's type by its index;
    without one, the current device's when `optional`."""
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = _device(device)
    index = None
    if isinstance(device, _device):
        if device.type != _TYPE:
            raise ValueError(f"{device.type} doesn't match the current accelerator {_TYPE}.")
        index = device.index
    if index is None:
        if not optional:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        return current_device_index()
    return index


def current_device_index() -> int:
    return _api().current_device()


def set_device_index(device, /) -> None:
    _api().set_device(_index(device, optional=False))


def current_device_idx() -> int:
    warnings.warn("Use `current_device_index` instead.", FutureWarning, stacklevel=2)
    return current_device_index()


def set_device_idx(device, /) -> None:
    warnings.warn("Use `set_device_index` instead.", FutureWarning, stacklevel=2)
    set_device_index(device)


def synchronize(device=None, /) -> None:
    """Wait for all the work queued on the device (the current one by default)."""
    _api().current_context(_index(device, optional=True)).synchronize()


def current_stream(device=None, /):
    """The device's default stream (framework ops launch there; lapis has no stream context manager)."""
    return _api().current_stream(_index(device, optional=True))


class device_index:  # noqa: N801 - torch's name
    """`with lapis.accelerator.device_index(i):` makes device i current for the block (None changes nothing)."""

    def __init__(self, device: int | None, /):
        self.idx, self.prev_idx = device, -1

    def __enter__(self) -> None:
        if self.idx is not None:
            self.prev_idx = current_device_index()
            set_device_index(self.idx)

    def __exit__(self, *exc_info) -> None:
        if self.idx is not None:
            set_device_index(self.prev_idx)


def memory_allocated(device_index=None, /) -> int:
    return _api().memory_allocated(_index(device_index, optional=True))


def max_memory_allocated(device_index=None, /) -> int:
    return _api().max_memory_allocated(_index(device_index, optional=True))


def memory_reserved(device_index=None, /) -> int:
    return _api().memory_reserved(_index(device_index, optional=True))


def empty_cache() -> None:
    _api().empty_cache()


__all__ = ["current_accelerator", "current_device_idx", "current_device_index", "current_stream", "device_count",
           "device_index", "empty_cache", "is_available", "max_memory_allocated", "memory_allocated",
           "memory_reserved", "set_device_idx", "set_device_index", "synchronize"]

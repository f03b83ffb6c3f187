"""Layer 5: automatic mixed precision, torch.amp's `autocast` and `GradScaler`.

Inside `autocast(device_type, dtype)` the ops that gain from a lower precision take float32 inputs on that device
in `dtype` (float16 by default on a GPU, bfloat16 on the cpu): matmul, mm, bmm and linear, which on a GPU then run
the matrix unit's half-precision gemm (float32 accumulation); softmax, log_softmax (so cross_entropy), layer_norm
and mse_loss take half inputs back to float32, as torch's float32 list says. Other ops compute in the widest type
of their inputs. Convolutions are not cast yet.

`GradScaler` multiplies the loss by a scale so that float16 gradients do not underflow, divides the gradients
back before the optimizer steps (`unscale_`), skips the step when any gradient is inf or NaN (reading one flag
back: a sync point, where torch keeps the flag on the device), and grows or backs off the scale (`update`).
"""

import threading
import warnings

from lapis import cuda
from lapis.framework import dtype as _dtype
from lapis.framework.autograd import no_grad
from lapis.framework.ops.views import stack

_state = threading.local()             # device type -> autocast dtype, for the autocast regions now open
DEFAULT_DTYPES = {"cuda": _dtype.float16, "hip": _dtype.float16, "cpu": _dtype.bfloat16}


def _active() -> dict:
    if not hasattr(_state, "dtypes"):
        _state.dtypes = {}
    return _state.dtypes


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    return device_type in _active()


def get_autocast_dtype(device_type: str = "cuda"):
    return _active().get(device_type, DEFAULT_DTYPES.get(device_type))


class autocast:  # noqa: N801 - torch's name
    """A region (a context manager, or a decorator) in which ops on `device_type` tensors run in mixed precision."""

    def __init__(self, device_type: str = "cuda", dtype=None, enabled: bool = True, cache_enabled=None):
        if device_type not in DEFAULT_DTYPES:
            raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
        self.dtype = dtype or DEFAULT_DTYPES[device_type]
        if enabled and device_type == "cpu" and self.dtype not in (_dtype.bfloat16, _dtype.float16):
            # torch's rule: the cpu's autocast takes the two half types and turns itself off for any other; a GPU's
            # takes any dtype (nanoGPT's float32 runs enter autocast(device_type="cuda", dtype=torch.float32))
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling autocast.\nCPU "
                          "Autocast only supports dtypes of torch.bfloat16, torch.float16 currently.", stacklevel=2)
            enabled = False
        self.device_type, self.enabled = device_type, enabled

    def __enter__(self):
        active = _active()
        self._before = active.get(self.device_type)
        if self.enabled:
            active[self.device_type] = self.dtype
        else:
            active.pop(self.device_type, None)
        return self

    def __exit__(self, *exc) -> None:
        active = _active()
        if self._before is None:
            active.pop(self.device_type, None)
        else:
            active[self.device_type] = self._before

    def __call__(self, fn):
        def wrapped(*args, **kwargs):
            with autocast(self.device_type, self.dtype, self.enabled):
                return fn(*args, **kwargs)
        return wrapped


def lower(*tensors):
    """The operands of an op autocast runs in lower precision: float32 tensors on a device in an autocast region,
    cast to its dtype (differentiably); others unchanged. None stays None."""
    active = _active()
    if not active:
        return tensors
    return tuple(t if t is None or t.dtype is not _dtype.float32 or t.device.type not in active
                 else t.to(active[t.device.type]) for t in tensors)


def upper(x):
    """The input of an op autocast runs in float32: a half tensor on a device in an autocast region, as float32."""
    active = _active()
    if active and x.device.type in active and x.dtype in (_dtype.float16, _dtype.bfloat16):
        return x.float()
    return x


class GradScaler:
    """torch.amp.GradScaler: scale(loss), unscale_(optimizer), step(optimizer), update(), with torch's defaults."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        self.device, self._enabled = device, enabled
        self._scale, self.growth_factor, self.backoff_factor = float(init_scale), growth_factor, backoff_factor
        self.growth_interval, self._growth_tracker = growth_interval, 0
        self._unscaled: dict[int, bool] = {}        # optimizer id -> whether any of its gradients was inf or NaN

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def scale(self, outputs):
        """outputs (a tensor, or a list or tuple of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        return outputs * self._scale

    def unscale_(self, optimizer) -> None:
        """Divide the optimizer's gradients by the scale, in place, and note whether any is inf or NaN."""
        if not self._enabled:
            return
        if id(optimizer) in self._unscaled:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        finite = []
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.mul_(1.0 / self._scale)
                        finite.append(p.grad.isfinite().all())
            # one read back for all of them (a sync point), not one per parameter
            self._unscaled[id(optimizer)] = bool(finite) and not bool(stack(finite).all())

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(), unless a gradient was inf or NaN (then the step is skipped, as torch does)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        if not self._unscaled[id(optimizer)]:
            return optimizer.step(*args, **kwargs)
        return None

    def update(self, new_scale=None) -> None:
        """Back off the scale after a step with inf or NaN gradients; grow it after growth_interval clean ones."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale)
        elif any(self._unscaled.values()):
            self._scale *= self.backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._scale *= self.growth_factor
                self._growth_tracker = 0
        self._unscaled.clear()

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self.growth_factor, "backoff_factor": self.backoff_factor,
                "growth_interval": self.growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict) -> None:
        self._scale = float(state["scale"])
        self.growth_factor, self.backoff_factor = state["growth_factor"], state["backoff_factor"]
        self.growth_interval, self._growth_tracker = state["growth_interval"], state["_growth_tracker"]


def _cuda_autocast(enabled: bool = True, dtype=_dtype.float16, cache_enabled=None) -> autocast:
    """torch.cuda.amp.autocast(...): autocast("cuda", ...)."""
    return autocast("cuda", dtype, enabled, cache_enabled)


# torch.cuda.amp's (deprecated, still common) spellings, in Layer 3's namespace for them
cuda.amp.GradScaler = GradScaler
cuda.amp.autocast = _cuda_autocast

__all__ = ["GradScaler", "autocast", "get_autocast_dtype", "is_autocast_enabled"]

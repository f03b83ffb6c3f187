"""Layer 5, `lapis.nn.utils`: torch.nn.utils' gradient clipping and parameter flattening, made of tensor ops (so on
a GPU they stay on it: the clip multiplies by a clamped factor instead of reading the norm back)."""

import math

from lapis.framework.autograd import no_grad
from lapis.framework.creation import tensor
from lapis.framework.ops import elementwise, views
from lapis.framework.tensor_base import TensorBase


def _grads(parameters) -> list:
    parameters = [parameters] if isinstance(parameters, TensorBase) else list(parameters)
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> TensorBase:
    """Scale the gradients in place so that their norm_type-norm, taken together, is at most max_norm; returns
    that total norm (before clipping), a 0-d tensor. foreach is accepted and ignored (one path here)."""
    grads = _grads(parameters)
    if not grads:
        return tensor(0.0)
    with no_grad():
        norms = views.stack([g.norm(norm_type) for g in grads])
        total = norms.max() if norm_type == math.inf else norms.norm(norm_type)
        if error_if_nonfinite and not bool(total.isfinite().item()):
            raise RuntimeError(f"The total norm of order {float(norm_type)} for gradients from `parameters` is "
                               "non-finite, so it cannot be clipped. To disable this error and scale the gradients "
                               "by the non-finite norm anyway, set `error_if_nonfinite=False`")
        factor = elementwise.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(factor.to(g.device))
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient to [-clip_value, clip_value], in place."""
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters) -> TensorBase:
    """The parameters, flattened and concatenated (a copy)."""
    return views.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: TensorBase, parameters) -> None:
    """Copy consecutive slices of vec into the parameters, in place."""
    at = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[at:at + n].reshape(p.shape))
            at += n


__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]

"""Layer 5, `lapis.optim`: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta and LBFGS with torch.optim's update rules, and
`lr_scheduler`.

Updates run as tensor ops without recording gradients, so on a GPU each is a few kernels; the
state (momentum buffers, moments) lives on the parameters' device.
"""

import math

from lapis.framework import backend
from lapis.framework import dtype as _dtype
from lapis.framework.autograd import no_grad
from lapis.framework.creation import zeros_like
from lapis.framework.optim import lr_scheduler
from lapis.framework.optim.lbfgs import LBFGS
from lapis.framework.optim.optimizer import Optimizer

# A GPU's fused kernels also step half parameters, in float32 with one rounding per store
# (`optimizers.STEPPED_TYPES`); Adam's steps float32 ones on the cpu too.
_HALVES = (_dtype.float16, _dtype.bfloat16)
_STEPPED = (_dtype.float32, *_HALVES)


def _followed_gradient(g: dict, p):
    """The gradient a step of SGD, RMSprop, Adagrad or Adadelta follows: negated when the group maximizes, plus the
    group's weight decay times the parameter (L2 regularization, as torch's)."""
    grad = p.grad if not g["maximize"] else -p.grad
    return grad + g["weight_decay"] * p if g["weight_decay"] else grad


def _fused_grad(p):
    """The gradient of a parameter a fused kernel steps: contiguous, as the kernel reads it."""
    return p.grad if p.grad.is_contiguous() else p.grad.contiguous()


def _written(*tensors) -> None:
    """A fused kernel wrote these tensors in place: each one's storage counts one change (once, where a tensor
    stands for two arrays), as an in-place op would count it for autograd's version check."""
    for t in {id(t): t for t in tensors}.values():
        t._storage.version += 1


class SGD(Optimizer):
    """torch.optim.SGD, with momentum, dampening, Nesterov and weight decay. Contiguous float32 and half parameters on a
    GPU step in fused kernels, a few parameters to a launch (`libs.optimizers.sgd`, torch's foreach path); the rest
    as tensor ops in torch's order, the kernel's order too."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        together: dict[tuple, list] = {}       # GPU parameters of a group, device and first step: fused
        for g, p, state in self._params():
            if backend.on_gpu(p._data) and p.dtype in _STEPPED and p.is_contiguous():
                first = g["momentum"] and "momentum_buffer" not in state
                if first:
                    state["momentum_buffer"] = zeros_like(p)       # the kernel starts it from the gradient
                together.setdefault((id(g), str(p.device), bool(first)), []).append((g, p, _fused_grad(p), state))
                continue
            self._composed_step(g, p, state)
        for (_, _, first), members in together.items():
            g = members[0][0]
            buffers = [state.get("momentum_buffer", p) for _, p, _, state in members]
            backend.sgd([(p._data, grad._data, buf._data)
                         for (_, p, grad, _), buf in zip(members, buffers, strict=True)],
                        lr=g["lr"], momentum=g["momentum"], dampening=g["dampening"],
                        weight_decay=g["weight_decay"], nesterov=g["nesterov"], maximize=g["maximize"], first=first)
            for (_, p, _, _), buf in zip(members, buffers, strict=True):
                _written(p, buf)
        return loss

    @staticmethod
    def _composed_step(g: dict, p, state: dict) -> None:
        """One parameter's SGD step as tensor ops (cpu, other dtypes, strided)."""
        d = _followed_gradient(g, p)
        if g["momentum"]:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = d.clone()
            else:
                buf.mul_(g["momentum"]).add_(d * (1 - g["dampening"]))
            d = d + g["momentum"] * buf if g["nesterov"] else buf
        p.sub_(g["lr"] * d)


class Adam(Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, decoupled: bool = False):
        if amsgrad:
            raise NotImplementedError("amsgrad is not supported")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.decoupled = decoupled

    @no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        # Fused kernels over lists of parameters (torch's fused=True): those of one group, device and step
        # count go together, a few to a launch. m and v move toward the gradient, then
        # p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
        together: dict[tuple, list] = {}
        for g, p, state in self._params():
            if not state:
                state["step"] = 0
                state["exp_avg"] = zeros_like(p)
                state["exp_avg_sq"] = zeros_like(p)
            state["step"] += 1
            fused = p.dtype is _dtype.float32 or p.dtype in _HALVES and backend.on_gpu(p._data)
            if not p.is_contiguous() or not fused:
                self._composed_step(g, p, state)            # other dtypes: the same step as tensor ops
                continue
            together.setdefault((id(g), str(p.device), state["step"]), []).append((g, p, _fused_grad(p), state))
        for (_, _, step), members in together.items():
            g = members[0][0]
            beta1, beta2 = g["betas"]
            backend.adam([(p._data, grad._data, state["exp_avg"]._data, state["exp_avg_sq"]._data)
                          for _, p, grad, state in members], lr=g["lr"], beta1=beta1, beta2=beta2, eps=g["eps"],
                         step=step, weight_decay=g["weight_decay"], decoupled=self.decoupled)
            for _, p, _, state in members:
                _written(p, state["exp_avg"], state["exp_avg_sq"])
        return loss


    def _composed_step(self, g: dict, p, state: dict) -> None:
        """One parameter's Adam step as tensor ops (torch's foreach path), for what the fused kernel does not take
        (float64, half types on the cpu, strided parameters): the fused kernel's arithmetic, in the parameter's
        dtype."""
        beta1, beta2 = g["betas"]
        t, grad, m, v = state["step"], p.grad, state["exp_avg"], state["exp_avg_sq"]
        if self.decoupled:
            p.mul_(1 - g["lr"] * g["weight_decay"])
        elif g["weight_decay"]:
            grad = grad + g["weight_decay"] * p
        m.add_((grad - m) * (1 - beta1))
        v.mul_(beta2).add_(grad * grad * (1 - beta2))
        p.sub_(m / (v.sqrt() / math.sqrt(1 - beta2 ** t) + g["eps"]) * (g["lr"] / (1 - beta1 ** t)))


class RMSprop(Optimizer):
    """torch.optim.RMSprop: a running mean of squared gradients divides each step (centered: of their variance),
    with optional momentum. Contiguous float32 and half parameters on a GPU (not centered) step in fused kernels, a
    few parameters to a launch (`libs.optimizers.rmsprop`, torch's foreach path); the rest as tensor ops in torch's
    order, the kernel's order too."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum: float = 0.0, centered: bool = False, maximize: bool = False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        together: dict[tuple, list] = {}       # GPU parameters of a group and device: fused kernels
        for g, p, state in self._params():
            if not state:
                state["step"] = 0
                state["square_avg"] = zeros_like(p)
                if g["momentum"]:
                    state["momentum_buffer"] = zeros_like(p)
                if g["centered"]:
                    state["grad_avg"] = zeros_like(p)
            state["step"] += 1
            if backend.on_gpu(p._data) and p.dtype in _STEPPED and p.is_contiguous() and not g["centered"]:
                together.setdefault((id(g), str(p.device)), []).append((g, p, _fused_grad(p), state))
                continue
            self._composed_step(g, p, state)
        for members in together.values():
            g = members[0][0]
            buffers = [state.get("momentum_buffer", state["square_avg"]) for _, _, _, state in members]
            backend.rmsprop([(p._data, grad._data, state["square_avg"]._data, buf._data)
                             for (_, p, grad, state), buf in zip(members, buffers, strict=True)],
                            lr=g["lr"], alpha=g["alpha"], eps=g["eps"], weight_decay=g["weight_decay"],
                            momentum=g["momentum"], maximize=g["maximize"])
            for (_, p, _, state), buf in zip(members, buffers, strict=True):
                _written(p, state["square_avg"], buf)
        return loss

    @staticmethod
    def _composed_step(g: dict, p, state: dict) -> None:
        """One parameter's RMSprop step as tensor ops (cpu, other dtypes, strided or centered)."""
        grad = _followed_gradient(g, p)
        square_avg, alpha = state["square_avg"], g["alpha"]
        square_avg.mul_(alpha).add_(grad * grad * (1 - alpha))
        if g["centered"]:
            grad_avg = state["grad_avg"]
            grad_avg.mul_(alpha).add_(grad * (1 - alpha))
            avg = (square_avg - grad_avg * grad_avg).sqrt() + g["eps"]
        else:
            avg = square_avg.sqrt() + g["eps"]
        if g["momentum"]:
            buf = state["momentum_buffer"]
            buf.mul_(g["momentum"]).add_(grad / avg)
            p.sub_(g["lr"] * buf)
        else:
            p.sub_(g["lr"] * (grad / avg))


class Adagrad(Optimizer):
    """torch.optim.Adagrad: each step divided by the root of the sum of all squared gradients so far."""

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, maximize: bool = False):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
                                      initial_accumulator_value=initial_accumulator_value, maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for g, p, state in self._params():
            grad = _followed_gradient(g, p)
            if not state:
                state["step"] = 0
                state["sum"] = zeros_like(p) + g["initial_accumulator_value"]
            state["step"] += 1
            clr = g["lr"] / (1 + (state["step"] - 1) * g["lr_decay"])
            state["sum"].add_(grad * grad)
            p.sub_(clr * (grad / (state["sum"].sqrt() + g["eps"])))
        return loss


class Adadelta(Optimizer):
    """torch.optim.Adadelta (pytorch/examples' mnist): running means of squared gradients and of squared updates;
    each update is the gradient times the ratio of their roots, so lr=1.0 is the usual rate."""

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0.0,
                 maximize: bool = False):
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for g, p, state in self._params():
            grad = _followed_gradient(g, p)
            if not state:
                state["step"] = 0
                state["square_avg"] = zeros_like(p)
                state["acc_delta"] = zeros_like(p)
            state["step"] += 1
            square_avg, acc_delta, rho = state["square_avg"], state["acc_delta"], g["rho"]
            square_avg.mul_(rho).add_(grad * grad * (1 - rho))
            delta = (acc_delta + g["eps"]).sqrt() / (square_avg + g["eps"]).sqrt() * grad
            acc_delta.mul_(rho).add_(delta * delta * (1 - rho))
            p.sub_(g["lr"] * delta)
        return loss


class AdamW(Adam):
    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, decoupled=True)


__all__ = ["SGD", "Adam", "AdamW", "Adadelta", "Adagrad", "LBFGS", "Optimizer", "RMSprop", "lr_scheduler"]

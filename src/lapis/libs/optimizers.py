"""Layer 4: fused optimizer steps (torch's fused=True kernels): one launch steps several parameters.

    optimizers.adam(api, [(p, g, m, v), ...], lr=..., beta1=..., beta2=..., eps=..., step=..., weight_decay=...,
                    decoupled=...)                       # Adam, or (decoupled) AdamW
    optimizers.rmsprop(api, [(p, g, square_avg, buf), ...], lr=..., alpha=..., eps=..., weight_decay=...,
                       momentum=..., maximize=...)       # RMSprop, not centered
    optimizers.sgd(api, [(p, g, buf), ...], lr=..., momentum=..., dampening=..., weight_decay=...,
                   nesterov=..., maximize=..., first=...)   # SGD, with momentum

Every array is a C-contiguous float32, float16 or bfloat16 device array (a half one stepped in float32), those of
a parameter of one size and type; each is updated in place. A launch takes up to SLOTS parameters of
alike sizes, as torch's multi_tensor_apply packs lists of tensors into its kernels' arguments: a training step's
many small parameters (biases, norms) cost a few launches, not a dozen elementwise ops each.
"""

import math

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, float32
from lapis.libs.kernels import MAX_BLOCKS, KernelArgumentError, _dispatcher, launch_shape

SLOTS = 4          # parameters one launch steps
# A launch's grid is its largest parameter's, and each thread steps its elements of every parameter in turn, so a
# smaller parameter's threads past its end only skip it: on a real GPU that costs next to nothing, but a
# simulated lane costs its work whether it does anything or not. So a parameter needing under 1/SPREAD of the
# blocks of the launch's largest starts a launch of its own.
SPREAD = 4
# The parameter types the kernels step: a half parameter, its gradient and its state are loaded as float32, stepped
# in float32 and rounded once as they are stored (torch's fused kernels' "opmath").
STEPPED_TYPES = ("float32", "float16", "bfloat16")


def _launches(what: str, params: list[tuple], arrays_each: int) -> list[list[list]]:
    """The launches of a fused step over `params` (tuples of `arrays_each` arrays of one of STEPPED_TYPES): up to
    SLOTS parameters of one type and alike sizes each, the largest first; each parameter as its flat arrays. Empty
    parameters take no slot."""
    for arrays in params:
        fit = all(isinstance(a, DeviceNDArray) and a.dtype == arrays[0].dtype and a.is_c_contiguous() for a in arrays)
        fit = fit and arrays[0].dtype.name in STEPPED_TYPES and len({a.size for a in arrays}) == 1
        if len(arrays) != arrays_each or not fit:
            raise KernelArgumentError(f"{what} takes {arrays_each} C-contiguous device arrays of one size and one of "
                                      f"the types {', '.join(STEPPED_TYPES)} per parameter")
    # by size, so that a launch's parameters need alike numbers of blocks (its grid is its largest's)
    live = sorted(([a.ravel() for a in arrays] for arrays in params if arrays[0].size), key=lambda a: -a[0].size)
    launches: list[list] = []

    def blocks(size: int) -> int:
        return launch_shape(size, MAX_BLOCKS)[0]
    for arrays in live:
        last = launches[-1] if launches else None
        if (last and len(last) < SLOTS and SPREAD * blocks(arrays[0].size) >= blocks(last[0][0].size)
                and last[0][0].dtype == arrays[0].dtype):               # one type to a launch: one compiled kernel
            last.append(arrays)
        else:
            launches.append([arrays])
    return launches


def _launch(api, kernel, launches: list[list], scalars: tuple) -> None:
    """Each launch's kernel over its parameters' slots (an unused slot repeats the last parameter's arrays with
    n = 0), then the scalars."""
    for chunk in launches:
        args = []
        for slot in range(SLOTS):
            arrays = chunk[min(slot, len(chunk) - 1)]
            args += [np.int64(arrays[0].size if slot < len(chunk) else 0), *arrays]
        _dispatcher(api, (kernel.__name__,), lambda: kernel)[launch_shape(chunk[0][0].size, MAX_BLOCKS)](
            *args, *scalars)


# -- Adam ----------------------------------------------------------------------------------------------------
@cuda.jit(device=True)
def adam_update(n, p, g, m, v, lr, beta1, beta2, eps, bias1, bias2_sqrt, weight_decay, decoupled):
    # one parameter's Adam step in torch's order of operations: m and v move toward the gradient, then
    # p -= lr / bias1 * m / (sqrt(v) / sqrt(bias2) + eps)
    i = cuda.grid(1)
    while i < n:
        grad = float32(g[i])
        w = float32(p[i])
        if decoupled:
            w = w * (float32(1.0) - lr * weight_decay)
        else:
            grad = grad + weight_decay * w
        mi0 = float32(m[i])
        mi = mi0 + (grad - mi0) * (float32(1.0) - beta1)
        vi = float32(v[i]) * beta2 + grad * grad * (float32(1.0) - beta2)
        m[i] = mi
        v[i] = vi
        p[i] = w - mi / (math.sqrt(vi) / bias2_sqrt + eps) * (lr / bias1)
        i += cuda.gridsize(1)


def adam_kernel(n0, p0, g0, m0, v0, n1, p1, g1, m1, v1, n2, p2, g2, m2, v2, n3, p3, g3, m3, v3,
                lr, beta1, beta2, eps, bias1, bias2_sqrt, weight_decay, decoupled):
    # the SLOTS parameters in the arguments (a slot left empty has n = 0); every thread steps its elements of each
    # in turn, so all of a launch's threads run the same instructions: a slot per block would split each
    # warp-instruction's work into one group per slot, each over every lane in flight
    adam_update(n0, p0, g0, m0, v0, lr, beta1, beta2, eps, bias1, bias2_sqrt, weight_decay, decoupled)
    adam_update(n1, p1, g1, m1, v1, lr, beta1, beta2, eps, bias1, bias2_sqrt, weight_decay, decoupled)
    adam_update(n2, p2, g2, m2, v2, lr, beta1, beta2, eps, bias1, bias2_sqrt, weight_decay, decoupled)
    adam_update(n3, p3, g3, m3, v3, lr, beta1, beta2, eps, bias1, bias2_sqrt, weight_decay, decoupled)


def adam(api, params: list[tuple], *, lr: float, beta1: float, beta2: float, eps: float, step: int,
         weight_decay: float = 0.0, decoupled: bool = False) -> None:
    """One Adam (or, decoupled, AdamW) step, in place, on each (p, g, m, v) of `params`: parameter, gradient and
    moments."""
    launches = _launches("adam", params, 4)
    f = np.float32
    scalars = (f(lr), f(beta1), f(beta2), f(eps), f(1 - beta1 ** step), f(math.sqrt(1 - beta2 ** step)),
               f(weight_decay), bool(decoupled))
    with trace.span(4, "adam", parameters=len(params), elements=sum(a[0].size for a in params), step=step):
        _launch(api, adam_kernel, launches, scalars)


# -- RMSprop and SGD -----------------------------------------------------------------------------------------
@cuda.jit(device=True)
def followed_gradient(grad, w, weight_decay, maximize):
    # the gradient an RMSprop or SGD step follows, as lapis.optim's `_followed_gradient` (torch's order): negated
    # to maximize, then plus weight_decay times the weight
    if maximize:
        grad = -grad
    if weight_decay != float32(0.0):
        grad = grad + weight_decay * w
    return grad


@cuda.jit(device=True)
def rmsprop_update(n, p, g, sq, buf, lr, alpha, eps, weight_decay, momentum, maximize):
    # one parameter's RMSprop step in the order of lapis.optim.RMSprop's tensor ops (torch's): the followed
    # gradient, the running mean of its square, then the step divided by that mean's root (through the momentum
    # buffer when there is momentum; buf is not read without)
    i = cuda.grid(1)
    while i < n:
        w = float32(p[i])
        grad = followed_gradient(float32(g[i]), w, weight_decay, maximize)
        si = float32(sq[i]) * alpha + grad * grad * (float32(1.0) - alpha)
        sq[i] = si
        avg = math.sqrt(si) + eps
        if momentum != float32(0.0):
            bi = float32(buf[i]) * momentum + grad / avg
            buf[i] = bi
            p[i] = w - lr * bi
        else:
            p[i] = w - lr * (grad / avg)
        i += cuda.gridsize(1)


def rmsprop_kernel(n0, p0, g0, s0, b0, n1, p1, g1, s1, b1, n2, p2, g2, s2, b2, n3, p3, g3, s3, b3,
                   lr, alpha, eps, weight_decay, momentum, maximize):
    # the SLOTS parameters in the arguments, as `adam_kernel` takes them
    rmsprop_update(n0, p0, g0, s0, b0, lr, alpha, eps, weight_decay, momentum, maximize)
    rmsprop_update(n1, p1, g1, s1, b1, lr, alpha, eps, weight_decay, momentum, maximize)
    rmsprop_update(n2, p2, g2, s2, b2, lr, alpha, eps, weight_decay, momentum, maximize)
    rmsprop_update(n3, p3, g3, s3, b3, lr, alpha, eps, weight_decay, momentum, maximize)


def rmsprop(api, params: list[tuple], *, lr: float, alpha: float, eps: float, weight_decay: float = 0.0,
            momentum: float = 0.0, maximize: bool = False) -> None:
    """One RMSprop step (not centered), in place, on each (p, g, square_avg, buf) of `params`: parameter, gradient,
    running mean of squared gradients and momentum buffer (any array of the parameter's size without momentum)."""
    launches = _launches("rmsprop", params, 4)
    f = np.float32
    scalars = (f(lr), f(alpha), f(eps), f(weight_decay), f(momentum), bool(maximize))
    with trace.span(4, "rmsprop", parameters=len(params), elements=sum(a[0].size for a in params)):
        _launch(api, rmsprop_kernel, launches, scalars)


@cuda.jit(device=True)
def sgd_update(n, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, maximize, first):
    # one parameter's SGD step in the order of lapis.optim.SGD's tensor ops (torch's): the followed gradient, the
    # momentum buffer (the gradient itself at the first step), then p -= lr * d; buf is not read without momentum
    i = cuda.grid(1)
    while i < n:
        w = float32(p[i])
        d = followed_gradient(float32(g[i]), w, weight_decay, maximize)
        if momentum != float32(0.0):
            if first:
                bi = d
            else:
                bi = float32(buf[i]) * momentum + d * (float32(1.0) - dampening)
            buf[i] = bi
            if nesterov:
                d = d + momentum * bi
            else:
                d = bi
        p[i] = w - lr * d
        i += cuda.gridsize(1)


def sgd_kernel(n0, p0, g0, b0, n1, p1, g1, b1, n2, p2, g2, b2, n3, p3, g3, b3,
               lr, momentum, dampening, weight_decay, nesterov, maximize, first):
    # the SLOTS parameters in the arguments, as `adam_kernel` takes them
    sgd_update(n0, p0, g0, b0, lr, momentum, dampening, weight_decay, nesterov, maximize, first)
    sgd_update(n1, p1, g1, b1, lr, momentum, dampening, weight_decay, nesterov, maximize, first)
    sgd_update(n2, p2, g2, b2, lr, momentum, dampening, weight_decay, nesterov, maximize, first)
    sgd_update(n3, p3, g3, b3, lr, momentum, dampening, weight_decay, nesterov, maximize, first)


def sgd(api, params: list[tuple], *, lr: float, momentum: float = 0.0, dampening: float = 0.0,
        weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False, first: bool = False) -> None:
    """One SGD step, in place, on each (p, g, buf) of `params`: parameter, gradient and momentum buffer (any array
    of the parameter's size without momentum); `first`: the buffers start from this step's gradients (torch clones
    the first)."""
    launches = _launches("sgd", params, 3)
    f = np.float32
    scalars = (f(lr), f(momentum), f(dampening), f(weight_decay), bool(nesterov), bool(maximize), bool(first))
    with trace.span(4, "sgd", parameters=len(params), elements=sum(a[0].size for a in params)):
        _launch(api, sgd_kernel, launches, scalars)

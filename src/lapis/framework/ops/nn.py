"""Layer 5: the neural-network primitives that run as fused kernels of `lapis.libs.dnn` on a GPU (cuDNN's place):
softmax and log-softmax, gelu and silu, 2-D convolution and pooling, batch and layer norm, and attention, each
forward beside its backward. On `cpu` the backend computes the same with numpy. Their backward is a kernel too,
not differentiable ops, so they are once differentiable: under create_graph their gradients carry a node that
raises if differentiated again (torch's @once_differentiable), rather than a second derivative silently zero."""

from lapis.framework import amp, backend
from lapis.framework import dtype as _dtype
from lapis.framework.autograd import Function
from lapis.framework.ops.common import check_devices, new
from lapis.framework.tensor_base import TensorBase, wrap_dim


class Activation(Function):
    """gelu (exact) or silu of a float32 tensor as one fused kernel each way (cuDNN's activation kernels)."""
    once_differentiable = True

    @staticmethod
    def forward(ctx, x: TensorBase, mode: str):
        ctx.node_name = mode.capitalize() + "Backward0"
        x = x._contiguous()
        out = new(x.shape, x.dtype, x.device)
        backend.activation(mode, x._data, out._data)
        ctx.mode = mode
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        dx = new(x.shape, x.dtype, x.device)
        backend.activation_backward(ctx.mode, x._data, g._contiguous()._data, dx._data)
        return dx, None


class Softmax(Function):
    """(log-)softmax over the last dimension as one fused kernel each way (cuDNN's, on a GPU)."""
    once_differentiable = True

    @staticmethod
    def forward(ctx, x: TensorBase, log: bool):
        ctx.node_name = "LogSoftmaxBackward0" if log else "SoftmaxBackward0"
        x = x._contiguous()
        out = new(x.shape, x.dtype, x.device)
        backend.softmax(x._data, out._data, log)
        ctx.log = log
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        g = g._contiguous()
        dx = new(y.shape, y.dtype, y.device)
        backend.softmax_backward(y._data, g._data, dx._data, ctx.log)
        return dx, None


class NllLoss(Function):
    """The negative log-likelihood of (N, C) float32 log-probabilities at (N,) int64 targets, one kernel
    each way (cross entropy is log-softmax then this, the two kernels PyTorch launches)."""
    once_differentiable = True

    @staticmethod
    def forward(ctx, logp: TensorBase, target: TensorBase, ignore_index: int, reduction: str):
        ctx.node_name = "NllLossBackward0"
        check_devices(logp, target)
        logp, target = logp._contiguous(), target._contiguous()
        out = new((logp.shape[0],) if reduction == "none" else (), logp.dtype, logp.device)
        kept_rows = new((1,), logp.dtype, logp.device)
        backend.nll_loss(logp._data, target._data, ignore_index, reduction, out._data, kept_rows._data)
        ctx.ignore_index, ctx.reduction, ctx.shape = ignore_index, reduction, logp.shape
        ctx.save_for_backward(target, kept_rows)
        return out

    @staticmethod
    def backward(ctx, g):
        target, kept_rows = ctx.saved_tensors
        dlogp = new(ctx.shape, g.dtype, g.device)
        backend.nll_loss_backward(target._data, ctx.ignore_index, ctx.reduction, g._contiguous()._data,
                                  kept_rows._data, dlogp._data)
        return dlogp, None, None, None


# -- convolution and pooling ------------------------------------------------------------------------
def _pair(v) -> tuple:
    return (v, v) if isinstance(v, int) else tuple(v)


class Conv2d(Function):
    """NCHW input, (K, C/groups, R, S) filters, optional bias (K,): cuDNN's implicit GEMM on a GPU."""
    once_differentiable = True
    node_name = "ConvolutionBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, w: TensorBase, bias, stride, padding, dilation, groups: int):
        check_devices(x, w, bias)
        if x.ndim != 4 or w.ndim != 4:
            raise RuntimeError(f"Expected 4D (batched) input to conv2d, but got input of size: {list(x.shape)}")
        if x.shape[1] != w.shape[1] * groups:
            raise RuntimeError(f"Given groups={groups}, weight of size {list(w.shape)}, expected input"
                               f"{list(x.shape)} to have {w.shape[1] * groups} channels, but got {x.shape[1]} "
                               "channels instead")
        geometry = _convolution_geometry(padding, stride, dilation, groups)
        (ph, pw), (sh, sw), (dh, dw) = geometry[:3]
        n, _, h, wd = x.shape
        k, _, r, s = w.shape
        p = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
        q = (wd + 2 * pw - dw * (s - 1) - 1) // sw + 1
        if p < 1 or q < 1:
            raise RuntimeError("Calculated output size is too small: the kernel is larger than the padded input")
        x, w = x._contiguous(), w._contiguous()
        out = new((n, k, p, q), x.dtype, x.device)
        backend.conv2d(x._data, w._data, out._data, *geometry)
        ctx.geometry = geometry
        ctx.save_for_backward(x, w)
        ctx.has_bias = bias is not None
        return out + bias.reshape(1, k, 1, 1) if bias is not None else out

    @staticmethod
    def backward(ctx, g):
        return *_convolution_grads(ctx, g, transposed=False), None, None, None, None


def _convolution_geometry(padding, stride, dilation, groups: int) -> tuple:
    """(padding, stride, dilation) pairs and groups, checked as torch checks them (a zero stride divided)."""
    padding, stride, dilation = _pair(padding), _pair(stride), _pair(dilation)
    if min(stride) < 1:
        raise RuntimeError("non-positive stride is not supported")
    if min(padding) < 0:
        raise RuntimeError("negative padding is not supported")
    if min(dilation) < 1:
        raise RuntimeError("dilation should be greater than zero")
    if groups < 1:
        raise RuntimeError("non-positive groups is not supported")
    return padding, stride, dilation, groups


def _convolution_grads(ctx, g: TensorBase, transposed: bool) -> tuple:
    """(dx, dw, db) of a convolution, or of its transpose (whose input gradient is the convolution itself and
    whose filter gradient swaps the image and the output gradient)."""
    x, w = ctx.saved_tensors
    g = g._contiguous()
    dx = dw = None
    if ctx.needs_input_grad[0]:
        dx = new(x.shape, x.dtype, x.device)
        if transposed:
            backend.conv2d(g._data, w._data, dx._data, *ctx.geometry)
        else:
            backend.conv2d_backward_data(w._data, g._data, dx._data, *ctx.geometry)
    if ctx.needs_input_grad[1]:
        dw = new(w.shape, w.dtype, w.device)
        image, grad = (g, x) if transposed else (x, g)
        backend.conv2d_backward_filter(image._data, grad._data, dw._data, *ctx.geometry)
    db = g.sum((0, 2, 3)) if ctx.has_bias else None
    return dx, dw, db


class ConvTranspose2d(Function):
    """The transpose of Conv2d: NCHW input, (C, K/groups, R, S) filters, optional bias (K,). Its forward is a
    convolution's data gradient and its backward a convolution and its filter gradient, as cuDNN runs it."""
    once_differentiable = True
    node_name = "ConvolutionBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, w: TensorBase, bias, stride, padding, output_padding, dilation, groups: int):
        check_devices(x, w, bias)
        if x.ndim != 4 or w.ndim != 4:
            raise RuntimeError(f"Expected 4D (batched) input to conv_transpose2d, but got input of size: "
                               f"{list(x.shape)}")
        if x.shape[1] != w.shape[0]:
            raise RuntimeError(f"Given transposed=1, weight of size {list(w.shape)}, expected input {list(x.shape)} "
                               f"to have {w.shape[0]} channels, but got {x.shape[1]} channels instead")
        geometry = _convolution_geometry(padding, stride, dilation, groups)
        (ph, pw), (sh, sw), (dh, dw) = geometry[:3]
        oh, ow = _pair(output_padding)
        if not (oh < max(sh, dh) and ow < max(sw, dw)):
            raise RuntimeError("output padding must be smaller than either stride or dilation")
        n, _, h, wd = x.shape
        _, kg, r, s = w.shape
        # the convolution this transposes maps (N, K, P, Q) to x's (N, C, H, W)
        p = (h - 1) * sh - 2 * ph + dh * (r - 1) + oh + 1
        q = (wd - 1) * sw - 2 * pw + dw * (s - 1) + ow + 1
        if p < 1 or q < 1:
            raise RuntimeError(f"Given input size per channel: ({h} x {wd}). Calculated output size per channel: "
                               f"({p} x {q}). Output size is too small")
        x, w = x._contiguous(), w._contiguous()
        out = new((n, kg * groups, p, q), x.dtype, x.device)
        backend.conv2d_backward_data(w._data, x._data, out._data, *geometry)
        ctx.geometry = geometry
        ctx.save_for_backward(x, w)
        ctx.has_bias = bias is not None
        return out + bias.reshape(1, kg * groups, 1, 1) if bias is not None else out

    @staticmethod
    def backward(ctx, g):
        return *_convolution_grads(ctx, g, transposed=True), None, None, None, None, None


class Pool2d(Function):
    once_differentiable = True
    @staticmethod
    def forward(ctx, x: TensorBase, mode: str, window, stride, padding):
        ctx.node_name = "MaxPool2DWithIndicesBackward0" if mode == "max" else "AvgPool2DBackward0"
        window, stride, padding = _pair(window), _pair(stride if stride is not None else window), _pair(padding)
        if min(stride) == 0:                              # torch's checks and words (a zero divided here)
            raise RuntimeError("stride should not be zero")
        if min(window) < 1 or min(stride) < 1:
            raise RuntimeError(f"pooling takes a positive kernel_size and stride, not {window} and {stride}")
        if not (0 <= padding[0] <= window[0] // 2 and 0 <= padding[1] <= window[1] // 2):
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={padding}, "
                               f"kernel_size={window} and dilation=1")
        n, c, h, wd = x.shape
        p = (h + 2 * padding[0] - window[0]) // stride[0] + 1
        q = (wd + 2 * padding[1] - window[1]) // stride[1] + 1
        x = x._contiguous()
        out = new((n, c, p, q), x.dtype, x.device)
        backend.pool2d(mode, x._data, out._data, window, stride, padding)
        ctx.args = mode, window, stride, padding
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        dx = new(x.shape, x.dtype, x.device)
        mode, window, stride, padding = ctx.args
        backend.pool2d_backward(mode, x._data, y._data, g._contiguous()._data, dx._data, window, stride, padding)
        return dx, None, None, None, None


class BatchNorm(Function):
    """Training batch norm of (N, C, ...) with batch statistics, forward and backward each one
    kernel on a GPU (cudnnBatchNormalizationForwardTraining / Backward); the running statistics
    move in place."""
    once_differentiable = True
    node_name = "NativeBatchNormBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, weight: TensorBase, bias: TensorBase, running_mean: TensorBase,
                running_var: TensorBase, momentum: float, eps: float):
        check_devices(x, weight, bias, running_mean, running_var)
        n, c = x.shape[0], x.shape[1]
        if x.numel() // c <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {list(x.shape)}")
        x4 = x._contiguous().reshape(n, c, -1, 1)               # (N, C, L, 1): any trailing dims as H
        out = new(x4.shape, x.dtype, x.device)
        mean, rstd = new((c,), x.dtype, x.device), new((c,), x.dtype, x.device)
        backend.batch_norm(x4._data, weight._data, bias._data, running_mean._data, running_var._data, out._data,
                            mean._data, rstd._data, momentum, eps)
        running_mean._storage.version += 1
        running_var._storage.version += 1
        ctx.save_for_backward(x4, weight, mean, rstd)
        return out.reshape(x.shape)

    @staticmethod
    def backward(ctx, g):
        x4, weight, mean, rstd = ctx.saved_tensors
        dx = new(x4.shape, x4.dtype, x4.device)
        dweight, dbias = (new(weight.shape, weight.dtype, weight.device) for _ in range(2))
        backend.batch_norm_backward(x4._data, g._contiguous().reshape(x4.shape)._data, weight._data, mean._data,
                                     rstd._data, dx._data, dweight._data, dbias._data)
        return dx.reshape(g.shape), dweight, dbias, None, None, None, None


class LayerNorm(Function):
    """Layer norm over the last dimension, saving each row's mean and 1/std: one kernel forward and
    two backward on a GPU (rows of dx; then dweight and dbias per column)."""
    once_differentiable = True
    node_name = "NativeLayerNormBackward0"

    @staticmethod
    def forward(ctx, x: TensorBase, weight: TensorBase, bias: TensorBase, eps: float):
        check_devices(x, weight, bias)
        cols = weight.numel()
        x2 = x._contiguous().reshape(-1, cols)                   # x: (..., normalized) -> (rows, cols)
        out = new(x2.shape, x.dtype, x.device)
        mean, rstd = new((x2.shape[0],), x.dtype, x.device), new((x2.shape[0],), x.dtype, x.device)
        w, b = weight._contiguous().reshape(cols), bias._contiguous().reshape(cols)
        backend.layer_norm(x2._data, w._data, b._data, out._data, mean._data, rstd._data, eps)
        ctx.save_for_backward(x2, w, mean, rstd)
        ctx.shapes = x.shape, weight.shape
        return out.reshape(x.shape)

    @staticmethod
    def backward(ctx, g):
        x2, w, mean, rstd = ctx.saved_tensors
        x_shape, w_shape = ctx.shapes
        dx = new(x2.shape, x2.dtype, x2.device)
        dw, db = (new(w.shape, w.dtype, w.device) for _ in range(2))
        backend.layer_norm_backward(x2._data, g._contiguous().reshape(x2.shape)._data, w._data, mean._data,
                                     rstd._data, dx._data, dw._data, db._data)
        return dx.reshape(x_shape), dw.reshape(w_shape), db.reshape(w_shape), None


class Attention(Function):
    """softmax(q k^T * scale) v over the last two dimensions, with an optional causal mask: FlashAttention's
    forward and backward (cuDNN's fused attention, `libs.dnn`) on a GPU, the scores never stored.

    4-D (batch, heads, tokens, head dim) operands are read as they lie, strided, when their head dimension
    is contiguous (a transformer's heads, views of one packed projection); on a GPU the output and the
    gradients are (batch, heads, tokens, head dim) views of (batch, tokens, heads, head dim) memory, as
    PyTorch's flash attention returns them, so merging the heads back is a view too. Other operands are
    made contiguous."""
    once_differentiable = True
    node_name = "ScaledDotProductFlashAttentionBackward0"

    @staticmethod
    def forward(ctx, q: TensorBase, k: TensorBase, v: TensorBase, scale: float, causal: bool):
        # q: (..., Tq, D), k and v: (..., Tk, D) -> (..., Tq, D)
        check_devices(q, k, v)
        shapes = q.shape, k.shape
        q, k, v = (_attention_operand(t) for t in (q, k, v))
        o = _attention_result(q)
        lse = new(q.shape[:-1], q.dtype, q.device)
        backend.attention(q._data, k._data, v._data, o._data, lse._data, scale, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = scale, causal, shapes
        return o.reshape(shapes[0])

    @staticmethod
    def backward(ctx, g):
        q, k, v, o, lse = ctx.saved_tensors
        scale, causal, (q_shape, k_shape) = ctx.args
        dq, dk, dv = _attention_gradients(q, k, v)
        backend.attention_backward(q._data, k._data, v._data, o._data, _attention_operand(g.reshape(o.shape))._data,
                                    lse._data, dq._data, dk._data, dv._data, scale, causal)
        return dq.reshape(q_shape), dk.reshape(k_shape), dv.reshape(k_shape), None, None


def _attention_operand(t: TensorBase) -> TensorBase:
    """t as attention reads it: a 4-D tensor with a contiguous head dimension as it lies; any other contiguous,
    as (batch x heads, tokens, head dim)."""
    if t.ndim == 4 and (t.stride(-1) == 1 or t.shape[-1] == 1) and min(t.stride()) >= 0:
        return t
    return t._contiguous().reshape(-1, *t.shape[-2:])


def _attention_gradients(q: TensorBase, k: TensorBase, v: TensorBase) -> tuple:
    """dq, dk, dv. Where q, k and v are the heads of one packed projection (batch, tokens, 3 x heads x head
    dim), split in three and each viewed (batch, heads, tokens, head dim), views of one new memory laid out
    the same, so joining them back (the projection's split) is a view too; else each as `_attention_result`."""
    if (q.ndim == 4 and q.device.type != "cpu" and k._shape == v._shape == q._shape
            and k._storage is q._storage is v._storage):
        b, h, t, d = q._shape
        packed = (t * 3 * h * d, d, 3 * h * d, 1)
        if (q._strides == k._strides == v._strides == packed and q._offset == 0 and k._offset == h * d
                and v._offset == 2 * h * d and q._storage.array.size == 3 * q.numel()):
            memory = new((3 * q.numel(),), q.dtype, q.device)
            return tuple(memory._view(x._shape, packed, x._offset) for x in (q, k, v))
    return tuple(_attention_result(x) for x in (q, k, v))


def _attention_result(like: TensorBase) -> TensorBase:
    """A result shaped like `like`: on a GPU, 4-D (batch, heads, tokens, head dim) as a view of (batch, tokens,
    heads, head dim) memory, as PyTorch's flash attention lays it out; otherwise contiguous, as PyTorch's cpu
    attention returns it."""
    if like.ndim != 4 or like.device.type == "cpu":
        return new(like.shape, like.dtype, like.device)
    b, h, t, d = like.shape
    return new((b, t, h, d), like.dtype, like.device)._view((b, h, t, d), (t * h * d, d, h * d, 1), 0)


def _fused_softmax(x, dim) -> bool:
    """The last dimension of a float32 tensor: one fused kernel each way (once differentiable: a second
    derivative through it raises)."""
    return wrap_dim(dim, x.ndim) == x.ndim - 1 and x.dtype is _dtype.float32 and x.ndim > 0 and x.numel() > 0


def softmax(x, dim, dtype=None):
    x = amp.upper(x) if dtype is None else x.to(dtype)
    if _fused_softmax(x, dim):
        return Softmax.apply(x, False)
    e = (x - x.max(dim, keepdim=True).values.detach()).exp()
    return e / e.sum(dim, keepdim=True)


def log_softmax(x, dim, dtype=None):
    x = amp.upper(x) if dtype is None else x.to(dtype)
    if _fused_softmax(x, dim):
        return Softmax.apply(x, True)
    return x - x.logsumexp(dim, keepdim=True)

"""Layer 5: torch.nn's Module, Parameter, containers and layers.

A Module keeps its parameters, buffers and child modules in ordered dicts as attributes are set,
as torch's does, so `parameters()`, `state_dict()` and `to()` walk the tree in definition order.
"""

import math
from collections import OrderedDict

from lapis.framework import dtype as _dtype
from lapis.framework.autograd import no_grad
from lapis.framework.creation import empty, ones, zeros
from lapis.framework.device import device
from lapis.framework.nn import functional as F
from lapis.framework.nn import init
from lapis.framework.tensor import Tensor


class Parameter(Tensor):
    """A tensor that is a module's parameter: it requires grad, and assigning it to a Module registers it."""

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        data = empty(0) if data is None else data
        p = Tensor.__new__(cls)
        Tensor.__init__(p, data._storage, data._shape, data._strides, data._offset, data.device)
        p.requires_grad = requires_grad
        return p

    def __init__(self, data=None, requires_grad: bool = True):
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())     # buffers left out of the state dict
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign before Module.__init__() call")
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        for table in ("_parameters", "_buffers", "_modules"):
            d = self.__dict__.get(table)
            if d is not None and name in d:
                return d[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """State that is not a parameter (a causal mask, running statistics); a persistent one is in the state
        dict, as torch's."""
        self._buffers[name] = tensor
        (self._non_persistent.discard if persistent else self._non_persistent.add)(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        self._parameters[name] = param

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"Module [{type(self).__name__}] is missing the required \"forward\" function")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # -- the tree ----------------------------------------------------------------------------------------
    def apply(self, fn) -> "Module":
        """fn(m) for every submodule, children first, then this one (torch's order); returns self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def named_modules(self, prefix: str = ""):
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        return (m for _, m in self.named_modules())

    def named_children(self):
        return ((n, m) for n, m in self._modules.items() if m is not None)

    def children(self):
        return (m for _, m in self.named_children())

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        seen = set()
        for mod_prefix, m in (self.named_modules(prefix) if recurse else [(prefix, self)]):
            for name, p in m._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{mod_prefix}.{name}" if mod_prefix else name), p

    def parameters(self, recurse: bool = True):
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = ""):
        for mod_prefix, m in self.named_modules(prefix):
            for name, b in m._buffers.items():
                if b is not None:
                    yield (f"{mod_prefix}.{name}" if mod_prefix else name), b

    def buffers(self):
        return (b for _, b in self.named_buffers())

    def get_submodule(self, target: str) -> "Module":
        """The submodule at a dotted path ("encoder.layers.0"; "" is this module), torch's AttributeError if none."""
        module = self
        for name in target.split(".") if target else ():
            child = module._modules.get(name)
            if child is None:
                raise AttributeError(f"{type(module).__name__} has no attribute `{name}`")
            module = child
        return module

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at a dotted path ("encoder.layers.0.linear1.weight")."""
        path, _, name = target.rpartition(".")
        module = self.get_submodule(path)
        if name not in module._parameters:
            raise AttributeError(f"{type(module).__name__} has no parameter `{name}`")
        return module._parameters[name]

    # -- state ----------------------------------------------------------------------------------------------
    def state_dict(self) -> "OrderedDict[str, Tensor]":
        out = OrderedDict()
        for mod_prefix, m in self.named_modules():
            for table in (m._parameters, m._buffers):
                for name, t in table.items():
                    if t is not None and not (table is m._buffers and name in m._non_persistent):
                        out[f"{mod_prefix}.{name}" if mod_prefix else name] = t.detach()
        return out

    def load_state_dict(self, state: dict, strict: bool = True):
        own = self.state_dict()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}: missing keys {missing}, "
                               f"unexpected keys {unexpected}")
        with no_grad():
            for k, t in own.items():
                if k in state:
                    if tuple(state[k].shape) != tuple(t.shape):
                        raise RuntimeError(f"size mismatch for {k}: copying a param with shape {tuple(state[k].shape)}"
                                           f", the shape in current model is {tuple(t.shape)}.")
                    t.copy_(state[k])
        return missing, unexpected

    def train(self, mode: bool = True) -> "Module":
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def to(self, *args, **kwargs) -> "Module":
        """Move parameters and buffers in place, and cast the floating-point ones when given a dtype (an integer
        buffer, batch norm's count, keeps its type, as in torch): each Parameter object stays (an optimizer made
        before holds the same ones), its data is replaced, as torch's `.data` assignment does."""
        dtype = kwargs.pop("dtype", None)
        places = []
        for a in args:
            if isinstance(a, _dtype.dtype):
                dtype = a
            else:
                places.append(a)

        def moved(t):
            cast = dtype if dtype is not None and t.dtype.is_floating_point else t.dtype
            return t.to(*places, dtype=cast, **kwargs)
        for m in self.modules():
            for p in m._parameters.values():
                if p is not None:
                    p._take(moved(p.detach()))
            for name, b in list(m._buffers.items()):
                if b is not None:
                    m._buffers[name] = moved(b)
        return self

    def double(self) -> "Module":
        return self.to(_dtype.float64)

    def float(self) -> "Module":
        return self.to(_dtype.float32)

    def half(self) -> "Module":
        return self.to(_dtype.float16)

    def bfloat16(self) -> "Module":
        return self.to(_dtype.bfloat16)

    def cuda(self, index: int = 0) -> "Module":
        return self.to(device("cuda", index))

    def cpu(self) -> "Module":
        return self.to("cpu")

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        body = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({body})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"


class Sequential(Module):
    def __init__(self, *mods):
        super().__init__()
        items = mods[0].items() if len(mods) == 1 and isinstance(mods[0], OrderedDict) else \
            ((str(i), m) for i, m in enumerate(mods))
        for name, m in items:
            self._modules[name] = m

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        mods = list(self._modules.values())
        return Sequential(*mods[i]) if isinstance(i, slice) else mods[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, m: Module) -> "Sequential":
        self._modules[str(len(self._modules))] = m
        return self


class ModuleList(Module):
    def __init__(self, mods=()):
        super().__init__()
        for m in mods:
            self.append(m)

    def append(self, m: Module) -> "ModuleList":
        self._modules[str(len(self._modules))] = m
        return self

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleDict(Module):
    def __init__(self, mods=None):
        super().__init__()
        for k, m in (mods or {}).items():
            self._modules[k] = m

    def __getitem__(self, k):
        return self._modules[k]

    def __setitem__(self, k, m):
        self._modules[k] = m

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()


class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, device=device, dtype=dtype))
        self.bias = Parameter(empty(out_features, device=device, dtype=dtype)) if bias else None
        if not bias:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # torch's: kaiming_uniform_(a=sqrt(5)) for the weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _activation(name: str, fn):
    def __init__(self, *args, **kwargs):               # ReLU(inplace=...) and friends: the flags are ignored
        Module.__init__(self)
    return type(name, (Module,), {"forward": lambda self, x: fn(x), "__init__": __init__})


ReLU = _activation("ReLU", F.relu)
SiLU = _activation("SiLU", F.silu)
Tanh = _activation("Tanh", F.tanh)
Sigmoid = _activation("Sigmoid", F.sigmoid)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)


class Softmax(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmax(x, self.dim)


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class Dropout(Module):
    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        return F.dropout(x, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        if elementwise_affine and bias:
            self.bias = Parameter(zeros(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention: packed input projections (in_proj_weight (3E, E), xavier-initialised),
    heads of E / num_heads, and out_proj. forward returns (output, weights averaged over heads or None);
    with need_weights=False it runs the fused attention kernels (`libs.dnn`) where it can."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, device=device, dtype=dtype))
        init.xavier_uniform_(self.in_proj_weight)
        if bias:
            self.in_proj_bias = Parameter(zeros(3 * embed_dim, device=device, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if bias:
            init.zeros_(self.out_proj.bias)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        batched = query.ndim == 3
        if not batched:                                       # (L, E): one sequence
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:                            # (L, N, E) -> (N, L, E)
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        out, weights = F.multi_head_attention_forward(self, query, key, value, key_padding_mask, need_weights,
                                                      attn_mask, average_attn_weights, is_causal)
        if not batched:
            return out.squeeze(0), weights.squeeze(0) if weights is not None else None
        return (out if self.batch_first else out.transpose(0, 1)), weights


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, device=None,
                 dtype=None):
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        init.normal_(self.weight)
        if padding_idx is not None:
            with no_grad():
                self.weight[padding_idx] = 0.0

    def forward(self, index):
        # index: (...) int64 -> (..., embedding_dim); the padding row gets no gradient, as torch's
        return F.embedding(index, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class Conv2d(Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, device=None, dtype=None):
        super().__init__()
        r, s = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        if in_channels % groups or out_channels % groups:
            raise ValueError("in_channels and out_channels must be divisible by groups")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, (r, s)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = Parameter(empty(out_channels, in_channels // groups, r, s, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))          # torch's Conv2d initialisation
        if bias:
            fan_in = in_channels // groups * r * s
            init.uniform_(self.bias, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")


class ConvTranspose2d(Module):
    """torch.nn.ConvTranspose2d: weight (in, out/groups, R, S), initialized as torch's transposed convolutions."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__()
        if padding_mode != "zeros":
            raise ValueError('Only "zeros" padding mode is supported for ConvTranspose2d')
        r, s = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        if in_channels % groups or out_channels % groups:
            raise ValueError("in_channels and out_channels must be divisible by groups")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, (r, s)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.dilation, self.groups = dilation, groups
        self.weight = Parameter(empty(in_channels, out_channels // groups, r, s, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))          # torch's: fan_in from the weight's dim 1
        if bias:
            fan_in = out_channels // groups * r * s
            init.uniform_(self.bias, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))

    def forward(self, x, output_size=None):
        if output_size is not None:
            raise NotImplementedError("ConvTranspose2d's output_size is not supported yet: give output_padding")
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.output_size)


class Upsample(Module):
    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
        super().__init__()
        self.size, self.scale_factor, self.mode, self.align_corners = size, scale_factor, mode, align_corners

    def forward(self, x):
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(MaxPool2d):
    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding)


class _BatchNorm(Module):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        if affine:
            self.weight = Parameter(ones(num_features, device=device, dtype=dtype))
            self.bias = Parameter(zeros(num_features, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.track_running_stats = track_running_stats
        self.register_buffer("running_mean", zeros(num_features, device=device) if track_running_stats else None)
        self.register_buffer("running_var", ones(num_features, device=device) if track_running_stats else None)

    def forward(self, x):
        training = self.training or not self.track_running_stats
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training, self.momentum,
                            self.eps)


class BatchNorm1d(_BatchNorm):
    pass


class BatchNorm2d(_BatchNorm):
    pass


__all__ = ["AdaptiveAvgPool2d", "Upsample", "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv2d", "ConvTranspose2d",
           "LeakyReLU", "MaxPool2d", "Dropout", "Embedding", "Flatten", "GELU", "LayerNorm", "Linear", "Module",
           "ModuleDict", "ModuleList", "Parameter", "ReLU", "Sequential", "SiLU", "Sigmoid", "Softmax", "Tanh"]

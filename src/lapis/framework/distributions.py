"""Layer 5: torch.distributions' Categorical and Normal, made of the framework's ops (log_prob, entropy and
Normal's rsample are differentiable; sample is not, as in torch).

    Categorical: logits normalized so that logsumexp(logits) = 0 over the last dimension; probs = exp(logits)
    Normal:      log_prob(x) = -(x - loc)^2 / (2 scale^2) - log(scale) - log(sqrt(2 pi))
"""

import math

from lapis.framework.autograd import no_grad
from lapis.framework.creation import as_tensor, multinomial, randn
from lapis.framework.ops.reductions import logsumexp


class Distribution:
    """What every distribution answers: its batch shape, and `sample_shape + batch_shape` for samples."""

    has_rsample = False

    def __init__(self, batch_shape=(), event_shape=()):
        self.batch_shape, self.event_shape = tuple(batch_shape), tuple(event_shape)

    def _extended_shape(self, sample_shape=()) -> tuple:
        return tuple(sample_shape) + self.batch_shape + self.event_shape

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Categorical(Distribution):
    """Categories 0 .. K-1 with `probs` (non-negative weights, normalized here) or `logits` (unnormalized log
    weights), each (*batch_shape, K)."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            probs = as_tensor(probs)
            self.probs = probs / probs.sum(-1, keepdim=True)
            self.logits = self.probs.log()
        else:
            logits = as_tensor(logits)
            self.logits = logits - logsumexp(logits, -1, keepdim=True)
            self.probs = self.logits.exp()
        if self.probs.ndim < 1:
            raise ValueError("`probs` or `logits` must be at least one-dimensional")
        self.num_categories = self.probs.shape[-1]
        super().__init__(self.probs.shape[:-1])

    def sample(self, sample_shape=()):
        # (*sample_shape, *batch_shape): one draw per sample from each batch row (on the host: a sync point)
        with no_grad():
            count = math.prod(sample_shape)
            rows = self.probs.reshape(-1, self.num_categories)
            drawn = multinomial(rows, count, replacement=True)            # (rows, count)
            return drawn.t().reshape(self._extended_shape(sample_shape))

    def log_prob(self, value):
        # value: (*sample_shape, *batch_shape) or broadcastable -> the normalized log probability of each
        value = as_tensor(value, device=self.logits.device).long()
        shape = tuple(_broadcast(value.shape, self.batch_shape))
        logits = self.logits.expand(*shape, self.num_categories)
        return logits.gather(-1, value.expand(*shape).unsqueeze(-1)).squeeze(-1)

    def entropy(self):
        # -sum p log p over the categories; a zero probability's term is 0 (its log is clamped as torch does)
        logits = self.logits.clamp(min=-3.4028234663852886e38)
        return -(self.probs * logits).sum(-1)

    @property
    def mean(self):
        raise NotImplementedError("Categorical has no mean (torch gives NaN)")


class Normal(Distribution):
    """The normal distribution with mean `loc` and standard deviation `scale` (tensors or numbers, broadcast)."""

    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        loc, scale = _as_float(loc, scale), _as_float(scale, loc)
        shape = tuple(_broadcast(loc.shape, scale.shape))
        self.loc, self.scale = (x if tuple(x.shape) == shape else x.expand(*shape) for x in (loc, scale))
        super().__init__(shape)

    @property
    def mean(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale ** 2

    def rsample(self, sample_shape=()):
        # loc + scale * eps, eps ~ N(0, 1): differentiable in loc and scale (the reparameterization trick)
        eps = randn(*self._extended_shape(sample_shape), dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def sample(self, sample_shape=()):
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value):
        value = _as_float(value, self.loc)
        return -((value - self.loc) ** 2) / (2 * self.variance) - self.scale.log() - math.log(math.sqrt(2 * math.pi))

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()


def _as_float(x, like):
    """x as a tensor on the device of `like` (a tensor or number), in its floating dtype."""
    device = getattr(like, "device", None)
    x = as_tensor(x, device=device) if not hasattr(x, "device") else x
    return x if x.dtype.is_floating_point else x.float()


def _broadcast(a: tuple, b: tuple) -> list:
    """numpy's broadcast of two shapes, or torch's error."""
    shape = []
    for i in range(1, max(len(a), len(b)) + 1):
        x, y = (a[-i] if i <= len(a) else 1), (b[-i] if i <= len(b) else 1)
        if x != y and 1 not in (x, y):
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) at non-singleton "
                               f"dimension {max(len(a), len(b)) - i}")
        shape.append(max(x, y) if 1 in (x, y) else x)
    return shape[::-1]


__all__ = ["Categorical", "Distribution", "Normal"]

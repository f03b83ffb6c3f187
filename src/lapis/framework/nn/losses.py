"""Layer 5: torch.nn's loss modules, each its `functional` loss with the reduction (and options) it was made with."""

from lapis.framework.nn import functional as F
from lapis.framework.nn.modules import Module


class _Loss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction


class CrossEntropyLoss(_Loss):
    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__(reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, logits, target):
        return F.cross_entropy(logits, target, self.ignore_index, self.reduction, self.label_smoothing)


class NLLLoss(_Loss):
    def __init__(self, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(reduction)
        self.ignore_index = ignore_index

    def forward(self, logp, target):
        return F.nll_loss(logp, target, self.ignore_index, self.reduction)


class MSELoss(_Loss):
    def forward(self, x, y):
        return F.mse_loss(x, y, self.reduction)


class BCEWithLogitsLoss(_Loss):
    """F.binary_cross_entropy_with_logits with the module's `weight` and `pos_weight`, buffers as torch's (so they
    move with `.to()` and are in the state dict when given)."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean", pos_weight=None):
        super().__init__(F._legacy_reduction(size_average, reduce, reduction))
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, x, y):
        return F.binary_cross_entropy_with_logits(x, y, self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class BCELoss(_Loss):
    def forward(self, x, y):
        return F.binary_cross_entropy(x, y, reduction=self.reduction)


class KLDivLoss(_Loss):
    def __init__(self, reduction: str = "mean", log_target: bool = False):
        super().__init__(reduction=reduction)
        self.log_target = log_target

    def forward(self, x, y):
        return F.kl_div(x, y, self.reduction, self.log_target)


__all__ = ["BCELoss", "BCEWithLogitsLoss", "CrossEntropyLoss", "KLDivLoss", "MSELoss", "NLLLoss"]

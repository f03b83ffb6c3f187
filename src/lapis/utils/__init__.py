"""`lapis.utils`, torch.utils's place: `lapis.utils.data` and `lapis.utils.benchmark`."""

from lapis.utils import benchmark, data

__all__ = ["benchmark", "data"]

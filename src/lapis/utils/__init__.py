"""`lapis.utils`, torch.utils's place: `lapis.utils.data`."""

from lapis.utils import data

__all__ = ["data"]

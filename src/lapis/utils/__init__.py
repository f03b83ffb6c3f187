"""Layer 5, `lapis.utils`: `data` (datasets and loaders)."""

from lapis.utils import data

__all__ = ["data"]

"""`lapis.utils.data.dataloader`, torch.utils.data.dataloader's place."""

from lapis.framework.data import DataLoader, default_collate

__all__ = ["DataLoader", "default_collate"]

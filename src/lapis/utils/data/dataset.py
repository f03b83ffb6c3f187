"""`lapis.utils.data.dataset`, torch.utils.data.dataset's place."""

from lapis.framework.data import ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split

__all__ = ["ConcatDataset", "Dataset", "IterableDataset", "Subset", "TensorDataset", "random_split"]

"""Layer 5: torch.utils.data's Dataset, TensorDataset and DataLoader (batching, shuffling, drop_last)."""

import numpy as np

from lapis.framework.creation import tensor
from lapis.framework.generator import default_generator
from lapis.framework.ops.views import stack
from lapis.framework.tensor import Tensor


class Dataset:
    def __getitem__(self, index):
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


class TensorDataset(Dataset):
    def __init__(self, *tensors: Tensor):
        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise ValueError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


def default_collate(items: list):
    first = items[0]
    if isinstance(first, tuple | list):
        return type(first)(default_collate([it[k] for it in items]) for k in range(len(first)))
    if isinstance(first, Tensor):
        return stack(items)
    return tensor(items)


class DataLoader:
    """Batches of a dataset; with `shuffle`, a new order each epoch from `generator` (a numpy Generator or
    a seed) or the framework's generator. A TensorDataset on the cpu is batched by fancy indexing on the
    host, one copy per tensor per batch, not one per sample."""

    def __init__(self, dataset: Dataset, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 generator=None, collate_fn=None):
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last
        self.generator = np.random.default_rng(generator) if isinstance(generator, int | None) and \
            generator is not None else generator
        self.collate_fn = collate_fn or default_collate

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        n = len(self.dataset)
        order = (self.generator or default_generator()).permutation(n) if self.shuffle else np.arange(n)
        fast = isinstance(self.dataset, TensorDataset) and all(t.device.type == "cpu" for t in self.dataset.tensors)
        for start in range(0, n, self.batch_size):
            idx = order[start:start + self.batch_size]
            if len(idx) < self.batch_size and self.drop_last:
                return
            if fast:
                yield tuple(Tensor._from_numpy(t.numpy()[idx], t.device) for t in self.dataset.tensors)
            else:
                yield self.collate_fn([self.dataset[int(i)] for i in idx])

__all__ = ["Dataset", "TensorDataset", "default_collate", "DataLoader"]

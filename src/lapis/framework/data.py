"""Layer 5: torch.utils.data: datasets (TensorDataset, Subset, ConcatDataset, IterableDataset, random_split),
samplers (Sequential, Random, SubsetRandom, Batch) and DataLoader, which batches a dataset in the order its
sampler gives.

Loading happens in the calling process: `num_workers`, `prefetch_factor`, `persistent_workers`,
`worker_init_fn` and `timeout` are accepted and change nothing. With `pin_memory`, each batch's cpu tensors (in
tuples, lists and dicts too) are copied into page-locked memory, as torch's pin-memory thread does, so their copy
to a GPU needs no staging buffer. Random orders come from `generator` (a lapis or numpy Generator) or the
framework's generator.
"""

import bisect
import math
from collections.abc import Mapping

import numpy as np

from lapis.framework.creation import tensor
from lapis.framework.generator import default_generator
from lapis.framework.ops.views import stack
from lapis.framework.tensor import Tensor


# -- datasets -----------------------------------------------------------------------------------------------
class Dataset:
    """A map-style dataset: __getitem__ by index and __len__."""

    def __getitem__(self, index):
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: DataLoader batches what __iter__ yields (no sampler, no shuffle)."""

    def __iter__(self):
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


class Subset(Dataset):
    """The elements of `dataset` at `indices`, in that order."""

    def __init__(self, dataset: Dataset, indices):
        self.dataset, self.indices = dataset, [int(i) for i in indices]

    def __getitem__(self, index):
        if isinstance(index, list):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """The datasets one after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self) -> int:
        return int(self.cumulative_sizes[-1])

    def __getitem__(self, index: int):
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


def random_split(dataset: Dataset, lengths, generator=None) -> list:
    """Disjoint random Subsets of the given lengths, or of fractions of the dataset that sum to 1 (the remainder
    of their rounding dealt one each, round robin, as torch's)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = [int(math.floor(n * f)) for f in lengths]
        for k in range(n - sum(counts)):
            counts[k % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = (generator or default_generator()).permutation(n).tolist()
    out, at = [], 0
    for length in lengths:
        out.append(Subset(dataset, order[at:at + length]))
        at += length
    return out


# -- samplers -----------------------------------------------------------------------------------------------
class Sampler:
    """An iterable of dataset indices."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A new random order of the dataset's indices at each iteration (or `num_samples` draws with replacement)."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None):
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples
        if num_samples is not None and num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        rng, n = self.generator or default_generator(), len(self.data_source)
        if self.replacement:
            return iter(rng.integers(0, n, self.num_samples).tolist())
        rounds = -(-self.num_samples // n) if n else 0
        order = np.concatenate([rng.permutation(n) for _ in range(rounds)]) if rounds else np.zeros(0, np.int64)
        return iter(order[:self.num_samples].tolist())

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices, in a new random order at each iteration."""

    def __init__(self, indices, generator=None):
        self.indices, self.generator = list(indices), generator

    def __iter__(self):
        order = (self.generator or default_generator()).permutation(len(self.indices))
        return iter([self.indices[i] for i in order])

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """Lists of `batch_size` indices from `sampler` (the last shorter, or dropped with drop_last)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


# -- batching -----------------------------------------------------------------------------------------------
def default_collate(items: list):
    """A batch from a list of samples, as torch's: tensors stacked, numbers and numpy arrays made tensors, and
    tuples, lists and dicts collated field by field."""
    first = items[0]
    if isinstance(first, Tensor):
        return stack(items)
    if isinstance(first, np.ndarray):
        return tensor(np.stack(items))
    if isinstance(first, Mapping):
        return {key: default_collate([it[key] for it in items]) for key in first}
    if isinstance(first, tuple | list):
        if isinstance(first, tuple) and hasattr(first, "_fields"):        # a namedtuple
            return type(first)(*(default_collate([it[k] for it in items]) for k in range(len(first))))
        return type(first)(default_collate([it[k] for it in items]) for k in range(len(first)))
    if isinstance(first, str | bytes):
        return list(items)
    return tensor(items)


class DataLoader:
    """Batches of a dataset: the indices come from `batch_sampler`, or from `sampler` (or, with `shuffle`, a
    RandomSampler; else a SequentialSampler) in groups of `batch_size`; with batch_size None, single samples. A
    TensorDataset on the cpu is batched by indexing on the host, one copy per tensor per batch."""

    def __init__(self, dataset: Dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None, generator=None, *,
                 prefetch_factor=None, persistent_workers: bool = False, multiprocessing_context=None,
                 pin_memory_device: str = ""):
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                             "drop_last")
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.num_workers, self.pin_memory = num_workers, pin_memory
        self.generator = np.random.default_rng(generator) if isinstance(generator, int) else generator
        self.collate_fn = collate_fn or default_collate
        self.iterable = isinstance(dataset, IterableDataset)
        if self.iterable:
            if shuffle or sampler is not None or batch_sampler is not None:
                raise ValueError("an IterableDataset takes no shuffle, sampler or batch_sampler")
            self.sampler = self.batch_sampler = None
            return
        self.sampler = sampler if sampler is not None else (
            RandomSampler(dataset, generator=self.generator) if shuffle else SequentialSampler(dataset))
        self.batch_sampler = batch_sampler if batch_sampler is not None else (
            BatchSampler(self.sampler, batch_size, drop_last) if batch_size is not None else None)

    def __len__(self) -> int:
        if self.iterable:
            raise TypeError("an IterableDataset's DataLoader has no len()")
        return len(self.batch_sampler) if self.batch_sampler is not None else len(self.sampler)

    def __iter__(self):
        batches = self._batches()
        yield from (map(_pinned, batches) if self.pin_memory else batches)

    def _batches(self):
        if self.iterable:
            yield from self._iterable_batches()
            return
        if self.batch_sampler is None:
            for index in self.sampler:
                yield self.dataset[index]
            return
        fast = isinstance(self.dataset, TensorDataset) and self.collate_fn is default_collate and \
            all(t.device.type == "cpu" for t in self.dataset.tensors)
        for batch in self.batch_sampler:
            if fast:
                rows = np.asarray(batch, np.int64)
                yield tuple(Tensor._from_numpy(t.numpy()[rows], t.device) for t in self.dataset.tensors)
            else:
                yield self.collate_fn([self.dataset[int(i)] for i in batch])

    def _iterable_batches(self):
        if self.batch_size is None:
            yield from iter(self.dataset)
            return
        batch = []
        for item in self.dataset:
            batch.append(item)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)


def _pinned(batch):
    """A batch with its cpu tensors in page-locked memory (torch's pin_memory of a batch, recursively)."""
    if isinstance(batch, Tensor):
        return batch.pin_memory() if batch.device.type == "cpu" else batch
    if isinstance(batch, dict):
        return {key: _pinned(value) for key, value in batch.items()}
    if isinstance(batch, tuple | list):
        return type(batch)(_pinned(value) for value in batch)
    return batch


__all__ = ["BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "IterableDataset", "RandomSampler", "Sampler",
           "SequentialSampler", "Subset", "SubsetRandomSampler", "TensorDataset", "default_collate", "random_split"]

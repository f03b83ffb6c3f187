"""`lapis.utils.data.sampler`, torch.utils.data.sampler's place."""

from lapis.framework.data import BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler

__all__ = ["BatchSampler", "RandomSampler", "Sampler", "SequentialSampler", "SubsetRandomSampler"]

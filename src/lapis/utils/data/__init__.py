"""`lapis.utils.data`, torch.utils.data's place (the code is `lapis.framework.data`), with its submodules
`dataset`, `sampler` and `dataloader` where programs import from them."""

from lapis.framework.data import *  # noqa: F403
from lapis.framework.data import __all__  # noqa: F401
from lapis.utils.data import dataloader, dataset, sampler  # noqa: F401

"""`lapis.optim.lr_scheduler`, torch.optim.lr_scheduler's place (the code is
`lapis.framework.optim.lr_scheduler`)."""

from lapis.framework.optim.lr_scheduler import *  # noqa: F403
from lapis.framework.optim.lr_scheduler import __all__  # noqa: F401

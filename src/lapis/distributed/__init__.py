"""`lapis.distributed`, torch.distributed's place (the code is `lapis.framework.distributed`)."""

from lapis.framework.distributed import *  # noqa: F403
from lapis.framework.distributed import __all__  # noqa: F401

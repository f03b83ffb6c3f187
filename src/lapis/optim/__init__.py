"""`lapis.optim`, torch.optim's place: the framework's optimizers (`lapis.framework.optim`) under the name users
import."""

from lapis.framework.optim import *  # noqa: F403
from lapis.framework.optim import __all__  # noqa: F401

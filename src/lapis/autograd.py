"""`lapis.autograd`, torch.autograd's place: the framework's engine (`lapis.framework.autograd`) under the name
users import (`from lapis.autograd import Function`)."""

from lapis.framework.autograd import *  # noqa: F403
from lapis.framework.autograd import __all__  # noqa: F401

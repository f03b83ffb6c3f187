"""Layer 5, `lapis.nn`: modules, layers and losses with torch.nn's names (`functional` and `init` too)."""

from lapis.nn import functional, init
from lapis.nn.modules import (
    GELU,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    Linear,
    Module,
    ModuleDict,
    ModuleList,
    MSELoss,
    NLLLoss,
    Parameter,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)

__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "GELU", "LayerNorm", "Linear",
           "MSELoss",
           "Module", "ModuleDict", "ModuleList", "NLLLoss", "Parameter", "ReLU", "Sequential", "SiLU", "Sigmoid",
           "Softmax", "Tanh", "functional", "init"]

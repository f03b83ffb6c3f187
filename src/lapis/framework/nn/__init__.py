"""Layer 5, `lapis.nn`: modules, layers and losses with torch.nn's names (`functional` and `init` too)."""

from lapis.framework.nn import functional, init, parallel, utils
from lapis.framework.nn.losses import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, KLDivLoss, MSELoss, NLLLoss
from lapis.framework.nn.modules import (
    GELU,
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    ConvTranspose2d,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    LeakyReLU,
    Linear,
    MaxPool2d,
    Module,
    ModuleDict,
    ModuleList,
    MultiheadAttention,
    Parameter,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
    Upsample,
)
from lapis.framework.nn.parallel import DataParallel
from lapis.framework.nn.recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from lapis.framework.nn.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = ["AdaptiveAvgPool2d", "KLDivLoss", "Upsample", "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv2d",
           "ConvTranspose2d", "LeakyReLU", "MaxPool2d", "BCELoss", "BCEWithLogitsLoss", "CrossEntropyLoss",
           "Dropout", "Embedding", "Flatten", "GELU", "GRU", "GRUCell", "LayerNorm", "Linear", "LSTM", "LSTMCell",
           "MSELoss", "MultiheadAttention", "Module", "ModuleDict", "ModuleList", "NLLLoss", "Parameter", "ReLU",
           "RNN", "RNNCell", "Sequential", "SiLU", "Sigmoid", "Softmax", "Tanh", "Transformer", "TransformerDecoder",
           "TransformerDecoderLayer", "TransformerEncoder", "TransformerEncoderLayer", "functional", "init",
           "parallel", "utils", "DataParallel"]

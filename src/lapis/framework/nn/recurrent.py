"""Layer 5: torch.nn's LSTM and LSTMCell, made of the framework's ops (so their gradients are autograd's).

One step, torch's gate order and parameter names (weight_ih_l0 holds the input, forget, cell and output gates'
rows, in that order):

    gates = x W_ih^T + b_ih + h W_hh^T + b_hh          # (B, 4H)
    i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of its four (B, H) parts
    c' = f c + i g;  h' = o tanh(c')

LSTM runs the steps over time, layer after layer (dropout between layers while training); bidirectional and
projected (proj_size) LSTMs are refused, saying so.
"""

import math

from lapis.framework.creation import empty, zeros
from lapis.framework.nn import functional as F
from lapis.framework.nn import init
from lapis.framework.nn.modules import Module, Parameter
from lapis.framework.ops.views import stack


def _step(x, h, c, w_ih, w_hh, b_ih, b_hh):
    # x: (B, I), h and c: (B, H) -> h', c'
    gates = F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, 1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


class LSTMCell(Module):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.weight_ih = Parameter(empty(4 * hidden_size, input_size, device=device, dtype=dtype))
        self.weight_hh = Parameter(empty(4 * hidden_size, hidden_size, device=device, dtype=dtype))
        self.bias_ih = Parameter(empty(4 * hidden_size, device=device, dtype=dtype)) if bias else None
        self.bias_hh = Parameter(empty(4 * hidden_size, device=device, dtype=dtype)) if bias else None
        if not bias:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        for p in self.parameters():                 # torch's: U(-1/sqrt(H), 1/sqrt(H)) for every parameter
            init.uniform_(p, -1 / math.sqrt(hidden_size), 1 / math.sqrt(hidden_size))

    def forward(self, x, state=None):
        # x: (B, I) or (I,); state: (h, c), each (B, H) -> (h', c')
        single = x.ndim == 1
        x = x.unsqueeze(0) if single else x
        if state is None:
            state = (zeros(x.shape[0], self.hidden_size, device=x.device, dtype=x.dtype),) * 2
        h, c = (s.unsqueeze(0) if single else s for s in state)
        h, c = _step(x, h, c, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return (h.squeeze(0), c.squeeze(0)) if single else (h, c)


class LSTM(Module):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__()
        if bidirectional or proj_size:
            raise NotImplementedError("bidirectional and projected (proj_size) LSTMs are not supported yet")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, dropout
        bound = 1 / math.sqrt(hidden_size)
        for layer in range(num_layers):
            inputs = input_size if layer == 0 else hidden_size
            shapes = {"weight_ih": (4 * hidden_size, inputs), "weight_hh": (4 * hidden_size, hidden_size)}
            if bias:
                shapes.update(bias_ih=(4 * hidden_size,), bias_hh=(4 * hidden_size,))
            for name, shape in shapes.items():
                p = Parameter(empty(*shape, device=device, dtype=dtype))
                init.uniform_(p, -bound, bound)
                setattr(self, f"{name}_l{layer}", p)

    def forward(self, x, state=None):
        # x: (T, B, I), or (B, T, I) with batch_first, or (T, I) unbatched; state: (h0, c0), each (L, B, H)
        # -> output (T, B, H) (or batch first), (h_n, c_n) each (L, B, H)
        unbatched = x.ndim == 2
        x = x.unsqueeze(1) if unbatched else (x.transpose(0, 1) if self.batch_first else x)
        steps, batch = x.shape[0], x.shape[1]
        if state is None:
            zero = zeros(self.num_layers, batch, self.hidden_size, device=x.device, dtype=x.dtype)
            h0, c0 = zero, zero
        else:                                       # an unbatched sequence's state is (L, H)
            h0, c0 = (s.unsqueeze(1) if unbatched else s for s in state)
        hs, cs, layer_input = [], [], x
        for layer in range(self.num_layers):
            weights = [getattr(self, f"{name}_l{layer}") for name in ("weight_ih", "weight_hh")]
            biases = [getattr(self, f"{name}_l{layer}") if self.bias else None for name in ("bias_ih", "bias_hh")]
            h, c, outputs = h0[layer], c0[layer], []
            for t in range(steps):
                h, c = _step(layer_input[t], h, c, *weights, *biases)
                outputs.append(h)
            layer_input = stack(outputs)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
            hs.append(h)
            cs.append(c)
        h_n, c_n = stack(hs), stack(cs)
        if unbatched:
            return layer_input.squeeze(1), (h_n.squeeze(1), c_n.squeeze(1))
        return (layer_input.transpose(0, 1) if self.batch_first else layer_input), (h_n, c_n)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}"

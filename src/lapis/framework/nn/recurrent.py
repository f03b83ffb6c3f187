"""Layer 5: torch.nn's recurrent layers (RNN, LSTM, GRU) and their cells, made of the framework's ops (so their
gradients are autograd's).

One step of each, with torch's gate order and parameter names (weight_ih_l0 stacks the gates' rows in this order):

    RNN:   h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)                    # act: tanh or relu
    LSTM:  i, f, g, o = x W_ih^T + b_ih + h W_hh^T + b_hh, in four parts  # each (B, H)
           c' = sigmoid(f) c + sigmoid(i) tanh(g);  h' = sigmoid(o) tanh(c')
    GRU:   r, z, n_x = x W_ih^T + b_ih;  r_h, z_h, n_h = h W_hh^T + b_hh  # in three parts
           r = sigmoid(r + r_h);  z = sigmoid(z + z_h);  n = tanh(n_x + r n_h);  h' = (1 - z) n + z h

A layer runs its steps over time (a bidirectional one also from the last step back, its outputs concatenated
with the forward ones'), layers one after another with dropout between them while training. Projected LSTMs
(proj_size) and packed sequences are not supported.
"""

import math

from lapis.framework.creation import empty, zeros
from lapis.framework.nn import functional as F
from lapis.framework.nn import init
from lapis.framework.nn.modules import Module, Parameter
from lapis.framework.ops.views import cat, stack


# -- one step of each kind: (x (B, I), state tuple of (B, H), weights) -> the new state, its h first ------------
def _rnn_step(act):
    def step(x, state, w_ih, w_hh, b_ih, b_hh):
        return (act(F.linear(x, w_ih, b_ih) + F.linear(state[0], w_hh, b_hh)),)
    return step


def _lstm_step(x, state, w_ih, w_hh, b_ih, b_hh):
    h, c = state
    i, f, g, o = (F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)).chunk(4, 1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def _gru_step(x, state, w_ih, w_hh, b_ih, b_hh):
    h = state[0]
    r_x, z_x, n_x = F.linear(x, w_ih, b_ih).chunk(3, 1)
    r_h, z_h, n_h = F.linear(h, w_hh, b_hh).chunk(3, 1)
    r, z = (r_x + r_h).sigmoid(), (z_x + z_h).sigmoid()
    n = (n_x + r * n_h).tanh()
    return ((1 - z) * n + z * h,)


# mode -> (gates, states: 1 for h, 2 for (h, c), step)
KINDS = {
    "RNN_TANH": (1, 1, _rnn_step(lambda v: v.tanh())),
    "RNN_RELU": (1, 1, _rnn_step(F.relu)),
    "LSTM": (4, 2, _lstm_step),
    "GRU": (3, 1, _gru_step),
}


def _rnn_mode(nonlinearity: str) -> str:
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
    return "RNN_" + nonlinearity.upper()


def _parameters(module: Module, gates: int, input_size: int, hidden_size: int, bias: bool, suffix: str,
                device, dtype) -> None:
    """Register weight_ih, weight_hh (and bias_ih, bias_hh) + suffix in torch's order, each U(-1/sqrt(H), 1/sqrt(H))
    as torch initializes them."""
    bound = 1 / math.sqrt(hidden_size)
    shapes = {"weight_ih": (gates * hidden_size, input_size), "weight_hh": (gates * hidden_size, hidden_size)}
    if bias:
        shapes.update(bias_ih=(gates * hidden_size,), bias_hh=(gates * hidden_size,))
    for name, shape in shapes.items():
        p = Parameter(empty(*shape, device=device, dtype=dtype))
        init.uniform_(p, -bound, bound)
        setattr(module, name + suffix, p)
    if not bias:
        module.register_parameter("bias_ih" + suffix, None)
        module.register_parameter("bias_hh" + suffix, None)


class RNNBase(Module):
    """A stack of recurrent layers of one kind (`KINDS`), torch's RNNBase: parameters weight_ih_l{k}, weight_hh_l{k},
    bias_ih_l{k}, bias_hh_l{k} (and _reverse for the backward direction)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__()
        if proj_size:
            raise NotImplementedError("projected LSTMs (proj_size) are not supported yet")
        if not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout, self.bidirectional = bias, batch_first, dropout, bidirectional
        gates = KINDS[mode][0]
        directions = 2 if bidirectional else 1
        for layer in range(num_layers):
            inputs = input_size if layer == 0 else hidden_size * directions
            for suffix in ("", "_reverse")[:directions]:
                _parameters(self, gates, inputs, hidden_size, bias, f"_l{layer}{suffix}", device, dtype)

    def flatten_parameters(self) -> None:
        """torch's call to pack the weights into one buffer for cuDNN's fused RNN (word_language_model makes it after
        loading a model); a step of time here is a few kernels over the weights as they are, so nothing to do."""

    def _weights(self, layer: int, suffix: str) -> list:
        return [getattr(self, f"{name}_l{layer}{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]

    def forward(self, x, hx=None):
        # x: (T, B, I), or (B, T, I) with batch_first, or (T, I) unbatched; hx: h0 (or (h0, c0) for an LSTM), each
        # (L * D, B, H) -> output (T, B, D * H) (or batch first), and h_n (or (h_n, c_n)) each (L * D, B, H)
        _, states, step = KINDS[self.mode]
        directions = 2 if self.bidirectional else 1
        unbatched = x.ndim == 2
        x = x.unsqueeze(1) if unbatched else (x.transpose(0, 1) if self.batch_first else x)
        steps, batch = x.shape[0], x.shape[1]
        if hx is None:
            zero = zeros(self.num_layers * directions, batch, self.hidden_size, device=x.device, dtype=x.dtype)
            initial = (zero,) * states
        else:                                       # an unbatched sequence's state is (L * D, H)
            initial = tuple(s.unsqueeze(1) if unbatched else s for s in (hx if states == 2 else (hx,)))
        finals, layer_input = [], x
        for layer in range(self.num_layers):
            outputs = []
            for direction, suffix in enumerate(("", "_reverse")[:directions]):
                state = tuple(s[layer * directions + direction] for s in initial)
                weights = self._weights(layer, suffix)
                order = range(steps - 1, -1, -1) if direction else range(steps)
                hs = [None] * steps
                for t in order:
                    state = step(layer_input[t], state, *weights)
                    hs[t] = state[0]
                outputs.append(stack(hs))
                finals.append(state)
            layer_input = outputs[0] if directions == 1 else cat(outputs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        last = tuple(stack([s[k] for s in finals]) for k in range(states))
        if unbatched:
            output, last = layer_input.squeeze(1), tuple(s.squeeze(1) for s in last)
        else:
            output = layer_input.transpose(0, 1) if self.batch_first else layer_input
        return output, (last if states == 2 else last[0])

    def extra_repr(self) -> str:
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}"
                + (", batch_first=True" if self.batch_first else "") + (", bidirectional=True"
                                                                         if self.bidirectional else ""))


class RNN(RNNBase):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None):
        super().__init__(_rnn_mode(nonlinearity), input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)


class RNNCellBase(Module):
    """One step of a recurrent layer (`KINDS`): parameters weight_ih, weight_hh, bias_ih, bias_hh."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.mode, self.input_size, self.hidden_size, self.bias = mode, input_size, hidden_size, bias
        _parameters(self, KINDS[mode][0], input_size, hidden_size, bias, "", device, dtype)

    def forward(self, x, hx=None):
        # x: (B, I) or (I,); hx: h (or (h, c) for an LSTM cell), each (B, H) or (H,) -> h' (or (h', c'))
        _, states, step = KINDS[self.mode]
        single = x.ndim == 1
        x = x.unsqueeze(0) if single else x
        if hx is None:
            state = (zeros(x.shape[0], self.hidden_size, device=x.device, dtype=x.dtype),) * states
        else:
            state = tuple(s.unsqueeze(0) if single else s for s in (hx if states == 2 else (hx,)))
        state = step(x, state, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        state = tuple(s.squeeze(0) for s in state) if single else state
        return state if states == 2 else state[0]

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}"


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        super().__init__(_rnn_mode(nonlinearity), input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity


class LSTMCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype)


class GRUCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype)

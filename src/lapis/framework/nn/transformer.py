"""Layer 5: torch.nn's Transformer and its encoder and decoder stacks, made of MultiheadAttention, Linear, LayerNorm
and Dropout with torch's submodule names (so state dicts load both ways) and torch's order of operations:

    post-norm (default):  x = norm1(x + self_attn(x));  [x = norm2(x + cross_attn(x, memory));]  x = normN(x + ff(x))
    pre-norm (norm_first): x = x + self_attn(norm1(x)); [x = x + cross_attn(norm2(x), memory);]  x = x + ff(normN(x))
    ff(x) = linear2(dropout(activation(linear1(x))))

Masks follow MultiheadAttention's (boolean True = do not attend, or float, added to the scores); `is_causal` is the
hint torch passes along with a causal mask. Nested tensors and torch's fast path are torch's internals, not here.
"""

import copy
import math

from lapis.framework.creation import full
from lapis.framework.nn import functional as F
from lapis.framework.nn import init
from lapis.framework.nn.modules import Dropout, LayerNorm, Linear, Module, ModuleList, MultiheadAttention

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation(activation):
    if callable(activation):
        return activation
    if activation not in ACTIVATIONS:
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return ACTIVATIONS[activation]


class _Layer(Module):
    """What the encoder and decoder layers share: the feed-forward block and its norms' and dropouts' settings."""

    def _feed_forward_parts(self, d_model, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, bias,
                            norms, factory) -> None:
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = norm_first
        for k in range(1, norms + 1):
            setattr(self, f"norm{k}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        for k in range(1, norms + 1):
            setattr(self, f"dropout{k}", Dropout(dropout))
        self.activation = _activation(activation)

    def _ff_block(self, x, dropout):
        return dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    @staticmethod
    def _attend(attention, x, memory, mask, key_padding_mask, is_causal, dropout):
        return dropout(attention(x, memory, memory, attn_mask=mask, key_padding_mask=key_padding_mask,
                                 need_weights=False, is_causal=is_causal)[0])


class TransformerEncoderLayer(_Layer):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            **factory)
        self._feed_forward_parts(d_model, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, bias, 2,
                                 factory)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        # src: (S, N, E), or (N, S, E) with batch_first, or (S, E) -> the same shape
        x = src
        if self.norm_first:
            y = self.norm1(x)
            x = x + self._attend(self.self_attn, y, y, src_mask, src_key_padding_mask, is_causal, self.dropout1)
            return x + self._ff_block(self.norm2(x), self.dropout2)
        x = self.norm1(x + self._attend(self.self_attn, x, x, src_mask, src_key_padding_mask, is_causal,
                                        self.dropout1))
        return self.norm2(x + self._ff_block(x, self.dropout2))


class TransformerDecoderLayer(_Layer):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            **factory)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                                 **factory)
        self._feed_forward_parts(d_model, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, bias, 3,
                                 factory)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False):
        # tgt: (T, N, E), memory: (S, N, E) (batch first: N first) -> (T, N, E)
        x = tgt
        if self.norm_first:
            y = self.norm1(x)
            x = x + self._attend(self.self_attn, y, y, tgt_mask, tgt_key_padding_mask, tgt_is_causal, self.dropout1)
            x = x + self._attend(self.multihead_attn, self.norm2(x), memory, memory_mask, memory_key_padding_mask,
                                 memory_is_causal, self.dropout2)
            return x + self._ff_block(self.norm3(x), self.dropout3)
        x = self.norm1(x + self._attend(self.self_attn, x, x, tgt_mask, tgt_key_padding_mask, tgt_is_causal,
                                        self.dropout1))
        x = self.norm2(x + self._attend(self.multihead_attn, x, memory, memory_mask, memory_key_padding_mask,
                                        memory_is_causal, self.dropout2))
        return self.norm3(x + self._ff_block(x, self.dropout3))


class TransformerEncoder(Module):
    """`num_layers` copies of `encoder_layer` (layers.0, layers.1, ...), then `norm` if given."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm=None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return self.norm(x) if self.norm is not None else x


class TransformerDecoder(Module):
    """`num_layers` copies of `decoder_layer` (layers.0, layers.1, ...), then `norm` if given."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm=None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal: bool = False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=bool(tgt_is_causal),
                      memory_is_causal=memory_is_causal)
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """An encoder and a decoder stack, each ending in a LayerNorm; every weight matrix xavier-uniform, as torch's."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        options = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                       layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first, bias=bias,
                       **factory)
        self.encoder = custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **options), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        self.decoder = custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **options), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal: bool = False):
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """(sz, sz) float: -inf above the diagonal (position i may not attend to j > i), 0 elsewhere."""
        return full((sz, sz), -math.inf, dtype=dtype, device=device).triu(1)


__all__ = ["Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer"]

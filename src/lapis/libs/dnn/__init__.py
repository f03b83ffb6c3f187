"""Layer 4: deep-learning primitives with cuDNN's conventions (descriptors, forward and backward).

    handle = dnn.create(cuda)
    x = dnn.TensorDescriptor((N, C, H, W), "NCHW")               # describes a device array's layout
    dnn.activation_forward(handle, "gelu", x_desc, x, y)
    dnn.activation_backward(handle, "gelu", x_desc, x, dy, dx)
    dnn.softmax_forward(handle, x, y, log=False)                  # over the last dimension
    dnn.layer_norm_forward(handle, x, gamma, beta, eps, y, mean, rstd)
    dnn.pooling_forward(handle, "max", desc, x, window, stride, padding, y)
    dnn.dropout_forward(handle, p, seed, x, y, mask)

Forward and backward of each op sit side by side, as in cuDNN's API (and in llm.c), and each
kernel sits beside its host wrapper, one module per family of primitives:

    descriptors     TensorDescriptor, FilterDescriptor, ConvolutionDescriptor, DnnError
    handle          Handle and create; the argument checks and launch sizes every family uses
    activation      relu, gelu, silu, tanh, sigmoid; softmax and log-softmax
    dropout         dropout with a counter-based mask
    normalization   layer norm and batch norm
    pooling         max and average pooling
    convolution     convolutions in three algorithms per direction, and the find steps
    attention       fused scaled dot-product attention
    loss            the negative log-likelihood loss (cross entropy after log-softmax)

Arrays are device arrays (float32); a TensorDescriptor says how a 4-D NCHW or NHWC tensor is laid
out, and routines check descriptors and array sizes before launching anything. Every name is
importable from `lapis.libs.dnn` itself.
"""

from lapis.libs.dnn.activation import (
    ACTIVATION_KERNELS,
    ACTIVATIONS,
    WARP_ROW_COLS,
    WARP_ROWS_THREADS,
    activate,
    activation_backward,
    activation_forward,
    make_activation_kernel,
    softmax_backward,
    softmax_backward_kernel,
    softmax_forward,
    softmax_forward_kernel,
    softmax_warp_backward_kernel,
    softmax_warp_forward_kernel,
    warp_row,
)
from lapis.libs.dnn.attention import (
    KEY_TILE,
    MAX_HEAD_DIM,
    QUERY_TILE,
    attention_backward,
    attention_delta_kernel,
    attention_dkv_kernel,
    attention_dq_kernel,
    attention_forward,
    attention_forward_kernel,
    lanes_kernels,
    row_start,
)
from lapis.libs.dnn.convolution import (
    CONV_ALGORITHMS,
    CONV_BACKWARD_DATA_ALGORITHMS,
    CONV_BACKWARD_FILTER_ALGORITHMS,
    CONV_DIRECTIONS,
    CONV_FORWARD_ALGORITHMS,
    CONV_GEMM_KERNELS,
    CONV_MICRO_ROWS,
    SPLIT_K_MIN_DEPTH,
    SPLIT_K_TARGET_BLOCKS,
    ConvGeometry,
    advance_digits,
    conv_backward_data_kernel,
    conv_backward_filter_kernel,
    conv_col2im_kernel,
    conv_direct_kernel,
    conv_im2col_kernel,
    convolution_backward_data,
    convolution_backward_filter,
    convolution_forward,
    convolution_output,
    convolution_workspace_size,
    find_convolution_backward_data_algorithm,
    find_convolution_backward_filter_algorithm,
    find_convolution_forward_algorithm,
    get_convolution_algorithm,
    make_conv_gemm_kernel,
)
from lapis.libs.dnn.descriptors import ConvolutionDescriptor, DnnError, FilterDescriptor, TensorDescriptor
from lapis.libs.dnn.dropout import dropout_backward, dropout_forward, dropout_kernel, uniform
from lapis.libs.dnn.handle import ROW_THREADS, THREADS, Handle, create, row_threads
from lapis.libs.dnn.loss import (
    REDUCTIONS,
    nll_backward_kernel,
    nll_forward_kernel,
    nll_loss_backward,
    nll_loss_forward,
)
from lapis.libs.dnn.normalization import (
    batch_norm_backward,
    batch_norm_backward_kernel,
    batch_norm_forward,
    batch_norm_forward_kernel,
    layer_norm_backward,
    layer_norm_backward_kernel,
    layer_norm_forward,
    layer_norm_forward_kernel,
    layer_norm_params_backward_kernel,
)
from lapis.libs.dnn.pooling import (
    POOL_MAX_GRID_Y,
    pooling_backward,
    pooling_backward_kernel,
    pooling_forward,
    pooling_forward_kernel,
    pooling_output,
    split_index,
)

__all__ = [
    "ACTIVATION_KERNELS", "ACTIVATIONS", "CONV_ALGORITHMS", "CONV_BACKWARD_DATA_ALGORITHMS",
    "CONV_BACKWARD_FILTER_ALGORITHMS", "CONV_DIRECTIONS", "CONV_FORWARD_ALGORITHMS", "CONV_GEMM_KERNELS",
    "CONV_MICRO_ROWS", "KEY_TILE", "POOL_MAX_GRID_Y", "MAX_HEAD_DIM", "QUERY_TILE", "ROW_THREADS",
    "SPLIT_K_MIN_DEPTH", "SPLIT_K_TARGET_BLOCKS", "THREADS", "ConvGeometry", "ConvolutionDescriptor", "DnnError",
    "FilterDescriptor", "Handle", "TensorDescriptor", "WARP_ROW_COLS", "WARP_ROWS_THREADS", "activate",
    "activation_backward", "activation_forward", "advance_digits", "attention_backward", "attention_delta_kernel",
    "attention_dkv_kernel", "attention_dq_kernel", "attention_forward", "attention_forward_kernel",
    "batch_norm_backward", "batch_norm_backward_kernel", "batch_norm_forward", "batch_norm_forward_kernel",
    "conv_backward_data_kernel", "conv_backward_filter_kernel", "conv_col2im_kernel", "conv_direct_kernel",
    "conv_im2col_kernel", "convolution_backward_data", "convolution_backward_filter", "convolution_forward",
    "convolution_output", "convolution_workspace_size", "create", "dropout_backward", "dropout_forward",
    "dropout_kernel", "find_convolution_backward_data_algorithm", "find_convolution_backward_filter_algorithm",
    "find_convolution_forward_algorithm", "get_convolution_algorithm", "lanes_kernels", "layer_norm_backward",
    "layer_norm_backward_kernel", "layer_norm_forward", "layer_norm_forward_kernel",
    "layer_norm_params_backward_kernel", "make_activation_kernel", "make_conv_gemm_kernel", "nll_backward_kernel",
    "nll_forward_kernel", "nll_loss_backward", "nll_loss_forward", "REDUCTIONS", "pooling_backward",
    "pooling_backward_kernel", "pooling_forward", "pooling_forward_kernel", "pooling_output", "row_start",
    "row_threads", "softmax_backward", "softmax_backward_kernel", "softmax_forward", "softmax_forward_kernel",
    "softmax_warp_backward_kernel", "softmax_warp_forward_kernel", "split_index", "uniform", "warp_row",
]

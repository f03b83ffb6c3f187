"""Layer 5: the framework's ops by family, each a `lapis.framework.autograd.Function` (or a composition of them)
with forward and backward side by side:

    elementwise.py   one table of elementwise ops (cpu reference, device function, gradient, dtype rule);
                     casts and moves, where, clamp, the logical operators
    reductions.py    sum, prod, max/min, argmax, mean, var, std, logsumexp
    views.py         view/reshape, permute, expand, basic indexing, split; cat and stack
    indexing.py      masks and index tensors, index assignment, gather/scatter_add, index_select, triangles
    inplace.py       in-place ops and torch's history rewrite; SetRegion
    nn.py            softmax, gelu/silu, conv2d, pooling, batch and layer norm, attention (fused kernels)
    linalg.py        matmul, mm, bmm

An op reads and writes tensors through `TensorBase` and calls other ops through the tensors' methods, so no op
module imports the `Tensor` class that is made from them (tensor.py).
"""

"""Layer 4, `lapis.libs`: math libraries of tuned kernels (cuBLAS, cuDNN, cuSPARSE, cuSOLVER of the stack).

Owns: `blas` (gemm family, gemv and level 1, with cuBLAS conventions and an autotuner),
`dnn` (cuDNN-style forward and backward primitives), `sparse` (CSR/COO products),
`solver` (LU, Cholesky, QR), `kernels` (the elementwise kernels the framework needs, as
ATen ships them outside the vendor libraries) and `optimizers` (fused optimizer steps); `handle` is
what their handles share (an API, a device, a stream, their kernels' dispatchers) and `reduction` the
block reductions their kernels share. Every routine is a kernel written in the lapis kernel language
and launched through `lapis.cuda`/`lapis.hip`.
"""

"""Layer 4, `lapis.libs`: math libraries of tuned kernels (cuBLAS / rocBLAS of the stack).

Owns: `blas` (gemm with cuBLAS conventions) and `kernels` (the elementwise kernels the
framework needs, as ATen ships them outside the vendor libraries). Every routine is a
kernel written in the lapis kernel language and launched through `lapis.cuda`/`lapis.hip`.
"""

// lapis: what a CUDA C++ kernel needs of <stdio.h> under NVRTC, which ships no C library headers: printf is
// NVRTC's own (device printf), so there is nothing to declare. The host parts of stdio are not for kernels.
#pragma once

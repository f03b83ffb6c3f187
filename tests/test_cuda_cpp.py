"""CUDA C++ kernels: NVRTC compiles them to PTX, lapis's PTX assembler translates the PTX into its IR and
back end, and they run on the simulated GPU like any kernel (`lapis.cuda.RawKernel`, CuPy's interface).
Every kernel here is checked against numpy."""

import ml_dtypes
import numpy as np
import pytest

from lapis import cuda
from lapis.cuda.compiler import CompileError

KERNELS = r"""
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}

extern "C" __global__ void block_sum(const float* x, float* out, int n) {
    extern __shared__ float partial[];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    partial[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) partial[t] += partial[t + k];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, partial[0]);
}

extern "C" __global__ void warp_sum(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}

template <int PAD>
__device__ void transpose_tile(const float* in, float* out, int w, int h) {
    __shared__ float tile[32][32 + PAD];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    if (x < w && y < h) tile[threadIdx.y][threadIdx.x] = in[y * w + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    if (x < h && y < w) out[y * h + x] = tile[threadIdx.x][threadIdx.y];
}
extern "C" __global__ void transpose_padded(const float* in, float* out, int w, int h) {
    transpose_tile<1>(in, out, w, h);
}
extern "C" __global__ void transpose_naive(const float* in, float* out, int w, int h) {
    transpose_tile<0>(in, out, w, h);
}

extern "C" __global__ void histogram(const unsigned char* in, unsigned int* bins, int n) {
    __shared__ unsigned int local[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) local[i] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[in[i]], 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) atomicAdd(&bins[i], local[i]);
}

extern "C" __global__ void softmax_rows(const float* x, float* y, int cols) {
    __shared__ float across[256];
    const float* row = x + blockIdx.x * cols;
    float* out = y + blockIdx.x * cols;
    int t = threadIdx.x;
    float m = -__int_as_float(0x7f800000);
    for (int c = t; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    across[t] = m;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) across[t] = fmaxf(across[t], across[t + k]);
        __syncthreads();
    }
    m = across[0];
    __syncthreads();
    float s = 0;
    for (int c = t; c < cols; c += blockDim.x) s += expf(row[c] - m);
    across[t] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) across[t] += across[t + k];
        __syncthreads();
    }
    s = across[0];
    for (int c = t; c < cols; c += blockDim.x) out[c] = expf(row[c] - m) / s;
}

#define TILE 16
extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ak = t * TILE + threadIdx.x, bk = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = row < M && ak < K ? A[row * K + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = bk < K && col < N ? B[bk * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" __global__ void inclusive_scan(const int* in, int* out, int n) {
    __shared__ int buf[2][256];
    int t = threadIdx.x, src = 0;
    buf[0][t] = t < n ? in[t] : 0;
    __syncthreads();
    for (int offset = 1; offset < blockDim.x; offset *= 2) {
        int v = buf[src][t];
        if (t >= offset) v += buf[src][t - offset];
        buf[1 - src][t] = v;
        src = 1 - src;
        __syncthreads();
    }
    if (t < n) out[t] = buf[src][t];
}

extern "C" __global__ void integer_ops(const int* a, const int* b, int* q, int* r, unsigned* u, long long* w, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    q[i] = a[i] / b[i];
    r[i] = a[i] % b[i];
    u[i] = (unsigned)a[i] >> 3 | ((unsigned)a[i] < (unsigned)b[i]);
    w[i] = (long long)a[i] * b[i] + (a[i] >> 2);
}

extern "C" __global__ void double_ops(const double* x, double* y, float* z, int* k, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] * x[i] / 3.0 - x[i];
        z[i] = (float)x[i];
        k[i] = (int)x[i];
    }
}

extern "C" __global__ void comparisons(const float* a, const float* b, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = a[i], y = b[i];
        out[i] = (x < y) | (x <= y) << 1 | (x > y) << 2 | (x >= y) << 3 | (x == y) << 4 | (x != y) << 5
                 | (!(x < y)) << 6 | (isnan(x)) << 7;
    }
}
"""


@pytest.fixture(scope="module")
def module():
    return cuda.RawModule(KERNELS, options=("-std=c++17",))


def test_vector_add_through_raw_kernel():
    kernel = cuda.RawKernel(KERNELS, "vector_add")
    n = 1000
    a, b = np.random.default_rng(0).standard_normal((2, n)).astype(np.float32)
    c = cuda.device_array(n, np.float32)
    kernel(((n + 127) // 128,), (128,), (cuda.to_device(a), cuda.to_device(b), c, np.int32(n)))
    assert np.array_equal(c.copy_to_host(), a + b)
    assert ".entry vector_add" in kernel.ptx and "FADD" in kernel.inspect_asm()
    assert "registers" in kernel.resources() and kernel.num_regs > 0


def test_grid_stride_saxpy_with_python_numbers(module):
    n = 5000
    x, y = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    d_y = cuda.to_device(y)
    module.get_function("saxpy")((4,), (128,), (2.5, cuda.to_device(x), d_y, n))      # fewer threads than items
    assert np.array_equal(d_y.copy_to_host(), np.float32(2.5) * x + 1)


@pytest.mark.parametrize("kernel", ["block_sum", "warp_sum"])
def test_reductions_in_shared_memory_and_warp_shuffles(module, kernel):
    n = 3000
    x = np.random.default_rng(1).integers(-50, 50, n).astype(np.float32)      # exact sums in any order
    out = cuda.to_device(np.zeros(1, np.float32))
    module.get_function(kernel)(((n + 255) // 256,), (256,), (cuda.to_device(x), out, np.int32(n)),
                                shared_mem=256 * 4)
    assert out.copy_to_host()[0] == x.sum()


@pytest.mark.parametrize("kernel", ["transpose_padded", "transpose_naive"])
def test_transpose_of_a_ragged_matrix(module, kernel):
    h, w = 70, 45
    a = np.random.default_rng(2).standard_normal((h, w)).astype(np.float32)
    out = cuda.device_array((w, h), np.float32)
    module.get_function(kernel)(((w + 31) // 32, (h + 31) // 32), (32, 32), (cuda.to_device(a), out, w, h))
    assert np.array_equal(out.copy_to_host(), a.T)


def test_shared_atomic_histogram_of_bytes(module):
    data = np.random.default_rng(3).integers(0, 256, 20000).astype(np.uint8)
    bins = cuda.to_device(np.zeros(256, np.uint32))
    module.get_function("histogram")((8,), (128,), (cuda.to_device(data), bins, data.size))
    assert np.array_equal(bins.copy_to_host(), np.bincount(data, minlength=256))


def test_row_softmax_with_expf_and_division(module):
    x = np.random.default_rng(4).standard_normal((6, 300)).astype(np.float32) * 4
    out = cuda.device_array_like(x)
    module.get_function("softmax_rows")((6,), (64,), (cuda.to_device(x), out, 300))
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(out.copy_to_host(), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-9)


def test_tiled_matmul_against_numpy(module):
    m, n, k = 50, 37, 70
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    c = cuda.device_array((m, n), np.float32)
    module.get_function("matmul_tiled")(((n + 15) // 16, (m + 15) // 16), (16, 16),
                                        (cuda.to_device(a), cuda.to_device(b), c, m, n, k))
    np.testing.assert_allclose(c.copy_to_host(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_inclusive_scan_in_one_block(module):
    x = np.random.default_rng(6).integers(-100, 100, 200).astype(np.int32)
    out = cuda.device_array(200, np.int32)
    module.get_function("inclusive_scan")((1,), (256,), (cuda.to_device(x), out, 200))
    assert np.array_equal(out.copy_to_host(), np.cumsum(x))


def test_integer_division_truncates_toward_zero_as_c_does(module):
    rng = np.random.default_rng(7)
    n = 500
    a = rng.integers(-2**31, 2**31, n).astype(np.int32)
    b = rng.integers(-1000, 1000, n).astype(np.int32)
    b[b == 0] = 7
    outs = [cuda.device_array(n, t) for t in (np.int32, np.int32, np.uint32, np.int64)]
    module.get_function("integer_ops")((4,), (128,), (cuda.to_device(a), cuda.to_device(b), *outs, n))
    q, r, u, w = (o.copy_to_host() for o in outs)
    want_q = (np.abs(a.astype(np.int64)) // np.abs(b) * np.sign(a) * np.sign(b)).astype(np.int32)
    assert np.array_equal(q, want_q) and np.array_equal(r, a - want_q * b)
    ua, ub = a.view(np.uint32), b.view(np.uint32)
    assert np.array_equal(u, (ua >> 3) | (ua < ub).astype(np.uint32))
    assert np.array_equal(w, a.astype(np.int64) * b + (a >> 2))


def test_float64_and_conversions(module):
    x = np.random.default_rng(8).standard_normal(300) * 1e3
    y, z, k = cuda.device_array(300, np.float64), cuda.device_array(300, np.float32), cuda.device_array(300, np.int32)
    module.get_function("double_ops")((3,), (128,), (cuda.to_device(x), y, z, k, 300))
    assert np.array_equal(y.copy_to_host(), x * x / 3.0 - x)
    assert np.array_equal(z.copy_to_host(), x.astype(np.float32))
    assert np.array_equal(k.copy_to_host(), np.trunc(x).astype(np.int32))


def test_float_comparisons_follow_ieee_with_nan(module):
    values = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan], np.float32)
    a, b = (g.ravel() for g in np.meshgrid(values, values))
    out = cuda.device_array(a.size, np.int32)
    module.get_function("comparisons")((1,), (64,), (cuda.to_device(a), cuda.to_device(b), out, a.size))
    with np.errstate(invalid="ignore"):
        want = sum(c.astype(np.int32) << bit for bit, c in enumerate(
            [a < b, a <= b, a > b, a >= b, a == b, a != b, ~(a < b), np.isnan(a)]))
    assert np.array_equal(out.copy_to_host(), want)


def test_the_unpadded_transpose_shows_its_bank_conflicts(module):
    """Reading a column of a 32x32 float tile hits one bank 32 times; padding each row by a float spreads it."""
    from lapis import profiler
    a = np.zeros((256, 256), np.float32)
    out = cuda.device_array((256, 256), np.float32)
    conflicts = {}
    for kernel in ("transpose_naive", "transpose_padded"):
        with profiler.profile() as prof:
            module.get_function(kernel)((8, 8), (32, 32), (cuda.to_device(a), out, 256, 256))
            cuda.synchronize()
        (record,) = [k for k in prof.kernels() if k["name"] == kernel]
        conflicts[kernel] = record["bank_conflicts"]
    assert conflicts["transpose_padded"] == 0 and conflicts["transpose_naive"] >= 31 * 64 * 32


def test_a_cuda_error_reports_nvrtc_s_log_with_the_line():
    with pytest.raises(cuda.NvrtcError, match=r"broken\.cu\(3\): error: identifier \"undefined_thing\""):
        cuda.RawModule("extern \"C\" __global__ void k(int* a) {\n"
                       "  int i = threadIdx.x;\n"
                       "  a[i] = undefined_thing;\n}\n", name="broken.cu")


def test_an_unsupported_ptx_instruction_is_named_with_its_line():
    ptx = """
.version 9.5
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{
    .reg .b32 %r<3>;
    mov.u32 %r1, %tid.x;
    nanosleep.u32 %r1;
    ret;
}
"""
    with pytest.raises(CompileError, match=r"k\.ptx:9: the PTX instruction 'nanosleep\.u32' is not supported"):
        cuda.RawModule(ptx=ptx, name="k.ptx").get_function("k").inspect_asm()


def test_arguments_are_checked_against_the_parameters(module):
    x = cuda.to_device(np.zeros(4, np.float32))
    saxpy = module.get_function("saxpy")
    with pytest.raises(TypeError, match="takes 4 arguments, got 3"):
        saxpy((1,), (32,), (1.0, x, x))
    with pytest.raises(cuda.LaunchError, match=r"argument 3 \(4294967296\) does not fit the parameter's 32-bit"):
        saxpy((1,), (32,), (1.0, x, x, 2**32))
    with pytest.raises(cuda.LaunchError, match="argument 0 is a device array, but the parameter is .f32"):
        module.get_function("saxpy")((1,), (32,), (x, x, x, 4))
    with pytest.raises(KeyError, match=r"no kernel .+nope.+ in the module"):
        module.get_function("nope")


@pytest.mark.parametrize("options, where", [
    (("-lineinfo",), r"\S*kernel\.cu:3: a\[i \+ \(1 << 28\)\] = 1\.0f;"),   # the CUDA line, from PTX's .loc
    ((), r"kernel\.ptx:\d+: st\.global\.u32\s+\[%rd\d+\], %r\d+;"),           # else the PTX line
])
def test_a_fault_names_the_source_line(options, where):
    source = ("extern \"C\" __global__ void stray(float* a) {\n"
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    a[i + (1 << 28)] = 1.0f;\n"
              "}\n")
    kernel = cuda.RawKernel(source, "stray", options=options)
    assert ("kernel.cu:3" in kernel.inspect_asm()) == bool(options)          # the listing's source lines too
    with pytest.raises(cuda.KernelFault, match=r"kernel 'stray' faulted .*illegal memory access.* at " + where):
        kernel((1,), (32,), (cuda.device_array(32, np.float32),))
        cuda.synchronize()


MORE = r"""
#include <cuda_fp16.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__constant__ float coefficients[4] = {1.0f, -2.0f, 0.5f, 3.0f};
__device__ unsigned int calls;

extern "C" __global__ void polynomial(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = coefficients[0] + v * (coefficients[1] + v * (coefficients[2] + v * coefficients[3]));
        atomicAdd(&calls, 1u);
    }
}

template <typename T>
__global__ void scale(T* a, T factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= factor;
}

extern "C" __global__ void double_first(const float4* in, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 v = in[i];
        v.x *= 2.0f;
        out[i] = v;
    }
}

extern "C" __global__ void lookup(const int* index, float* out, int n) {
    float table[8];                                  // indexed at run time: local memory
    for (int k = 0; k < 8; ++k) table[k] = k * 1.5f - 2.0f;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = table[index[i] & 7];
}

extern "C" __global__ void halves(const __half* a, const __half2* b, __half* c, __half2* d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = __hfma(a[i], __float2half(3.0f), __float2half(0.25f));
        d[i] = __hmul2(__hadd2(b[i], b[i]), __floats2half2_rn(0.5f, -1.0f));
    }
}

extern "C" __global__ void tile_sum(const float* x, float* out, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int offset = warp.size() / 2; offset > 0; offset /= 2) v += warp.shfl_down(v, offset);
    if (warp.thread_rank() == 0) atomicAdd(out, v);
}

extern "C" __global__ void bits(const unsigned* a, const unsigned* b, unsigned* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned x = a[i], y = b[i];
        out[8 * i + 0] = __umulhi(x, y);
        out[8 * i + 1] = (unsigned)__mulhi((int)x, (int)y);
        out[8 * i + 2] = __popc(x) + 64 * __clz(y);
        out[8 * i + 3] = __brev(x);
        out[8 * i + 4] = (x & y) ^ (~x & (y | 0x0f0f0f0fu));
        out[8 * i + 5] = __byte_perm(x, y, 0x5140);
        out[8 * i + 6] = __funnelshift_l(x, y, i) ^ __funnelshift_r(x, y, i + 3);
        out[8 * i + 7] = __activemask() == 0xffffffffu;
    }
}
"""


@pytest.fixture(scope="module")
def more():
    return cuda.RawModule(MORE, name_expressions=["scale<float>", "scale<double>"])


def test_constant_and_device_variables(more):
    x = np.linspace(-2, 2, 100).astype(np.float32)
    y = cuda.device_array(100, np.float32)
    before = int(more.get_global("calls").view(np.uint32).copy_to_host()[0])
    more.get_function("polynomial")((1,), (128,), (cuda.to_device(x), y, 100))
    c = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    np.testing.assert_allclose(y.copy_to_host(), c[0] + x * (c[1] + x * (c[2] + x * c[3])), rtol=1e-6, atol=1e-6)
    assert more.get_global("calls").view(np.uint32).copy_to_host()[0] == before + 100
    assert np.array_equal(more.get_global("coefficients").view(np.float32).copy_to_host(), c)


@pytest.mark.parametrize("expression, dtype", [("scale<float>", np.float32), ("scale<double>", np.float64)])
def test_templates_through_name_expressions(more, expression, dtype):
    a = cuda.to_device(np.arange(40, dtype=dtype))
    more.get_function(expression)((1,), (64,), (a, 0.5, 40))
    assert np.array_equal(a.copy_to_host(), np.arange(40, dtype=dtype) * dtype(0.5))


def test_float4_loads_and_stores_and_local_arrays(more):
    x = np.random.default_rng(9).standard_normal((50, 4)).astype(np.float32)
    out = cuda.device_array((50, 4), np.float32)
    kernel = more.get_function("double_first")
    kernel((1,), (64,), (cuda.to_device(x), out, 50))
    want = x.copy()
    want[:, 0] *= 2
    assert np.array_equal(out.copy_to_host(), want)
    assert "LDG.E.128" in kernel.inspect_asm()                          # one 16-byte load per float4
    index = np.random.default_rng(10).integers(0, 1000, 70).astype(np.int32)
    looked = cuda.device_array(70, np.float32)
    more.get_function("lookup")((1,), (96,), (cuda.to_device(index), looked, 70))
    assert np.array_equal(looked.copy_to_host(), (index & 7) * np.float32(1.5) - 2)


def test_half_and_half2_arithmetic(more):
    rng = np.random.default_rng(11)
    a = rng.standard_normal(64).astype(np.float16)
    b = rng.standard_normal((64, 2)).astype(np.float16)
    c, d = cuda.device_array(64, np.float16), cuda.device_array((64, 2), np.float16)
    more.get_function("halves")((1,), (64,), (cuda.to_device(a), cuda.to_device(b), c, d, 64))
    wide = a.astype(np.float64) * 3 + 0.25                  # __hfma rounds once
    assert np.array_equal(c.copy_to_host(), wide.astype(np.float16))
    assert np.array_equal(d.copy_to_host(), (b + b) * np.array([0.5, -1.0], np.float16))


def test_cooperative_groups_tile_reduction(more):
    x = np.random.default_rng(12).integers(-9, 9, 1000).astype(np.float32)
    out = cuda.to_device(np.zeros(1, np.float32))
    more.get_function("tile_sum")((4,), (256,), (cuda.to_device(x), out, 1000))
    assert out.copy_to_host()[0] == x.sum()


def test_integer_intrinsics(more):
    rng = np.random.default_rng(13)
    n = 32
    a, b = (rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    out = cuda.device_array(8 * n, np.uint32)
    more.get_function("bits")((1,), (32,), (cuda.to_device(a), cuda.to_device(b), out, n))
    got = out.copy_to_host().reshape(n, 8).astype(np.uint64)
    x, y = a.astype(np.uint64), b.astype(np.uint64)
    i = np.arange(n, dtype=np.uint64)
    mask = np.uint64(0xFFFFFFFF)
    signed = (a.view(np.int32).astype(np.int64) * b.view(np.int32).astype(np.int64)) >> 32
    popc = np.array([bin(v).count("1") for v in a], np.uint64)
    clz = np.array([32 - int(v).bit_length() for v in b], np.uint64)
    brev = np.array([int(f"{v:032b}"[::-1], 2) for v in a], np.uint64)
    both = (y << np.uint64(32)) | x
    left = ((both << (i & np.uint64(31))) >> np.uint64(32)) & mask
    funnel = left ^ ((both >> ((i + np.uint64(3)) & np.uint64(31))) & mask)
    perm = np.zeros(n, np.uint64)
    for k, sel in enumerate((0, 4, 1, 5)):                 # 0x5140: bytes 0, 4, 1, 5 of y:x
        perm |= ((both >> np.uint64(8 * sel)) & np.uint64(0xFF)) << np.uint64(8 * k)
    want = np.stack([(x * y) >> np.uint64(32), signed.astype(np.uint64) & mask, popc + 64 * clz, brev,
                     (x & y) ^ (~x & mask & (y | np.uint64(0x0F0F0F0F))), perm, funnel, np.ones(n, np.uint64)], 1)
    assert np.array_equal(got, want)


LIBC = r"""
#include <cstdio>
#include <cstdint>
#include <cmath>
#include <cassert>
#include <climits>

extern "C" __global__ void report(int n, float x) {
    uint64_t big = (uint64_t)INT_MAX + threadIdx.x;
    printf("thread %d of %d: %.3f %5.2e %x %lu %c|%%\n", threadIdx.x, n, x * threadIdx.x, std::sqrt(2.0), 255u,
           big, 'A' + threadIdx.x);
}

extern "C" __global__ void checked(const int* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) assert(a[i] >= 0);
}
"""


def test_device_printf_prints_as_c_does(capsys):
    module = cuda.RawModule(LIBC)
    module.get_function("report")((1,), (3,), (3, 0.5))
    cuda.synchronize()
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"thread {t} of 3: {0.5 * t:.3f} {2 ** 0.5:5.2e} ff {2**31 - 1 + t} {chr(65 + t)}|%"
                     for t in range(3)]
    cuda.RawKernel('extern "C" __global__ void parts() { printf("<%d>", threadIdx.x); }', "parts")((1,), (3,), ())
    cuda.synchronize()
    assert capsys.readouterr().out == "<0><1><2>"                 # as C's printf: no newline it was not given


def test_assert_stops_the_kernel_naming_its_line():
    module = cuda.RawModule(LIBC, options=("-lineinfo",))
    good = cuda.to_device(np.arange(10, dtype=np.int32))
    module.get_function("checked")((1,), (32,), (good, 10))
    cuda.synchronize()
    bad = cuda.to_device(np.array([1, 2, -3, 4], np.int32))
    with pytest.raises(cuda.KernelFault, match=r"device-side assert triggered .*assertion failed at \S*kernel\.cu:16"):
        module.get_function("checked")((1,), (32,), (bad, 4))
        cuda.synchronize()


def test_atomics_without_an_instruction_loop_on_compare_and_swap():
    """atomicAnd, atomicOr, atomicXor, atomicInc and atomicDec (no ATOMG form): CUDA's results, in global and
    shared memory, with every thread of a block hitting one word."""
    module = cuda.RawModule(r"""
    extern "C" __global__ void bit_atomics(const unsigned* v, unsigned* out, int n) {
        __shared__ unsigned s[2];
        if (threadIdx.x == 0) { s[0] = 0xffffffffu; s[1] = 0; }
        __syncthreads();
        int i = threadIdx.x;
        if (i < n) {
            atomicAnd(&out[0], v[i]);
            atomicOr(&out[1], v[i]);
            atomicXor(&out[2], v[i]);
            atomicInc(&out[3], 9u);
            atomicDec(&out[4], 5u);
            atomicAnd(&s[0], v[i]);
            atomicOr(&s[1], v[i]);
        }
        __syncthreads();
        if (threadIdx.x == 0) { out[5] = s[0]; out[6] = s[1]; }
    }""")
    v = np.random.default_rng(14).integers(0, 2**32, 100, dtype=np.uint64).astype(np.uint32)
    out = cuda.to_device(np.array([0xFFFFFFFF, 0, 0, 0, 3, 0, 0], np.uint32))
    module.get_function("bit_atomics")((1,), (128,), (cuda.to_device(v), out, 100))
    and_, or_, xor = np.bitwise_and.reduce(v), np.bitwise_or.reduce(v), np.bitwise_xor.reduce(v)
    dec = 3
    for _ in range(100):
        dec = 5 if dec == 0 or dec > 5 else dec - 1
    assert out.copy_to_host().tolist() == [and_, or_, xor, 100 % 10, dec, and_, or_]


def test_the_docs_list_every_opcode_the_assembler_translates():
    import pathlib
    import re

    from lapis.cuda.compiler.ptx import OPCODES
    page = (pathlib.Path(__file__).parent.parent / "docs" / "cuda-cpp.md").read_text()
    listed = re.search(r"<!--opcodes-->(.*?)<!--/opcodes-->", page, re.S).group(1)
    assert re.findall(r"`(\w+)`", listed) == sorted(OPCODES)


WMMA = r"""
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using namespace nvcuda;

template <typename T>
__global__ void wmma_gemm(const T* a, const T* b, float* c, int M, int N, int K) {
    // one warp per 16x16 tile of C: A row-major (M x K), B column-major (stored as N rows of K)
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, c + blockIdx.y * 16 * N + blockIdx.x * 16, N, wmma::mem_row_major);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(fa, a + blockIdx.y * 16 * K + k, K);
        wmma::load_matrix_sync(fb, b + blockIdx.x * 16 * K + k, K);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + blockIdx.y * 16 * N + blockIdx.x * 16, acc, N, wmma::mem_row_major);
}

extern "C" __global__ void mma_tile(const unsigned* a, const unsigned* b, float* d) {
    int l = threadIdx.x;
    float d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(a[4 * l]), "r"(a[4 * l + 1]), "r"(a[4 * l + 2]), "r"(a[4 * l + 3]), "r"(b[2 * l]),
                   "r"(b[2 * l + 1]), "f"(1.0f), "f"(1.0f), "f"(1.0f), "f"(1.0f));
    d[4 * l] = d0; d[4 * l + 1] = d1; d[4 * l + 2] = d2; d[4 * l + 3] = d3;
}
"""


@pytest.mark.parametrize("dtype, cxx", [(np.float16, "__half"), (ml_dtypes.bfloat16, "__nv_bfloat16")])
def test_wmma_gemm_on_the_matrix_unit(dtype, cxx):
    module = cuda.RawModule(WMMA, name_expressions=[f"wmma_gemm<{cxx}>"])
    kernel = module.get_function(f"wmma_gemm<{cxx}>")
    rng = np.random.default_rng(15)
    m, n, k = 32, 48, 64
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    c = cuda.to_device(c0)
    kernel((n // 16, m // 16), (32,), (cuda.to_device(a), cuda.to_device(b), c, m, n, k))
    want = c0 + a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c.copy_to_host(), want, rtol=1e-5, atol=1e-4)
    assert kernel.inspect_asm().count("HMMA.16816") >= 2            # two m16n8k16 per 16x16x16 step


def test_mma_sync_takes_ptx_s_fragment_layout():
    """Inline PTX mma.sync.m16n8k16: each lane's registers hold the A, B and C elements PTX's ISA assigns it."""
    module = cuda.RawModule(WMMA)
    rng = np.random.default_rng(16)
    a, b = rng.standard_normal((16, 16)).astype(ml_dtypes.bfloat16), rng.standard_normal((16, 8)).astype(
        ml_dtypes.bfloat16)
    lane = np.arange(32)[:, None, None]
    g, t = lane >> 2, lane & 3
    r4, r2, h = np.arange(4)[None, :, None], np.arange(2)[None, :, None], np.arange(2)[None, None, :]
    a_words = a.ravel()[(g + 8 * (r4 & 1)) * 16 + 2 * t + 8 * (r4 >> 1) + h].view(np.uint32)
    b_words = b.ravel()[(2 * t + 8 * r2 + h) * 8 + g].view(np.uint32)
    out = cuda.device_array(128, np.float32)
    module.get_function("mma_tile")((1,), (32,), (cuda.to_device(a_words.ravel()), cuda.to_device(b_words.ravel()),
                                                  out))
    d = np.empty(128, np.float32)
    d[((g + 8 * (r4 >> 1)) * 8 + 2 * t + (r4 & 1))[:, :, 0].ravel()] = out.copy_to_host()
    np.testing.assert_allclose(d.reshape(16, 8), 1 + a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


def test_structs_by_value_and_registers_an_inline_asm_block_declares():
    module = cuda.RawModule(r"""
    struct Affine { float scale; float shift; int limit; };
    extern "C" __global__ void affine(Affine f, float* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        unsigned over;
        asm("{ .reg .pred big; setp.gt.s32 big, %1, %2; selp.u32 %0, 1, 0, big; }" : "=r"(over) : "r"(i), "r"(f.limit));
        if (i < n) x[i] = over ? -1.0f : x[i] * f.scale + f.shift;
    }""")
    affine = np.dtype([("scale", np.float32), ("shift", np.float32), ("limit", np.int32)])
    x = cuda.to_device(np.arange(8, dtype=np.float32))
    module.get_function("affine")((1,), (32,), (np.array((2.0, 0.5, 5), affine), x, 8))
    assert x.copy_to_host().tolist() == [0.5, 2.5, 4.5, 6.5, 8.5, 10.5, -1.0, -1.0]


def test_warp_and_block_collectives_and_special_registers():
    """__syncthreads_count/_and/_or (bar.red), __reduce_add_sync and friends (redux.sync), __match_any_sync and
    __match_all_sync (match.sync), %lanemask_lt, %smid, and 64-bit division by a constant (mul.hi.u64)."""
    module = cuda.RawModule(r"""
    extern "C" __global__ void collectives(const int* x, int* out, unsigned long long* big) {
        extern __shared__ int scratch[];
        int t = threadIdx.x, v = x[t];
        scratch[t] = v;
        int count = __syncthreads_count(v > 0);
        int all = __syncthreads_and(v > -100), any = __syncthreads_or(v > 90);
        unsigned lt;
        asm("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
        out[8 * t + 0] = count + 1000 * all + 10000 * any;
        out[8 * t + 1] = __reduce_add_sync(0xffffffffu, v);
        out[8 * t + 2] = __reduce_max_sync(0xffffffffu, v);
        out[8 * t + 3] = (int)__reduce_or_sync(0xffffffffu, (unsigned)v & 0xffu);
        out[8 * t + 4] = (int)__match_any_sync(0xffffffffu, v % 3);
        int pred;
        out[8 * t + 5] = (int)__match_all_sync(0xffffffffu, v & 0, &pred) + pred;
        out[8 * t + 6] = (int)lt + scratch[blockDim.x - 1 - t] * 0;
        unsigned long long n = 0xfedcba9876543210ull + (unsigned long long)t * 977;
        big[2 * t] = n / 7;
        big[2 * t + 1] = (unsigned long long)((long long)(n >> 1) * -1 / 13);
        unsigned sm;
        asm("mov.u32 %0, %%smid;" : "=r"(sm));
        out[8 * t + 7] = sm < 1000;
    }""")
    x = np.random.default_rng(17).integers(-50, 100, 64).astype(np.int32)
    out, big = cuda.device_array(64 * 8, np.int32), cuda.device_array(128, np.uint64)
    module.get_function("collectives")((1,), (64,), (cuda.to_device(x), out, big), shared_mem=64 * 4)
    got = out.copy_to_host().reshape(64, 8)
    lanes = np.arange(64) % 32
    warps = x.reshape(2, 32)
    block = (x > 0).sum() + 1000 * (x > -100).all() + 10000 * (x > 90).any()
    assert (got[:, 0] == block).all()
    assert np.array_equal(got[:, 1], np.repeat(warps.sum(1), 32))
    assert np.array_equal(got[:, 2], np.repeat(warps.max(1), 32))
    assert np.array_equal(got[:, 3], np.repeat(np.bitwise_or.reduce(warps & 0xFF, axis=1), 32))
    rem = np.fmod(x, 3).reshape(2, 32)
    any_mask = [sum(1 << j for j in range(32) if rem[w, j] == rem[w, i]) for w in range(2) for i in range(32)]
    assert np.array_equal(got[:, 4].view(np.uint32), np.array(any_mask, np.uint32))
    assert (got[:, 5] == -1 + 1).all()                              # all lanes equal: mask 0xffffffff, pred 1
    assert np.array_equal(got[:, 6].view(np.uint32), ((1 << lanes) - 1).astype(np.uint32))
    assert (got[:, 7] == 1).all()
    t = np.arange(64, dtype=object)
    n = 0xFEDCBA9876543210 + t * 977
    want = [[int(v) // 7, (-(int(v) >> 1) // 13 if -(int(v) >> 1) >= 0 else -((int(v) >> 1) // 13)) % 2**64]
            for v in n]
    assert big.copy_to_host().reshape(64, 2).tolist() == want


def test_double_square_root_is_correctly_rounded():
    module = cuda.RawModule(r"""
    #include <cmath>
    extern "C" __global__ void roots(const double* x, double* y, double* r, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) { y[i] = sqrt(x[i]); r[i] = rsqrt(x[i]); }
    }""")
    rng = np.random.default_rng(18)
    x = np.concatenate([rng.uniform(0, 10, 500), 10.0 ** rng.uniform(-320, 308, 1500),
                        [0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 5e-324, 1.7e308, 4.0, 2.0]])
    y, r = cuda.device_array(x.size, np.float64), cuda.device_array(x.size, np.float64)
    module.get_function("roots")(((x.size + 127) // 128,), (128,), (cuda.to_device(x), y, r, x.size))
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.sqrt(x)
        rwant = 1 / np.sqrt(x)
    got = y.copy_to_host()
    number = ~np.isnan(want)
    assert np.array_equal(np.isnan(got), ~number) and np.array_equal(got[number].view(np.uint64),
                                                                      want[number].view(np.uint64))
    np.testing.assert_allclose(r.copy_to_host(), rwant, rtol=2e-16)


WARPS = r"""
extern "C" __global__ void segments(const int* a, int* out, int width) {
    int t = threadIdx.x, v = a[t];
    out[8 * t + 0] = __shfl_up_sync(~0u, v, 1, width);                 // width known at run time
    out[8 * t + 1] = __shfl_xor_sync(~0u, v, 1, 16);
    out[8 * t + 2] = __shfl_down_sync(~0u, v, 3, 8);
    out[8 * t + 3] = __shfl_sync(~0u, v, 5, 16);
    int s = v;                                                            // the clamp in a register, across loops
    for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(~0u, s, o);
    for (int i = 0; i < (t & 3); i++) s += a[i];
    for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(~0u, s, o);
    out[8 * t + 4] = s;
    out[8 * t + 5] = -1;
    if (t < 8) out[8 * t + 5] = __reduce_add_sync(0xffu, v);            // part of the warp
    else if (t >= 20) out[8 * t + 5] = __reduce_max_sync(0xfff00000u, v);
    out[8 * t + 6] = t % warpSize;                                       // WARP_SZ
    __syncwarp();
    __shared__ int s2[256];
    s2[t] = v; s2[t + 32] = v; s2[t + 64] = v; s2[t + 96] = v;
    __syncthreads();
    int sum = 0;
    for (int i = 0; i < 4; i++) sum += s2[t + i * 32];                   // [r+-N] addresses
    out[8 * t + 7] = sum;
}
"""


def test_sub_warp_shuffles_partial_reductions_and_the_warp_size():
    """__shfl*_sync with a width (PTX's segment clamp, constant or not), a full-warp clamp held in a register,
    __reduce_*_sync over part of a warp, warpSize (WARP_SZ), __syncwarp, and negative address offsets."""
    a = np.random.default_rng(19).integers(-100, 100, 32).astype(np.int32)
    out = cuda.device_array(32 * 8, np.int32)
    cuda.RawModule(WARPS).get_function("segments")((1,), (32,), (cuda.to_device(a), out, 4))
    got = out.copy_to_host().reshape(32, 8)
    t = np.arange(32)

    def shuffled(source, valid):
        return np.where(valid, a[np.clip(source, 0, 31)], a)

    def down(x, offset):
        return np.where(t + offset < 32, x[np.minimum(t + offset, 31)], x)
    s = a.copy()
    for offset in (16, 8, 4, 2, 1):
        s = s + down(s, offset)
    s = s + np.array([a[:lane & 3].sum() for lane in range(32)])
    for offset in (16, 8, 4, 2, 1):
        s = s + down(s, offset)
    partial = np.full(32, -1)
    partial[:8], partial[20:] = a[:8].sum(), a[20:].max()
    want = np.stack([shuffled(t - 1, t - 1 >= (t & ~3)), a[t ^ 1], shuffled(t + 3, t + 3 <= ((t & ~7) | 7)),
                     a[(t & ~15) | 5], s, partial, t % 32, 4 * a], 1)
    assert np.array_equal(got, want)


def test_crowded_atomics_run_as_one_instruction_each():
    """atomicInc, atomicDec and atomicOr are ATOMG.INC/.DEC/.OR (a compare-and-swap loop took minutes with every
    thread of a large grid on one word); atomicMin/Max of long long, which the ISA's unsigned 64-bit MIN/MAX
    cannot do, stay a compare-and-swap loop."""
    module = cuda.RawModule(r"""
    extern "C" __global__ void crowd(unsigned* c, long long* m, const long long* v) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        atomicInc(&c[0], 1000u); atomicDec(&c[1], 7u); atomicOr(&c[2], 1u << (i & 31));
        atomicMin(&m[0], v[i]); atomicMax(&m[1], v[i]);
    }""")
    n = 8 * 256
    v = np.random.default_rng(20).integers(-2**62, 2**62, n)
    counts, extremes = cuda.to_device(np.zeros(3, np.uint32)), cuda.to_device(np.array([2**62, -2**62], np.int64))
    kernel = module.get_function("crowd")
    kernel((8,), (256,), (counts, extremes, cuda.to_device(v)))
    inc = dec = 0
    for _ in range(n):
        inc = 0 if inc >= 1000 else inc + 1
        dec = 7 if dec == 0 or dec > 7 else dec - 1
    assert counts.copy_to_host().tolist() == [inc, dec, 0xFFFFFFFF]
    assert extremes.copy_to_host().tolist() == [min(v.min(), 2**62), max(v.max(), -2**62)]
    listing = kernel.inspect_asm()
    assert all(f"ATOMG.{op}.U32" in listing for op in ("INC", "DEC", "OR")) and "ATOMG.CAS.U64" in listing


def test_device_functions_the_compiler_did_not_inline_are_inlined_by_the_assembler():
    module = cuda.RawModule(r"""
    __device__ __noinline__ float scale(float x, int k) {
        if (x > 0) return x * k;                    // a branch, two returns
        return -x;
    }
    __device__ __noinline__ float twice(float x) { return scale(x, 2) + scale(-x, 1); }     // a call in a call
    __device__ __noinline__ void store(float* p, float v) { *p = v; }                        // nothing returned
    __device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
    extern "C" __global__ void calls(float* a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) store(&a[i], scale(a[i], 3) + twice((float)i));
    }
    extern "C" __global__ void recursive(int* a) { a[0] = fib(a[0]); }
    """)
    a = np.array([1.5, -2.0, 3.0, -0.5, 0.0], np.float32)
    d = cuda.to_device(a)
    kernel = module.get_function("calls")
    kernel((1,), (32,), (d, a.size))
    i = np.arange(a.size, dtype=np.float32)
    assert np.array_equal(d.copy_to_host(), np.where(a > 0, a * 3, -a) + 2 * i + i)
    assert "CALL" not in kernel.inspect_asm()
    with pytest.raises(CompileError, match="a recursive call to '_Z3fibi' is not supported"):
        module.get_function("recursive").inspect_asm()


def test_more_live_conditions_than_predicate_registers_are_kept_in_words():
    """PTX may keep any number of predicates live; the ISA has seven. A kernel that keeps nine across a loop is
    compiled again with its predicates in 32-bit words (0 or 1, tested where used), as ptxas spills them."""
    sets = "\n".join(f"    setp.gt.s32 %p{k}, %r1, {k};" for k in range(1, 10))
    uses = "\n".join(f"    selp.u32 %r4, {2 ** k}, 0, %p{k};\n    add.s32 %r2, %r2, %r4;" for k in range(1, 10))
    ptx = f"""
.version 9.5
.target sm_90
.address_size 64
.visible .entry many(.param .u64 many_param_0)
{{
    .reg .pred %p<10>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [many_param_0];
    mov.u32 %r1, %tid.x;
{sets}
    mov.u32 %r2, 0;
    mov.u32 %r3, 0;
$L__loop:
    add.s32 %r2, %r2, %r3;
    add.s32 %r3, %r3, 1;
    setp.lt.s32 %p0, %r3, 5;
    @%p0 bra $L__loop;
{uses}
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    ret;
}}
"""
    with pytest.raises(CompileError, match="more than 7 live predicates"):       # what the words spare it
        from lapis.cuda.compiler import compile_function
        from lapis.cuda.compiler.ptx import build_ir
        from lapis.cuda.compiler.ptx_parse import parse
        compile_function(build_ir(parse(ptx, "many.ptx"), "many", "many.ptx"), ("u64",))
    out = cuda.device_array(32, np.uint32)
    cuda.RawModule(ptx=ptx, name="many.ptx").get_function("many")((1,), (32,), (out,))
    t = np.arange(32)
    assert np.array_equal(out.copy_to_host(), 10 + sum((t > k) * 2**k for k in range(1, 10)))


@pytest.mark.parametrize("api", ["cuda", "hip"])
def test_the_kernels_run_on_both_profiles_from_one_ptx(module, api):
    """NVRTC's PTX of the kernels that do not depend on the warp's width, on the h200 (lapis.cuda) and on the
    mi300x (lapis.hip, 64-lane waves), against numpy."""
    from lapis import hip
    where = module if api == "cuda" else hip.RawModule(ptx=module.ptx)
    api_module = cuda if api == "cuda" else hip
    rng = np.random.default_rng(21)
    n = 777
    a, b = rng.standard_normal((2, n)).astype(np.float32)
    c = api_module.device_array(n, np.float32)
    where.get_function("vector_add")(((n + 127) // 128,), (128,), (api_module.to_device(a), api_module.to_device(b),
                                                                   c, n))
    assert np.array_equal(c.copy_to_host(), a + b)
    total = api_module.to_device(np.zeros(1, np.float32))
    ints = rng.integers(-50, 50, n).astype(np.float32)
    where.get_function("block_sum")(((n + 255) // 256,), (256,), (api_module.to_device(ints), total, n),
                                    shared_mem=256 * 4)
    assert total.copy_to_host()[0] == ints.sum()
    data = rng.integers(0, 256, 5000).astype(np.uint8)
    bins = api_module.to_device(np.zeros(256, np.uint32))
    where.get_function("histogram")((4,), (128,), (api_module.to_device(data), bins, data.size))
    assert np.array_equal(bins.copy_to_host(), np.bincount(data, minlength=256))
    m_, k_, n_ = 40, 48, 24
    x, y = rng.standard_normal((m_, k_)).astype(np.float32), rng.standard_normal((k_, n_)).astype(np.float32)
    z = api_module.device_array((m_, n_), np.float32)
    where.get_function("matmul_tiled")(((n_ + 15) // 16, (m_ + 15) // 16), (16, 16),
                                       (api_module.to_device(x), api_module.to_device(y), z, m_, n_, k_))
    np.testing.assert_allclose(z.copy_to_host(), x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)


def test_the_kernels_run_through_the_driver_api(module):
    """The same PTX through cuda-python's driver API: cuModuleLoadData, cuLaunchKernel with a void* array."""
    from lapis.cuda.bindings import driver

    def ok(result):
        err, *rest = result
        assert err == driver.CUresult.CUDA_SUCCESS, driver.cuGetErrorString(err)
        return rest[0] if len(rest) == 1 else None
    ok(driver.cuInit(0))
    context = ok(driver.cuCtxCreate(None, 0, ok(driver.cuDeviceGet(0))))
    loaded = ok(driver.cuModuleLoadData(module.ptx.encode()))
    scan = ok(driver.cuModuleGetFunction(loaded, b"inclusive_scan"))
    values = np.random.default_rng(22).integers(-9, 9, 200).astype(np.int32)
    d_in, d_out = ok(driver.cuMemAlloc(values.nbytes)), ok(driver.cuMemAlloc(values.nbytes))
    ok(driver.cuMemcpyHtoD(d_in, values.ctypes.data, values.nbytes))
    args = [np.array([int(d_in)], np.uint64), np.array([int(d_out)], np.uint64), np.array([200], np.int32)]
    params = np.array([arg.ctypes.data for arg in args], np.uint64)
    ok(driver.cuLaunchKernel(scan, 1, 1, 1, 256, 1, 1, 0, 0, params.ctypes.data, 0))
    ok(driver.cuCtxSynchronize())
    out = np.empty_like(values)
    ok(driver.cuMemcpyDtoH(out.ctypes.data, d_out, out.nbytes))
    assert np.array_equal(out, np.cumsum(values))
    for pointer in (d_in, d_out):
        ok(driver.cuMemFree(pointer))
    ok(driver.cuModuleUnload(loaded))
    ok(driver.cuCtxDestroy(context))


def test_a_raw_kernel_takes_framework_tensors_by_their_cuda_array_interface():
    """A lapis tensor on the GPU (its __cuda_array_interface__, as a torch tensor gives CuPy) and a device array:
    the kernel works on their memory, views included; data_ptr() is torch's."""
    import lapis
    kernel = cuda.RawKernel(KERNELS, "saxpy")
    x = lapis.arange(12.0, device="cuda").reshape(3, 4)
    y = lapis.ones(3, 4, device="cuda")
    row = y[1]                                                       # a view: its own address, 4 floats in
    assert row.data_ptr() == y.data_ptr() + 4 * 4
    assert x.__cuda_array_interface__["shape"] == (3, 4) and x.__cuda_array_interface__["typestr"] == "<f4"
    kernel((1,), (32,), (np.float32(2.0), x[1], row, 4))
    assert y.cpu().tolist() == [[1.0] * 4, [9.0, 11.0, 13.0, 15.0], [1.0] * 4]
    assert not hasattr(lapis.ones(2), "__cuda_array_interface__")          # a cpu tensor has none, as torch's
    with pytest.raises(cuda.LaunchError, match="argument 1 is a Tensor; pass device arrays and numbers"):
        kernel((1,), (32,), (np.float32(2.0), lapis.ones(4), row, 4))
    d = cuda.device_array((2, 3), np.float32)
    assert d.__cuda_array_interface__ == {"shape": (2, 3), "strides": None, "data": (d.ptr, False), "typestr": "<f4",
                                          "version": 3}


def test_ldmatrix_loads_mma_fragments_from_shared_memory():
    """ldmatrix.x4 (and .trans): lane l gives row l % 8 of matrix l / 8; lane (g, t) gets row g's elements 2t and
    2t + 1 of each matrix (transposed: column g's of rows 2t and 2t + 1), as PTX's ISA says."""
    module = cuda.RawModule(r"""
    extern "C" __global__ void fragments(const unsigned short* m, unsigned* out) {
        __shared__ unsigned short s[256];
        int l = threadIdx.x;
        for (int i = l; i < 256; i += 32) s[i] = m[i];
        __syncthreads();
        unsigned row = (unsigned)__cvta_generic_to_shared(&s[(l / 8) * 64 + (l % 8) * 8]);
        unsigned r[8];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]) : "r"(row));
        for (int k = 0; k < 8; k++) out[8 * l + k] = r[k];
    }""")
    matrices = np.random.default_rng(23).integers(0, 2**16, 256).astype(np.uint16)
    out = cuda.device_array(256, np.uint32)
    module.get_function("fragments")((1,), (32,), (cuda.to_device(matrices), out))
    m = matrices.reshape(4, 8, 8).astype(np.uint32)
    lane = np.arange(32)
    g, t = lane >> 2, lane & 3
    rows = [m[i, g, 2 * t] | m[i, g, 2 * t + 1] << 16 for i in range(4)]
    columns = [m[i, 2 * t, g] | m[i, 2 * t + 1, g] << 16 for i in range(4)]
    assert np.array_equal(out.copy_to_host().reshape(32, 8), np.stack(rows + columns, 1))


@pytest.mark.parametrize("api", ["cuda", "hip"])
def test_warp_votes_keep_ptx_s_32_lane_warps_on_a_64_lane_wave(api):
    """PTX's warp is 32 lanes: on the mi300x's 64-lane waves each 32 is a warp of its own for __ballot_sync,
    __activemask, __match_any_sync and __reduce_*_sync (lanes 32-63 once got lanes 0-31's ballot)."""
    from lapis import hip
    source = r"""
    extern "C" __global__ void votes(const int* x, unsigned* out) {
        int t = threadIdx.x, v = x[t];
        out[4 * t + 0] = __ballot_sync(0xffffffffu, v > 0);
        out[4 * t + 1] = __activemask();
        out[4 * t + 2] = __match_any_sync(0xffffffffu, v & 3);
        out[4 * t + 3] = (t & 31) < 8 ? __reduce_add_sync(0xffu, v) : 0u;
    }"""
    module = cuda.RawModule(source)
    where, api_module = (module, cuda) if api == "cuda" else (hip.RawModule(ptx=module.ptx), hip)
    x = np.random.default_rng(24).integers(-50, 50, 64).astype(np.int32)
    out = api_module.device_array(256, np.uint32)
    where.get_function("votes")((1,), (64,), (api_module.to_device(x), out))
    got = out.copy_to_host().reshape(64, 4)
    for warp in (0, 1):
        lanes = x[32 * warp:32 * warp + 32]
        ballot = sum(1 << j for j in range(32) if lanes[j] > 0)
        match = [sum(1 << j for j in range(32) if lanes[j] & 3 == lanes[i] & 3) for i in range(32)]
        reduced = [int(lanes[:8].sum()) & 0xFFFFFFFF if i < 8 else 0 for i in range(32)]
        want = np.stack([np.full(32, ballot), np.full(32, 0xFFFFFFFF), match, reduced], 1).astype(np.uint32)
        assert np.array_equal(got[32 * warp:32 * warp + 32], want), (api, warp)


def test_launch_bounds_refuse_a_larger_block():
    """__launch_bounds__(128) (PTX's .maxntid): a block of more threads is refused, as CUDA refuses it."""
    kernel = cuda.RawKernel(r"""
    extern "C" __global__ void __launch_bounds__(128) bounded(int* a) { a[threadIdx.x] = threadIdx.x; }""",
                            "bounded")
    a = cuda.device_array(256, np.int32)
    kernel((1,), (128,), (a,))
    assert np.array_equal(a.copy_to_host()[:128], np.arange(128))
    with pytest.raises(cuda.LaunchError, match="compiled for at most 128 threads a block .* not 256"):
        kernel((1,), (256,), (a,))

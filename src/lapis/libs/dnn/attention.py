"""Layer 4, DNN: scaled dot-product attention, fused in the flash-attention style (cuDNN's fused flash
attention, FlashAttention's forward and backward): each thread owns a query row and walks the keys
in tiles staged in shared memory, keeping a running maximum and sum (online softmax), so the T x T
score matrix is never stored; the backward pass recomputes the probabilities from the saved
log-sum-exp. Head dimensions that are powers of two up to 32 take the "lanes" kernels instead."""

import functools
import math

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, blockIdx, float32, shared, syncthreads, threadIdx
from lapis.libs.dnn.descriptors import DnnError
from lapis.libs.dnn.handle import THREADS, Handle, _ceil_div, _flat

KEY_TILE, QUERY_TILE, MAX_HEAD_DIM = 32, 64, 64


# Every tensor is read as (batch, heads, tokens, d) with its own element strides between batches,
# heads and tokens (`_layout`), its d elements contiguous: a row r = (b * heads + h) * tokens + i of
# the batch-heads' rows starts at b * s_b + h * s_h + i * s_t. So q, k and v may be views into one packed
# projection, and o and the gradients may be laid out (batch, tokens, heads, d), as the framework's
# heads are, with no copy either way (PyTorch's flash attention reads and writes such strides too).
@cuda.jit(device=True)
def row_start(bh, i, heads, s_b, s_h, s_t):
    """Where token i of batch-head bh starts."""
    return bh // heads * s_b + bh % heads * s_h + i * s_t


def attention_forward_kernel(t_q, t_k, d, heads, scale, causal, q, q_b, q_h, q_t, k, k_b, k_h, k_t, v, v_b, v_h,
                             v_t, o, o_b, o_h, o_t, lse):
    # q, o: (BH, Tq, D); k, v: (BH, Tk, D); lse: (BH, Tq). Block: QUERY_TILE rows of one head.
    sk = shared.array((32, 64), np.float32)
    sv = shared.array((32, 64), np.float32)
    acc = cuda.local.array(64, np.float32)
    qi = cuda.local.array(64, np.float32)
    bh, t = blockIdx.y, threadIdx.x
    i = blockIdx.x * 64 + t
    live = i < t_q
    qrow = row_start(bh, i, heads, q_b, q_h, q_t)
    for c in range(d):
        qi[c] = q[qrow + c] * scale if live else 0.0
        acc[c] = 0.0
    kbase, vbase = row_start(bh, 0, heads, k_b, k_h, k_t), row_start(bh, 0, heads, v_b, v_h, v_t)
    m = float32(-math.inf)
    total = float32(0.0)
    for k0 in range(0, t_k, 32):
        for e in range(t, 32 * d, 64):                      # the block stages 32 keys and values
            jj = e // d
            c = e % d
            if k0 + jj < t_k:
                sk[jj, c] = k[kbase + (k0 + jj) * k_t + c]
                sv[jj, c] = v[vbase + (k0 + jj) * v_t + c]
        syncthreads()
        for jj in range(32):
            j = k0 + jj
            if live and j < t_k and (not causal or j <= i):
                score = float32(0.0)
                for c in range(d):
                    score += qi[c] * sk[jj, c]
                new_max = max(m, score)
                correction = math.exp(m - new_max)
                weight = math.exp(score - new_max)
                total = total * correction + weight
                for c in range(d):
                    acc[c] = acc[c] * correction + weight * sv[jj, c]
                m = new_max
        syncthreads()
    if live:
        orow = row_start(bh, i, heads, o_b, o_h, o_t)
        for c in range(d):
            o[orow + c] = acc[c] / total
        lse[bh * t_q + i] = m + math.log(total)


def attention_delta_kernel(rows, t_q, d, heads, o, o_b, o_h, o_t, do, do_b, do_h, do_t, delta):
    # delta_i = sum_c dO[i, c] * O[i, c]
    r = cuda.grid(1)
    if r < rows:
        bh, i = r // t_q, r % t_q
        orow, dorow = row_start(bh, i, heads, o_b, o_h, o_t), row_start(bh, i, heads, do_b, do_h, do_t)
        acc = float32(0.0)
        for c in range(d):
            acc += do[dorow + c] * o[orow + c]
        delta[r] = acc


def attention_dq_kernel(bh_count, t_q, t_k, d, heads, scale, causal, q, q_b, q_h, q_t, k, k_b, k_h, k_t, v, v_b,
                        v_h, v_t, do, do_b, do_h, do_t, lse, delta, dq, dq_b, dq_h, dq_t):
    # One thread per query row: dq_i = scale * sum_j p_ij (dO_i . v_j - delta_i) k_j
    row = cuda.grid(1)
    if row < bh_count * t_q:
        bh = row // t_q
        i = row % t_q
        qrow, dorow = row_start(bh, i, heads, q_b, q_h, q_t), row_start(bh, i, heads, do_b, do_h, do_t)
        dqrow = row_start(bh, i, heads, dq_b, dq_h, dq_t)
        kbase, vbase = row_start(bh, 0, heads, k_b, k_h, k_t), row_start(bh, 0, heads, v_b, v_h, v_t)
        for c in range(d):
            dq[dqrow + c] = 0.0
        m, dl = lse[row], delta[row]
        for j in range(t_k if not causal else min(t_k, i + 1)):
            krow, vrow = kbase + j * k_t, vbase + j * v_t
            score = float32(0.0)
            dp = float32(0.0)
            for c in range(d):
                score += q[qrow + c] * k[krow + c]
                dp += do[dorow + c] * v[vrow + c]
            ds = math.exp(score * scale - m) * (dp - dl) * scale
            for c in range(d):
                dq[dqrow + c] += ds * k[krow + c]


def attention_dkv_kernel(bh_count, t_q, t_k, d, heads, scale, causal, q, q_b, q_h, q_t, k, k_b, k_h, k_t, v, v_b,
                         v_h, v_t, do, do_b, do_h, do_t, lse, delta, dk, dk_b, dk_h, dk_t, dv, dv_b, dv_h, dv_t):
    # One thread per key row: dv_j = sum_i p_ij dO_i;  dk_j = scale * sum_i p_ij (dO_i . v_j - delta_i) q_i
    row = cuda.grid(1)
    if row < bh_count * t_k:
        bh = row // t_k
        j = row % t_k
        krow, vrow = row_start(bh, j, heads, k_b, k_h, k_t), row_start(bh, j, heads, v_b, v_h, v_t)
        dkrow, dvrow = row_start(bh, j, heads, dk_b, dk_h, dk_t), row_start(bh, j, heads, dv_b, dv_h, dv_t)
        qbase, dobase = row_start(bh, 0, heads, q_b, q_h, q_t), row_start(bh, 0, heads, do_b, do_h, do_t)
        for c in range(d):
            dk[dkrow + c] = 0.0
            dv[dvrow + c] = 0.0
        for i in range(j if causal else 0, t_q):
            qrow = bh * t_q + i
            qb, dob = qbase + i * q_t, dobase + i * do_t
            score = float32(0.0)
            dp = float32(0.0)
            for c in range(d):
                score += q[qb + c] * k[krow + c]
                dp += do[dob + c] * v[vrow + c]
            p = math.exp(score * scale - lse[qrow])
            ds = p * (dp - delta[qrow]) * scale
            for c in range(d):
                dv[dvrow + c] += p * do[dob + c]
                dk[dkrow + c] += ds * q[qb + c]


# Head dimensions that are powers of two up to 32 take the "lanes" kernels: a group of d lanes per row
# (lane c holds column c), each dot product a butterfly of shuffles within the group, so a thread does
# O(T) work instead of O(T d). A block holds THREADS // d rows of one batch-head (grid: batch-heads, then
# tiles of rows), and walks the other side's rows in chunks of up to 32 staged in shared memory, one word
# per thread, as the tiled kernels do; the walk over a chunk is unrolled and branch-free (the causal mask
# and the chunk's end are selects), so each row's work in a chunk is straight-line arithmetic on registers
# and shared memory. Rows past the end compute on a clamped row and store nothing, so every lane of a warp
# runs the same code and the shuffles never meet an inactive lane. The kernels are made per head
# dimension, a compile-time constant, as a templated CUDA kernel's would be: the butterfly's log2(d) steps
# unroll into one shuffle and one add each, and a row and column are a shift and a mask.
@functools.cache
def lanes_kernels(d: int) -> tuple:
    """(forward, dq, dkv) lanes kernels for head dimension d."""
    D, STEPS = d, d.bit_length() - 1
    CHUNK = min(32, THREADS // D)              # rows of the other side staged at a time
    STAGED = CHUNK * D                         # the threads that stage a word each
    NEG_INF, ZERO = float32(-math.inf), float32(0.0)     # names: a select's operands must be simple

    @cuda.jit(device=True)
    def group_sum(value):
        off = D // 2
        for _ in range(STEPS):
            value += cuda.shfl_xor_sync(0xFFFFFFFF, value, off)
            off //= 2
        return value

    @cuda.jit(device=True)
    def lane_row(total):
        """This thread's batch-head, row within the block, column, row, and row clamped to the last of `total`."""
        row_in, c = threadIdx.x // D, threadIdx.x % D
        row = blockIdx.y * (THREADS // D) + row_in
        return blockIdx.x, row_in, c, row, min(row, total - 1)

    @cuda.jit(device=True)
    def stage(sa, sb, a, a_base, a_t, b, b_base, b_t, first, total, row_in, c):
        """Stage column c of rows first + row_in (clamped to the last of `total`) of a and b into sa and sb: the
        block's chunk, a word per thread."""
        if threadIdx.x < STAGED:
            r = min(first + row_in, total - 1)
            sa[threadIdx.x] = a[a_base + r * a_t + c]
            sb[threadIdx.x] = b[b_base + r * b_t + c]

    def attention_forward_lanes_kernel(t_q, t_k, heads, scale, causal, q, q_b, q_h, q_t, k, k_b, k_h, k_t,
                                       v, v_b, v_h, v_t, o, o_b, o_h, o_t, lse):
        sk = shared.array(STAGED, float32)                  # sk[jj * D + c]: key k0 + jj, column c
        sv = shared.array(STAGED, float32)
        bh, row_in, c, i_raw, i = lane_row(t_q)
        bidirectional = not causal
        qc = q[row_start(bh, i, heads, q_b, q_h, q_t) + c] * scale
        kbase, vbase = row_start(bh, 0, heads, k_b, k_h, k_t), row_start(bh, 0, heads, v_b, v_h, v_t)
        m = NEG_INF
        total = float32(0.0)
        acc = float32(0.0)
        for k0 in range(0, t_k, CHUNK):
            stage(sk, sv, k, kbase, k_t, v, vbase, v_t, k0, t_k, row_in, c)
            syncthreads()
            for jj in range(CHUNK):                         # the online softmax of the tiled kernel
                j = k0 + jj
                score = group_sum(qc * sk[jj * D + c])
                allowed = (j < t_k) & (bidirectional | (j <= i))
                score = score if allowed else NEG_INF
                new_max = max(m, score)
                correction = math.exp(m - new_max)
                weight = math.exp(score - new_max)
                total = total * correction + weight
                acc = acc * correction + weight * sv[jj * D + c]
                m = new_max
            syncthreads()
        if i_raw < t_q:
            o[row_start(bh, i, heads, o_b, o_h, o_t) + c] = acc / total
            if c == 0:
                lse[bh * t_q + i] = m + math.log(total)

    def attention_dq_lanes_kernel(t_q, t_k, heads, scale, causal, q, q_b, q_h, q_t, k, k_b, k_h, k_t, v, v_b,
                                  v_h, v_t, do, do_b, do_h, do_t, lse, delta, dq, dq_b, dq_h, dq_t):
        sk = shared.array(STAGED, float32)
        sv = shared.array(STAGED, float32)
        bh, row_in, c, i_raw, i = lane_row(t_q)
        bidirectional = not causal
        qc, doc = q[row_start(bh, i, heads, q_b, q_h, q_t) + c], do[row_start(bh, i, heads, do_b, do_h, do_t) + c]
        m, dl = lse[bh * t_q + i], delta[bh * t_q + i]
        kbase, vbase = row_start(bh, 0, heads, k_b, k_h, k_t), row_start(bh, 0, heads, v_b, v_h, v_t)
        acc = float32(0.0)
        for k0 in range(0, t_k, CHUNK):
            stage(sk, sv, k, kbase, k_t, v, vbase, v_t, k0, t_k, row_in, c)
            syncthreads()
            for jj in range(CHUNK):
                j = k0 + jj
                kj = sk[jj * D + c]
                score = group_sum(qc * kj)
                dp = group_sum(doc * sv[jj * D + c])
                ds = math.exp(score * scale - m) * (dp - dl) * scale
                allowed = (j < t_k) & (bidirectional | (j <= i))
                acc += (ds if allowed else ZERO) * kj
            syncthreads()
        if i_raw < t_q:
            dq[row_start(bh, i, heads, dq_b, dq_h, dq_t) + c] = acc

    def attention_dkv_lanes_kernel(t_q, t_k, heads, scale, causal, q, q_b, q_h, q_t, k, k_b, k_h, k_t, v, v_b,
                                   v_h, v_t, do, do_b, do_h, do_t, lse, delta, dk, dk_b, dk_h, dk_t, dv, dv_b, dv_h,
                                   dv_t):
        # rows: key rows; the chunks: query rows i0 .. i0 + CHUNK - 1, with their lse and delta
        sq = shared.array(STAGED, float32)
        sdo = shared.array(STAGED, float32)
        slse = shared.array(CHUNK, float32)
        sdelta = shared.array(CHUNK, float32)
        bh, row_in, c, j_raw, j = lane_row(t_k)
        bidirectional = not causal
        kc, vc = k[row_start(bh, j, heads, k_b, k_h, k_t) + c], v[row_start(bh, j, heads, v_b, v_h, v_t) + c]
        qbase, dobase = row_start(bh, 0, heads, q_b, q_h, q_t), row_start(bh, 0, heads, do_b, do_h, do_t)
        dkc = float32(0.0)
        dvc = float32(0.0)
        for i0 in range(0, t_q, CHUNK):
            stage(sq, sdo, q, qbase, q_t, do, dobase, do_t, i0, t_q, row_in, c)
            if threadIdx.x < STAGED and c == 0:               # and each staged row's lse and delta
                i = min(i0 + row_in, t_q - 1)
                slse[row_in] = lse[bh * t_q + i]
                sdelta[row_in] = delta[bh * t_q + i]
            syncthreads()
            for ii in range(CHUNK):
                i = i0 + ii
                qc, doc = sq[ii * D + c], sdo[ii * D + c]
                score = group_sum(qc * kc)
                dp = group_sum(doc * vc)
                p = math.exp(score * scale - slse[ii])
                allowed = (i < t_q) & (bidirectional | (j <= i))
                p = p if allowed else ZERO
                dvc += p * doc
                dkc += p * (dp - sdelta[ii]) * scale * qc
            syncthreads()
        if j_raw < t_k:
            dk[row_start(bh, j, heads, dk_b, dk_h, dk_t) + c] = dkc
            dv[row_start(bh, j, heads, dv_b, dv_h, dv_t) + c] = dvc

    return attention_forward_lanes_kernel, attention_dq_lanes_kernel, attention_dkv_lanes_kernel


def _lanes(d: int) -> bool:
    """Whether a head dimension takes the lanes kernels: a power of two no wider than a 32-lane warp."""
    return d <= 32 and d & (d - 1) == 0


def _heads(arrays: dict) -> int:
    """The heads dimension of the 4-D arrays among `arrays` (1 when all are 3-D), checking each is a float32
    device array of 3 or 4 dimensions and that the 4-D ones agree on batches and heads."""
    split = set()
    for name, a in arrays.items():
        if not isinstance(a, DeviceNDArray) or a.ndim not in (3, 4):
            raise DnnError(f"{name} must be a 3-D (batch x heads, tokens, head dim) or 4-D (batch, heads, tokens, "
                           f"head dim) device array")
        if a.dtype != np.float32:
            raise DnnError(f"{name} must hold float32, not {a.dtype}")
        if a.ndim == 4:
            split.add(a.shape[:2])
    if len(split) > 1:
        raise DnnError(f"the 4-D arrays disagree on (batch, heads): {sorted(split)}")
    return split.pop()[1] if split else 1


def _rows_of(a: DeviceNDArray) -> tuple[int, int, int]:
    """(batch x heads, tokens, head dim) of a 3-D or 4-D array."""
    return (a.shape[0] * a.shape[1], *a.shape[2:]) if a.ndim == 4 else tuple(a.shape)


def _layout(a: DeviceNDArray, name: str, heads: int) -> list:
    """a as the kernels read it: a flat view from its first element, then its element strides between
    batches, heads and tokens (see `row_start`). Its head dimension must be contiguous."""
    item = a.dtype.itemsize
    own = [s // item if n > 1 else 0 for n, s in zip(a.shape, a.strides, strict=True)]   # size 1: never stepped
    strides = [own[0] * heads, *own] if a.ndim == 3 else own      # 3-D row bh: (bh // heads) heads s0 + (bh % heads) s0
    if strides[3] not in (0, 1) or min(strides) < 0:
        raise DnnError(f"{name} must have a contiguous head dimension and no negative strides (strides "
                       f"{tuple(s // item for s in a.strides)} in elements)")
    span = max(1, sum((n - 1) * s for n, s in zip(a.shape, own, strict=True)) + 1)
    flat = DeviceNDArray((span,), (item,), a.dtype, a.context, a.memory, a.ptr)
    return [flat, *(np.int32(x) for x in strides[:3])]


def _attention_shapes(arrays: dict) -> tuple[int, int, int, int, int]:
    """(batch x heads, query tokens, key tokens, head dim, heads) of q, k, v and the arrays shaped like them."""
    heads = _heads(arrays)
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    (bh, t_q, d), (bh_k, t_k, d_k) = _rows_of(q), _rows_of(k)
    if _rows_of(v) != (bh_k, t_k, d_k) or bh != bh_k or d != d_k:
        raise DnnError(f"q {q.shape}, k {k.shape} and v {v.shape} do not match")
    for name, a in arrays.items():
        want = (bh, t_q, d) if name in ("q", "o", "do", "dq") else (bh, t_k, d)
        if name not in ("q", "k", "v") and _rows_of(a) != want:
            raise DnnError(f"{name} {a.shape} does not match q {q.shape} and k {k.shape}")
    if not 0 < d <= MAX_HEAD_DIM:
        raise DnnError(f"head dimension {d} is outside 1..{MAX_HEAD_DIM}")
    return bh, t_q, t_k, d, heads


def attention_forward(handle: Handle, q, k, v, o, lse, scale: float | None = None, causal: bool = False) -> None:
    """o = softmax(q k^T * scale (+ causal mask)) v per (batch x head), fused; lse (bh, Tq) is saved
    for the backward pass (cudnn's fused flash attention, FlashAttention's forward). q, k, v and o are
    (batch x heads, tokens, head dim) or (batch, heads, tokens, head dim), strided as they come, with
    their head dimension contiguous."""
    arrays = {"q": q, "k": k, "v": v, "o": o}
    bh, t_q, t_k, d, heads = _attention_shapes(arrays)
    scale = 1 / math.sqrt(d) if scale is None else scale
    args = [x for name, a in arrays.items() for x in _layout(a, name, heads)] + [_flat(lse, "lse", bh * t_q)]
    shape = (np.int32(t_q), np.int32(t_k), np.int32(d), np.int32(heads), np.float32(scale), causal)
    with trace.span(4, "attention_forward", batch_heads=bh, t_q=t_q, t_k=t_k, head_dim=d, causal=causal):
        if bh and t_q and t_k and _lanes(d):
            handle.kernel(lanes_kernels(d)[0])[(bh, _ceil_div(t_q * d, THREADS)), THREADS, handle.stream](
                *shape[:2], *shape[3:], *args)
        elif bh and t_q and t_k:
            handle.kernel(attention_forward_kernel)[(-(-t_q // QUERY_TILE), bh), QUERY_TILE, handle.stream](
                *shape, *args)


def attention_backward(handle: Handle, q, k, v, o, do, lse, dq, dk, dv, scale: float | None = None,
                       causal: bool = False) -> None:
    """dq, dk, dv from the forward's o and lse, recomputing the probabilities (FlashAttention's backward).
    Every array but lse may be strided, as in `attention_forward`."""
    arrays = {"q": q, "k": k, "v": v, "o": o, "do": do, "dq": dq, "dk": dk, "dv": dv}
    bh, t_q, t_k, d, heads = _attention_shapes(arrays)
    scale = 1 / math.sqrt(d) if scale is None else scale
    lq, lk, lv, lo, ldo, ldq, ldk, ldv = (_layout(a, name, heads) for name, a in arrays.items())
    flse = _flat(lse, "lse", bh * t_q)
    delta = handle.api.device_array(bh * t_q, np.float32)
    shape = (np.int32(t_q), np.int32(t_k), np.int32(d), np.int32(heads), np.float32(scale), causal)
    with trace.span(4, "attention_backward", batch_heads=bh, t_q=t_q, t_k=t_k, head_dim=d, causal=causal):
        if bh and t_q and t_k:
            rows = bh * t_q
            handle.kernel(attention_delta_kernel)[-(-rows // THREADS), THREADS, handle.stream](
                np.int32(rows), np.int32(t_q), np.int32(d), np.int32(heads), *lo, *ldo, delta)
            inputs = (*lq, *lk, *lv, *ldo, flse, delta)
            if _lanes(d):
                _, dq_kernel, dkv_kernel = lanes_kernels(d)
                handle.kernel(dq_kernel)[(bh, _ceil_div(t_q * d, THREADS)), THREADS, handle.stream](
                    *shape[:2], *shape[3:], *inputs, *ldq)
                handle.kernel(dkv_kernel)[(bh, _ceil_div(t_k * d, THREADS)), THREADS, handle.stream](
                    *shape[:2], *shape[3:], *inputs, *ldk, *ldv)
                return
            handle.kernel(attention_dq_kernel)[-(-rows // THREADS), THREADS, handle.stream](
                np.int32(bh), *shape, *inputs, *ldq)
            handle.kernel(attention_dkv_kernel)[-(-(bh * t_k) // THREADS), THREADS, handle.stream](
                np.int32(bh), *shape, *inputs, *ldk, *ldv)

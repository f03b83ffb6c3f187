"""Layer 4, DNN: scaled dot-product attention, fused in the flash-attention style (cuDNN's fused flash
attention, FlashAttention's forward and backward): each thread owns a query row and walks the keys
in tiles staged in shared memory, keeping a running maximum and sum (online softmax), so the T x T
score matrix is never stored; the backward pass recomputes the probabilities from the saved
log-sum-exp. Head dimensions that are powers of two up to 32 take the "lanes" kernels instead."""

import math

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, blockIdx, float32, shared, syncthreads, threadIdx
from lapis.libs.dnn.descriptors import DnnError
from lapis.libs.dnn.handle import THREADS, Handle, _ceil_div, _flat

KEY_TILE, QUERY_TILE, MAX_HEAD_DIM = 32, 64, 64


def attention_forward_kernel(t_q, t_k, d, scale, causal, q, k, v, o, lse):
    # q, o: (BH, Tq, D); k, v: (BH, Tk, D); lse: (BH, Tq). Block: QUERY_TILE rows of one head.
    sk = shared.array((32, 64), np.float32)
    sv = shared.array((32, 64), np.float32)
    acc = cuda.local.array(64, np.float32)
    qi = cuda.local.array(64, np.float32)
    bh, t = blockIdx.y, threadIdx.x
    i = blockIdx.x * 64 + t
    live = i < t_q
    for c in range(d):
        qi[c] = q[(bh * t_q + i) * d + c] * scale if live else 0.0
        acc[c] = 0.0
    m = float32(-math.inf)
    total = float32(0.0)
    for k0 in range(0, t_k, 32):
        for e in range(t, 32 * d, 64):                      # the block stages 32 keys and values
            jj = e // d
            c = e % d
            if k0 + jj < t_k:
                sk[jj, c] = k[(bh * t_k + k0 + jj) * d + c]
                sv[jj, c] = v[(bh * t_k + k0 + jj) * d + c]
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
        for c in range(d):
            o[(bh * t_q + i) * d + c] = acc[c] / total
        lse[bh * t_q + i] = m + math.log(total)


def attention_delta_kernel(rows, d, o, do, delta):
    # delta_i = sum_c dO[i, c] * O[i, c]
    i = cuda.grid(1)
    if i < rows:
        acc = float32(0.0)
        for c in range(d):
            acc += do[i * d + c] * o[i * d + c]
        delta[i] = acc


def attention_dq_kernel(bh_count, t_q, t_k, d, scale, causal, q, k, v, do, lse, delta, dq):
    # One thread per query row: dq_i = scale * sum_j p_ij (dO_i . v_j - delta_i) k_j
    row = cuda.grid(1)
    if row < bh_count * t_q:
        bh = row // t_q
        i = row % t_q
        base = row * d
        for c in range(d):
            dq[base + c] = 0.0
        m, dl = lse[row], delta[row]
        for j in range(t_k if not causal else min(t_k, i + 1)):
            kv = (bh * t_k + j) * d
            score = float32(0.0)
            dp = float32(0.0)
            for c in range(d):
                score += q[base + c] * k[kv + c]
                dp += do[base + c] * v[kv + c]
            ds = math.exp(score * scale - m) * (dp - dl) * scale
            for c in range(d):
                dq[base + c] += ds * k[kv + c]


def attention_dkv_kernel(bh_count, t_q, t_k, d, scale, causal, q, k, v, do, lse, delta, dk, dv):
    # One thread per key row: dv_j = sum_i p_ij dO_i;  dk_j = scale * sum_i p_ij (dO_i . v_j - delta_i) q_i
    row = cuda.grid(1)
    if row < bh_count * t_k:
        bh = row // t_k
        j = row % t_k
        base = row * d
        for c in range(d):
            dk[base + c] = 0.0
            dv[base + c] = 0.0
        for i in range(j if causal else 0, t_q):
            qrow = bh * t_q + i
            qb = qrow * d
            score = float32(0.0)
            dp = float32(0.0)
            for c in range(d):
                score += q[qb + c] * k[base + c]
                dp += do[qb + c] * v[base + c]
            p = math.exp(score * scale - lse[qrow])
            ds = p * (dp - delta[qrow]) * scale
            for c in range(d):
                dv[base + c] += p * do[qb + c]
                dk[base + c] += ds * q[qb + c]


# Head dimensions that are powers of two up to 32 take the "lanes" kernels: a group of d lanes per row
# (lane c holds column c), each dot product a butterfly of shuffles within the group, so a thread does
# O(T) work instead of O(T d). Rows past the end compute on a clamped row and store nothing, so every
# lane of a warp runs the same loop and the shuffles never meet an inactive lane.
@cuda.jit(device=True)
def group_sum(value, lanes):
    off = lanes // 2
    while off > 0:
        value += cuda.shfl_xor_sync(0xFFFFFFFF, value, off)
        off //= 2
    return value


def attention_forward_lanes_kernel(rows, t_q, t_k, d, scale, causal, q, k, v, o, lse):
    t = cuda.grid(1)
    row, c = t // d, t % d
    r = min(row, rows - 1)
    bh, i = r // t_q, r % t_q
    qc = q[r * d + c] * scale
    m = float32(-math.inf)
    total = float32(0.0)
    acc = float32(0.0)
    for j in range(t_k):
        kb = (bh * t_k + j) * d + c
        score = group_sum(qc * k[kb], d)
        if not causal or j <= i:                            # the online softmax of the tiled kernel
            new_max = max(m, score)
            correction = math.exp(m - new_max)
            weight = math.exp(score - new_max)
            total = total * correction + weight
            acc = acc * correction + weight * v[kb]
            m = new_max
    if row < rows:
        o[r * d + c] = acc / total
        if c == 0:
            lse[r] = m + math.log(total)


def attention_dq_lanes_kernel(rows, t_q, t_k, d, scale, causal, q, k, v, do, lse, delta, dq):
    t = cuda.grid(1)
    row, c = t // d, t % d
    r = min(row, rows - 1)
    bh, i = r // t_q, r % t_q
    qc, doc, m, dl = q[r * d + c], do[r * d + c], lse[r], delta[r]
    acc = float32(0.0)
    for j in range(t_k):
        kb = (bh * t_k + j) * d + c
        kc = k[kb]
        score = group_sum(qc * kc, d)
        dp = group_sum(doc * v[kb], d)
        if not causal or j <= i:
            acc += math.exp(score * scale - m) * (dp - dl) * scale * kc
    if row < rows:
        dq[r * d + c] = acc


def attention_dkv_lanes_kernel(rows, t_q, t_k, d, scale, causal, q, k, v, do, lse, delta, dk, dv):
    # rows: key rows (BH x Tk)
    t = cuda.grid(1)
    row, c = t // d, t % d
    r = min(row, rows - 1)
    bh, j = r // t_k, r % t_k
    kc, vc = k[r * d + c], v[r * d + c]
    dkc = float32(0.0)
    dvc = float32(0.0)
    for i in range(t_q):
        qrow = bh * t_q + i
        qc, doc = q[qrow * d + c], do[qrow * d + c]
        score = group_sum(qc * kc, d)
        dp = group_sum(doc * vc, d)
        if not causal or j <= i:
            p = math.exp(score * scale - lse[qrow])
            dvc += p * doc
            dkc += p * (dp - delta[qrow]) * scale * qc
    if row < rows:
        dk[r * d + c] = dkc
        dv[r * d + c] = dvc


def _lanes(d: int) -> bool:
    """Whether a head dimension takes the lanes kernels: a power of two no wider than a 32-lane warp."""
    return d <= 32 and d & (d - 1) == 0


def _attention_shapes(q, k, v) -> tuple[int, int, int, int]:
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not isinstance(a, DeviceNDArray) or a.ndim != 3:
            raise DnnError(f"{name} must be a 3-D device array (batch x heads, tokens, head dim)")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise DnnError(f"q {q.shape}, k {k.shape} and v {v.shape} do not match")
    bh, t_q, d = q.shape
    if not 0 < d <= MAX_HEAD_DIM:
        raise DnnError(f"head dimension {d} is outside 1..{MAX_HEAD_DIM}")
    return bh, t_q, k.shape[1], d


def attention_forward(handle: Handle, q, k, v, o, lse, scale: float | None = None, causal: bool = False) -> None:
    """o = softmax(q k^T * scale (+ causal mask)) v per (batch x head), fused; lse (bh, Tq) is saved
    for the backward pass (cudnn's fused flash attention, FlashAttention's forward)."""
    bh, t_q, t_k, d = _attention_shapes(q, k, v)
    scale = 1 / math.sqrt(d) if scale is None else scale
    args = [_flat(q, "q"), _flat(k, "k"), _flat(v, "v"), _flat(o, "o", q.size), _flat(lse, "lse", bh * t_q)]
    with trace.span(4, "attention_forward", batch_heads=bh, t_q=t_q, t_k=t_k, head_dim=d, causal=causal):
        if bh and t_q and t_k and _lanes(d):
            handle.kernel(attention_forward_lanes_kernel)[_ceil_div(bh * t_q * d, THREADS), THREADS, handle.stream](
                np.int32(bh * t_q), np.int32(t_q), np.int32(t_k), np.int32(d), np.float32(scale), causal, *args)
        elif bh and t_q and t_k:
            handle.kernel(attention_forward_kernel)[(-(-t_q // QUERY_TILE), bh), QUERY_TILE, handle.stream](
                np.int32(t_q), np.int32(t_k), np.int32(d), np.float32(scale), causal, *args)


def attention_backward(handle: Handle, q, k, v, o, do, lse, dq, dk, dv, scale: float | None = None,
                       causal: bool = False) -> None:
    """dq, dk, dv from the forward's o and lse, recomputing the probabilities (FlashAttention's backward)."""
    bh, t_q, t_k, d = _attention_shapes(q, k, v)
    scale = 1 / math.sqrt(d) if scale is None else scale
    fq, fk, fv = _flat(q, "q"), _flat(k, "k"), _flat(v, "v")
    fo, fdo, flse = _flat(o, "o", q.size), _flat(do, "do", q.size), _flat(lse, "lse", bh * t_q)
    fdq, fdk, fdv = _flat(dq, "dq", q.size), _flat(dk, "dk", k.size), _flat(dv, "dv", v.size)
    delta = handle.api.device_array(bh * t_q, np.float32)
    geometry = (np.int32(bh), np.int32(t_q), np.int32(t_k), np.int32(d), np.float32(scale), causal)
    with trace.span(4, "attention_backward", batch_heads=bh, t_q=t_q, t_k=t_k, head_dim=d, causal=causal):
        if bh and t_q and t_k:
            rows = bh * t_q
            handle.kernel(attention_delta_kernel)[-(-rows // THREADS), THREADS, handle.stream](
                np.int32(rows), np.int32(d), fo, fdo, delta)
            if _lanes(d):
                handle.kernel(attention_dq_lanes_kernel)[_ceil_div(rows * d, THREADS), THREADS, handle.stream](
                    np.int32(rows), *geometry[1:], fq, fk, fv, fdo, flse, delta, fdq)
                handle.kernel(attention_dkv_lanes_kernel)[_ceil_div(bh * t_k * d, THREADS), THREADS,
                                                             handle.stream](
                    np.int32(bh * t_k), *geometry[1:], fq, fk, fv, fdo, flse, delta, fdk, fdv)
                return
            handle.kernel(attention_dq_kernel)[-(-rows // THREADS), THREADS, handle.stream](
                *geometry, fq, fk, fv, fdo, flse, delta, fdq)
            handle.kernel(attention_dkv_kernel)[-(-(bh * t_k) // THREADS), THREADS, handle.stream](
                *geometry, fq, fk, fv, fdo, flse, delta, fdk, fdv)

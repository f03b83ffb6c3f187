"""Layer 4, DNN: convolutions (NCHW or NHWC tensors, KCRS or KRSC filters, padding, stride, dilation,
groups) in three algorithms in each direction (forward, backward-data, backward-filter):
"implicit_gemm" (the direction's GEMM, tiled through shared memory, its unfolded operand gathered as
it is staged and never stored), "gemm" (the unfolded input or gradient materialized in a caller's
workspace, multiplied with the BLAS gemm and its tuned tiles, as cuDNN's ALGO_GEMM does) and
"direct" (a thread per output). `find_convolution_*_algorithm` runs each on the problem and ranks
them by simulated device time, as cudnnFindConvolution*Algorithm does, and
`get_convolution_algorithm` returns the winner for that profile and shape afterwards.
"""

from typing import NamedTuple

import numpy as np

from lapis import cuda, trace
from lapis.cuda import DeviceNDArray, blockIdx, float32, shared, syncthreads, threadIdx
from lapis.libs import blas, kernels
from lapis.libs.dnn.descriptors import ConvolutionDescriptor, DnnError, TensorDescriptor, _filter
from lapis.libs.dnn.handle import THREADS, Handle, _ceil_div, _flat

SPLIT_K_MIN_DEPTH = 64
SPLIT_K_TARGET_BLOCKS = 128
CONV_DIRECTIONS = ("forward", "backward_data", "backward_filter")
CONV_ALGORITHMS = ("implicit_gemm", "gemm", "direct")     # the same three in every direction
CONV_FORWARD_ALGORITHMS = CONV_BACKWARD_DATA_ALGORITHMS = CONV_BACKWARD_FILTER_ALGORITHMS = CONV_ALGORITHMS


class ConvGeometry(NamedTuple):
    """A convolution's sizes and its tensors' element strides: every convolution kernel takes these as
    its first parameters, in this order (a struct passed by value, as cuDNN's kernels take theirs).
    x is n x c x h x wd, the filters k x c/groups x r x s, y n x k x p x q; the strides let one kernel
    read NCHW or NHWC tensors and KCRS or KRSC filters."""
    n: int
    c: int
    h: int
    wd: int
    k: int
    r: int
    s: int
    p: int
    q: int
    pad_h: int
    pad_w: int
    stride_h: int
    stride_w: int
    dil_h: int
    dil_w: int
    groups: int
    xs_n: int                   # x's element strides along n, c, h, w
    xs_c: int
    xs_h: int
    xs_w: int
    ys_n: int                   # y's (and dy's) along n, k, p, q
    ys_k: int
    ys_p: int
    ys_q: int
    ws_k: int                   # the filters' along k, c, r, s
    ws_c: int
    ws_r: int
    ws_s: int

    def kernel_args(self) -> tuple:
        """The fields as the kernels' int32 parameters."""
        return tuple(np.int32(v) for v in self)


def conv_direct_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                       xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, x, w, y):
    i = cuda.grid(1)
    if i < n * k * p * q:
        oq, rest = i % q, i // q                       # each quotient divides the last: three divisions
        op, rest = rest % p, rest // p
        ok, b = rest % k, rest // k
        cg = c // groups
        first = ok // (k // groups) * cg
        acc = float32(0.0)
        for cc in range(cg):
            for rr in range(r):
                iy = op * stride_h - pad_h + rr * dil_h
                if 0 <= iy < h:
                    for ss in range(s):
                        ix = oq * stride_w - pad_w + ss * dil_w
                        if 0 <= ix < wd:
                            acc += x[b * xs_n + (first + cc) * xs_c + iy * xs_h + ix * xs_w] * \
                                w[ok * ws_k + cc * ws_c + rr * ws_r + ss * ws_s]
        y[b * ys_n + ok * ys_k + op * ys_p + oq * ys_q] = acc


@cuda.jit(device=True)
def advance_digits(d0, d1, d2, i0, i1, i2, rad1, rad2):
    """A depth index's three digits (mixed radix: rad1, rad2) moved on by the digits (i0, i1, i2), with carries."""
    d2 += i2
    carry = 0
    if d2 >= rad2:
        d2 -= rad2
        carry = 1
    d1 += i1 + carry
    carry = 0
    if d1 >= rad1:
        d1 -= rad1
        carry = 1
    return d0 + i0 + carry, d1, d2


def make_conv_gemm_kernel(direction: str, micro_rows: int = 2, micro_columns: int = 2):
    """The implicit-GEMM kernel of one convolution direction: a rows x columns product over `depth`,
    tiled (16 micro_rows) x (16 micro_columns) in slices of 8 through shared memory, each of the block's
    16 x 16 threads computing micro_rows x micro_columns outputs, whose operands are gathered from the
    tensors as they are staged (the unfolded matrix is never stored):

        forward          y[k, (b, p, q)]   = w[k, (c, r, s)]  x_unfolded[(c, r, s), (b, p, q)]
        backward_data    dx[c, (b, h, w)]  = w^T[c, (k, r, s)] dy_unfolded[(k, r, s), (b, h, w)]
        backward_filter  dw[k, (c, r, s)]  = dy[k, (b, p, q)] x_unfolded^T[(b, p, q), (c, r, s)]

    per group. A thread stages one row of the first operand at micro_rows // 2 depths of each slice and
    one column of the second at micro_columns // 2, keeping each depth index as its three digits (the
    mixed radix of the bracket), advanced by 8 with carries, so the loop divides nothing. Backward-filter's
    depth (every output pixel of every image) is long and its output small, so it is split over grid z
    (split-K): each block sums a `chunk` of the depth and adds its tile into the zeroed dw with atomics. The
    direction and the micro-tile are closure constants, so each compiles to its own code; a 4 x 4 micro-tile
    reads half the shared memory of 2 x 2 per multiply-add, and issues a third fewer instructions, where the
    problem fills its tile."""
    MODE = direction
    MR, MC = micro_rows, micro_columns  # outputs per thread along rows and along columns
    TR, TC = 16 * MR, 16 * MC           # a block's tile: TR x TC outputs
    SA, SB = TR * 8 // 256, TC * 8 // 256     # elements of each operand a thread stages per slice
    PA, PB = 256 // TR, 256 // TC       # depths the block's threads stage in one pass, per operand
    SAME = MR == MC                     # both operands staged at the same depths: one set of digits

    def conv_gemm_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                         xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, chunk, a_src, b_src,
                         out):
        # forward: a_src = w, b_src = x, out = y; backward_data: w, dy, dx; backward_filter: dy, x, dw
        sa = shared.array((8, TR), np.float32)
        sb = shared.array((8, TC + 1), np.float32)
        acc = cuda.local.array((MR, MC), np.float32)    # registers: every index is a constant once unrolled
        av_ = cuda.local.array(MR, np.float32)
        bv_ = cuda.local.array(MC, np.float32)
        da = cuda.local.array((SA, 4), np.int64)         # the first operand's staged depths and their digits
        db = cuda.local.array((SB, 4), np.int64)         # the second's
        kg, cg = k // groups, c // groups
        group = blockIdx.z % groups
        if MODE == "forward":
            rows, columns, depth, rad1, rad2 = kg, n * p * q, cg * r * s, r, s
        elif MODE == "backward_data":
            rows, columns, depth, rad1, rad2 = cg, n * h * wd, kg * r * s, r, s
        else:
            rows, columns, depth, rad1, rad2 = kg, cg * r * s, n * p * q, p, q
        tx, ty = threadIdx.x, threadIdx.y                  # a 16 x 16 block
        row0 = blockIdx.y * TR
        col0 = blockIdx.x * TC
        for i in range(MR):
            for j in range(MC):
                acc[i, j] = float32(0.0)
        lid = ty * 16 + tx
        dda, ddb = lid // TR, lid // TC                    # the threads stage 8 x TR and 8 x TC of the operands
        row = row0 + lid % TR
        col = col0 + lid % TC
        # the column's digits: (b, op, oq), (b, iy, ix) or (cc, rr, ss); fixed for the thread
        if MODE == "forward":
            c0, c1, c2 = col // (q * p), col // q % p, col % q
        elif MODE == "backward_data":
            c0, c1, c2 = col // (wd * h), col // wd % h, col % wd
        else:
            c0, c1, c2 = col // (r * s), col // s % r, col % s
        start = blockIdx.z // groups * chunk
        end = min(depth, start + chunk)
        for u in range(SB):
            du = start + ddb + u * PB
            db[u, 0], db[u, 1], db[u, 2], db[u, 3] = du, du // (rad1 * rad2), du // rad2 % rad1, du % rad2
        if not SAME:
            for u in range(SA):
                du = start + dda + u * PA
                da[u, 0], da[u, 1], da[u, 2], da[u, 3] = du, du // (rad1 * rad2), du // rad2 % rad1, du % rad2
        i0, i1, i2 = 8 // (rad1 * rad2), 8 // rad2 % rad1, 8 % rad2
        # backward-data divides by the stride otherwise (a number, not a condition: predicates are few)
        unit_stride = 1 if stride_h == 1 and stride_w == 1 else 0
        for _ in range(start, end, 8):
            for u in range(SA):
                if SAME:
                    d, d0, d1, d2 = db[u, 0], db[u, 1], db[u, 2], db[u, 3]
                else:
                    d, d0, d1, d2 = da[u, 0], da[u, 1], da[u, 2], da[u, 3]
                av = float32(0.0)
                if row < rows and d < end:
                    if MODE == "forward":                      # w[k, (cc, rr, ss)]
                        av = a_src[(group * kg + row) * ws_k + d0 * ws_c + d1 * ws_r + d2 * ws_s]
                    elif MODE == "backward_data":              # w[(kk, rr, ss), c]
                        av = a_src[(group * kg + d0) * ws_k + row * ws_c + d1 * ws_r + d2 * ws_s]
                    else:                                      # dy[k, (b, op, oq)]
                        av = a_src[d0 * ys_n + (group * kg + row) * ys_k + d1 * ys_p + d2 * ys_q]
                sa[dda + u * PA, row - row0] = av
            for u in range(SB):
                d, d0, d1, d2 = db[u, 0], db[u, 1], db[u, 2], db[u, 3]
                bv = float32(0.0)
                if col < columns and d < end:
                    if MODE == "forward":                      # depth (cc, rr, ss), column (b, op, oq)
                        iy = c1 * stride_h - pad_h + d1 * dil_h
                        ix = c2 * stride_w - pad_w + d2 * dil_w
                        if 0 <= iy < h and 0 <= ix < wd:
                            bv = b_src[c0 * xs_n + (group * cg + d0) * xs_c + iy * xs_h + ix * xs_w]
                    elif MODE == "backward_data":              # depth (kk, rr, ss), column (b, iy, ix)
                        oy = c1 + pad_h - d1 * dil_h
                        ox = c2 + pad_w - d2 * dil_w
                        if unit_stride == 0:                   # an output position only where it divides
                            if oy >= 0 and ox >= 0 and oy % stride_h == 0 and ox % stride_w == 0:
                                oy, ox = oy // stride_h, ox // stride_w
                            else:
                                oy = p                         # no output: outside
                        if 0 <= oy < p and 0 <= ox < q:
                            bv = b_src[c0 * ys_n + (group * kg + d0) * ys_k + oy * ys_p + ox * ys_q]
                    else:                                      # depth (b, op, oq), column (cc, rr, ss)
                        iy = d1 * stride_h - pad_h + c1 * dil_h
                        ix = d2 * stride_w - pad_w + c2 * dil_w
                        if 0 <= iy < h and 0 <= ix < wd:
                            bv = b_src[d0 * xs_n + (group * cg + c0) * xs_c + iy * xs_h + ix * xs_w]
                sb[ddb + u * PB, col - col0] = bv
            syncthreads()
            for step in range(8):
                for i in range(MR):
                    av_[i] = sa[step, ty + 16 * i]
                for j in range(MC):
                    bv_[j] = sb[step, tx + 16 * j]
                for i in range(MR):
                    for j in range(MC):
                        acc[i, j] += av_[i] * bv_[j]
            syncthreads()
            for u in range(SB):                            # the digits follow with carries
                db[u, 0] += 8
                db[u, 1], db[u, 2], db[u, 3] = advance_digits(db[u, 1], db[u, 2], db[u, 3], i0, i1, i2, rad1, rad2)
            if not SAME:
                for u in range(SA):
                    da[u, 0] += 8
                    da[u, 1], da[u, 2], da[u, 3] = advance_digits(da[u, 1], da[u, 2], da[u, 3], i0, i1, i2, rad1,
                                                                  rad2)
        for i in range(MR):
            for j in range(MC):
                v = acc[i, j]
                orow, ocol = row0 + ty + 16 * i, col0 + tx + 16 * j
                if orow < rows and ocol < columns:
                    if MODE == "forward":
                        lo, hi = ocol % q, ocol // q           # the column's digits, two divisions
                        out[hi // p * ys_n + (group * kg + orow) * ys_k + hi % p * ys_p + lo * ys_q] = v
                    elif MODE == "backward_data":
                        lo, hi = ocol % wd, ocol // wd
                        out[hi // h * xs_n + (group * cg + orow) * xs_c + hi % h * xs_h + lo * xs_w] = v
                    else:
                        lo, hi = ocol % s, ocol // s
                        cuda.atomic.add(out, (group * kg + orow) * ws_k + hi // r * ws_c + hi % r * ws_r + lo * ws_s,
                                        v)
    return conv_gemm_kernel


# The rows (and, apart, the columns) from which the implicit GEMM's micro-tile is 4 deep along them (its block
# tile 64 wide): fewer would leave half the tile idle, and 2 (32 wide) serves them better.
CONV_MICRO_ROWS = 48
CONV_GEMM_KERNELS = {(direction, mr, mc): make_conv_gemm_kernel(direction, mr, mc) for direction in CONV_DIRECTIONS
                     for mr in (2, 4) for mc in (2, 4)}


def conv_im2col_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                       xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, x, col):
    # col[b, ch, rr, ss, op, oq] = x[b, ch, op * stride - pad + rr * dil, ...] or 0: the unfolded input,
    # per image and group a (cg * r * s) x (p * q) matrix, that the "gemm" algorithm multiplies with BLAS
    i = cuda.grid(1)
    if i < n * c * r * s * p * q:
        oq, rest = i % q, i // q                           # each quotient divides the last
        op, rest = rest % p, rest // p
        ss, rest = rest % s, rest // s
        rr, bc = rest % r, rest // r                       # bc: b * c + ch
        iy = op * stride_h - pad_h + rr * dil_h
        ix = oq * stride_w - pad_w + ss * dil_w
        v = float32(0.0)
        if 0 <= iy < h and 0 <= ix < wd:
            v = x[bc // c * xs_n + bc % c * xs_c + iy * xs_h + ix * xs_w]
        col[i] = v


def conv_col2im_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                       xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, col, dx):
    # dx[b, ch, iy, ix] = sum of the unfolded gradient's entries that came from (iy, ix): a gather, so
    # each element is summed by one thread in a fixed order
    i = cuda.grid(1)
    if i < n * c * h * wd:
        ix = i % wd
        iy = i // wd % h
        bc = i // (wd * h)
        acc = float32(0.0)
        for rr in range(r):
            oy = iy + pad_h - rr * dil_h
            if oy >= 0 and oy % stride_h == 0 and oy // stride_h < p:
                for ss in range(s):
                    ox = ix + pad_w - ss * dil_w
                    if ox >= 0 and ox % stride_w == 0 and ox // stride_w < q:
                        acc += col[(((bc * r + rr) * s + ss) * p + oy // stride_h) * q + ox // stride_w]
        dx[bc // c * xs_n + bc % c * xs_c + iy * xs_h + ix * xs_w] = acc


def conv_backward_data_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                              xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, dy, w, dx):
    i = cuda.grid(1)
    if i < n * c * h * wd:
        ix, rest = i % wd, i // wd                     # each quotient divides the last: three divisions
        iy, rest = rest % h, rest // h
        ch, b = rest % c, rest // c
        cg = c // groups
        kg = k // groups
        group = ch // cg
        acc = float32(0.0)
        for kk in range(kg):
            ok = group * kg + kk
            for rr in range(r):
                ty = iy + pad_h - rr * dil_h
                if ty >= 0 and ty % stride_h == 0 and ty // stride_h < p:
                    for ss in range(s):
                        tx = ix + pad_w - ss * dil_w
                        if tx >= 0 and tx % stride_w == 0 and tx // stride_w < q:
                            acc += dy[b * ys_n + ok * ys_k + ty // stride_h * ys_p + tx // stride_w * ys_q] * \
                                w[ok * ws_k + ch % cg * ws_c + rr * ws_r + ss * ws_s]
        dx[b * xs_n + ch * xs_c + iy * xs_h + ix * xs_w] = acc


def conv_backward_filter_kernel(n, c, h, wd, k, r, s, p, q, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups,
                                xs_n, xs_c, xs_h, xs_w, ys_n, ys_k, ys_p, ys_q, ws_k, ws_c, ws_r, ws_s, x, dy, dw):
    i = cuda.grid(1)
    cg = c // groups
    if i < k * cg * r * s:
        ss, rest = i % s, i // s                       # each quotient divides the last: three divisions
        rr, rest = rest % r, rest // r
        cc, ok = rest % cg, rest // cg
        ch = ok // (k // groups) * cg + cc
        acc = float32(0.0)
        for b in range(n):
            for op in range(p):
                iy = op * stride_h - pad_h + rr * dil_h
                if 0 <= iy < h:
                    for oq in range(q):
                        ix = oq * stride_w - pad_w + ss * dil_w
                        if 0 <= ix < wd:
                            acc += x[b * xs_n + ch * xs_c + iy * xs_h + ix * xs_w] * \
                                dy[b * ys_n + ok * ys_k + op * ys_p + oq * ys_q]
        dw[ok * ws_k + cc * ws_c + rr * ws_r + ss * ws_s] = acc


def convolution_output(x: TensorDescriptor, filter_dims, conv: ConvolutionDescriptor) -> TensorDescriptor:
    """The output descriptor, in x's layout (cudnnGetConvolution2dForwardOutputDim); filter_dims are
    (K, C/groups, R, S) or a FilterDescriptor."""
    n, c, h, w = x.dims
    k, cg, r, s = _filter(filter_dims)
    if conv.groups < 1 or c % conv.groups or k % conv.groups or cg != c // conv.groups:
        raise DnnError(f"filter {filter_dims} does not match {c} input channels in {conv.groups} group(s)")
    if min(conv.stride + conv.dilation) < 1 or min(conv.padding) < 0:
        raise DnnError(f"bad convolution {conv}")
    p = (h + 2 * conv.padding[0] - conv.dilation[0] * (r - 1) - 1) // conv.stride[0] + 1
    q = (w + 2 * conv.padding[1] - conv.dilation[1] * (s - 1) - 1) // conv.stride[1] + 1
    if p < 1 or q < 1:
        raise DnnError(f"a {r}x{s} filter does not fit a {h}x{w} input with {conv}")
    return TensorDescriptor((n, k, p, q), x.layout)


def _conv_geometry(x: TensorDescriptor, filter_dims, conv) -> tuple[TensorDescriptor, ConvGeometry]:
    """The output descriptor and the kernels' geometry of a convolution."""
    out = convolution_output(x, filter_dims, conv)
    k, _, r, s = filter_dims
    return out, ConvGeometry(*x.dims, k, r, s, *out.dims[2:], *conv.padding, *conv.stride, *conv.dilation,
                             conv.groups, *x.strides(), *out.strides(), *_filter(filter_dims).strides())


def convolution_workspace_size(x_desc: TensorDescriptor, filter_dims, conv: ConvolutionDescriptor,
                               algorithm: str) -> int:
    """Bytes of workspace an algorithm needs, in any direction (cudnnGetConvolutionForwardWorkspaceSize
    and its backward twins): the unfolded input or gradient, n x (C R S) x (P Q) float32, for "gemm";
    nothing for the others."""
    _check_algorithm(algorithm, x_desc, filter_dims)
    out = convolution_output(x_desc, filter_dims, conv)
    n, c, _, _ = x_desc.dims
    return 4 * n * c * filter_dims[2] * filter_dims[3] * out.dims[2] * out.dims[3] if algorithm == "gemm" else 0


def _check_algorithm(algorithm: str, x_desc: TensorDescriptor | None = None, filter_dims=None) -> None:
    if algorithm not in CONV_ALGORITHMS:
        raise DnnError(f"algorithm must be one of {CONV_ALGORITHMS}, not {algorithm!r}")
    if x_desc is not None and not _supported(algorithm, x_desc, filter_dims):
        raise DnnError("the 'gemm' algorithm multiplies NCHW tensors and KCRS filters with BLAS; "
                       "use 'implicit_gemm' or 'direct' for NHWC (CUDNN_STATUS_NOT_SUPPORTED)")


def _supported(algorithm: str, x_desc: TensorDescriptor, filter_dims) -> bool:
    return algorithm != "gemm" or (x_desc.layout == "NCHW" and _filter(filter_dims).layout == "NCHW")


def _workspace(x_desc, filter_dims, conv, algorithm, workspace) -> DeviceNDArray | None:
    """The workspace as a flat float32 array, or a DnnError (before any launch) when it is missing or small."""
    need = convolution_workspace_size(x_desc, filter_dims, conv, algorithm)
    if not need:
        return None
    have = workspace.nbytes if isinstance(workspace, DeviceNDArray) else 0
    if have < need:
        raise DnnError(f"algorithm {algorithm!r} needs a workspace of {need} bytes, got "
                       f"{have if workspace is not None else 'none'}; convolution_workspace_size says how much")
    if not workspace.is_c_contiguous() or workspace.ptr % 4:
        raise DnnError("the workspace must be a contiguous, 4-byte aligned device array")
    return workspace.ravel().view(np.uint8)[:need].view(np.float32)


def _splits(direction: str, tiles: int, groups: int, depth: int) -> int:
    """Backward-filter's split-K: enough blocks to fill the units (about 128 on the big profiles), each summing
    at least SPLIT_K_MIN_DEPTH deep; the other directions do not split."""
    if direction != "backward_filter":
        return 1
    return max(1, min(_ceil_div(depth, SPLIT_K_MIN_DEPTH), _ceil_div(SPLIT_K_TARGET_BLOCKS, tiles * groups)))


def _micro_tile(direction: str, rows: int, columns: int, depth: int, groups: int, units: int) -> tuple[int, int]:
    """The implicit GEMM's micro-tile (outputs per thread along rows, along columns): 4 along a side of at
    least CONV_MICRO_ROWS, the longer side first, while the grid keeps a block for at least every other compute
    unit: fewer, bigger blocks would leave units idle, and a small problem's time is its blocks', not its
    instructions' (the half is where the performance model's times of the digits CNN and of an MNIST CNN's
    layers turn, on H200)."""
    micro = [2, 2]
    for side in sorted((0, 1), key=lambda i: -(rows, columns)[i]):
        trial = list(micro)
        trial[side] = 4
        tiles = _ceil_div(rows, 16 * trial[0]) * _ceil_div(columns, 16 * trial[1])
        if (rows, columns)[side] >= CONV_MICRO_ROWS and tiles * groups * _splits(direction, tiles, groups,
                                                                                depth) >= units // 2:
            micro = trial
    return micro[0], micro[1]


def _conv_launch(handle, direction, g: ConvGeometry, a_src, b_src, out) -> None:
    """The implicit-GEMM kernel of a direction over its (rows, columns) grid, one group (and for
    backward-filter, one depth chunk) per grid z."""
    kg, cg = g.k // g.groups, g.c // g.groups
    rows, columns, depth = {"forward": (kg, g.n * g.p * g.q, cg * g.r * g.s),
                            "backward_data": (cg, g.n * g.h * g.wd, kg * g.r * g.s),
                            "backward_filter": (kg, cg * g.r * g.s, g.n * g.p * g.q)}[direction]
    mr, mc = _micro_tile(direction, rows, columns, depth, g.groups, handle.properties.multi_processor_count)
    splits = _splits(direction, _ceil_div(columns, 16 * mc) * _ceil_div(rows, 16 * mr), g.groups, depth)
    if direction == "backward_filter":
        kernels.fill(handle.api, out, 0.0, handle.stream)
    chunk = 8 * max(1, _ceil_div(_ceil_div(depth, splits), 8))        # a multiple of the 8-deep slice
    splits = max(1, _ceil_div(depth, chunk))
    grid = (_ceil_div(columns, 16 * mc), _ceil_div(rows, 16 * mr), g.groups * splits)
    handle.kernel(CONV_GEMM_KERNELS[direction, mr, mc])[grid, (16, 16), handle.stream](
        *g.kernel_args(), np.int32(chunk), a_src, b_src, out)


def _unfold(handle, g: ConvGeometry, fx, col) -> None:
    total = g.n * g.c * g.r * g.s * g.p * g.q
    handle.kernel(conv_im2col_kernel)[-(-total // THREADS), THREADS, handle.stream](*g.kernel_args(), fx, col)


def _group_gemms(g: ConvGeometry):
    """(groups, kg, crs, pq, column-block stride of a group in the unfolded matrix, per image stride)."""
    pq = g.p * g.q
    crs = g.c // g.groups * g.r * g.s
    return g.groups, g.k // g.groups, crs, pq, crs * pq, g.c * g.r * g.s * pq


def convolution_forward(handle: Handle, x_desc: TensorDescriptor, x, filter_dims, w, conv: ConvolutionDescriptor,
                        y, algorithm: str = "implicit_gemm", workspace=None) -> None:
    """y = conv(x, w) (cudnnConvolutionForward) with the chosen algorithm; "gemm" unfolds x into the
    workspace and multiplies with BLAS (cuDNN's CUDNN_CONVOLUTION_FWD_ALGO_GEMM)."""
    _check_algorithm(algorithm, x_desc, filter_dims)
    out, geometry = _conv_geometry(x_desc, filter_dims, conv)
    fx, fw, fy = _flat(x, "x", x_desc.size), _flat(w, "w", int(np.prod(filter_dims))), _flat(y, "y", out.size)
    col = _workspace(x_desc, filter_dims, conv, algorithm, workspace)
    with trace.span(4, "convolution_forward", x=x_desc.dims, filter=tuple(filter_dims), algorithm=algorithm,
                    padding=conv.padding, stride=conv.stride, dilation=conv.dilation, groups=conv.groups):
        if not out.size:
            return
        if algorithm == "direct":
            handle.kernel(conv_direct_kernel)[-(-out.size // THREADS), THREADS, handle.stream](
                *geometry.kernel_args(), fx, fw, fy)
        elif algorithm == "implicit_gemm":
            _conv_launch(handle, "forward", geometry, fw, fx, fy)
        else:
            # per image b and group: y (kg x pq) = w_group (kg x crs) col (crs x pq), all row-major, which
            # column-major BLAS computes as y^T = col^T w_group^T: m = pq, n = kg, k = crs
            _unfold(handle, geometry, fx, col)
            groups, kg, crs, pq, group_cols, image_cols = _group_gemms(geometry)
            for grp in range(groups):
                blas.gemm_strided_batched(handle.blas, "N", "N", pq, kg, crs, 1.0, col[grp * group_cols:], pq,
                                          image_cols, fw[grp * kg * crs:], crs, 0, 0.0, fy[grp * kg * pq:], pq,
                                          filter_dims[0] * pq, x_desc.dims[0])


def convolution_backward_data(handle: Handle, x_desc: TensorDescriptor, filter_dims, w, conv, dy, dx,
                              algorithm: str = "implicit_gemm", workspace=None) -> None:
    """dx from dy and the filters (cudnnConvolutionBackwardData); "gemm" forms the unfolded gradient
    w^T dy in the workspace with BLAS, then folds it back (col2im)."""
    _check_algorithm(algorithm, x_desc, filter_dims)
    out, geometry = _conv_geometry(x_desc, filter_dims, conv)
    fw, fdy, fdx = _flat(w, "w", int(np.prod(filter_dims))), _flat(dy, "dy", out.size), _flat(dx, "dx", x_desc.size)
    col = _workspace(x_desc, filter_dims, conv, algorithm, workspace)
    with trace.span(4, "convolution_backward_data", x=x_desc.dims, filter=tuple(filter_dims), algorithm=algorithm):
        if not x_desc.size:
            return
        if algorithm == "direct":
            handle.kernel(conv_backward_data_kernel)[-(-x_desc.size // THREADS), THREADS, handle.stream](
                *geometry.kernel_args(), fdy, fw, fdx)
        elif algorithm == "implicit_gemm":
            _conv_launch(handle, "backward_data", geometry, fw, fdy, fdx)
        else:
            # per image and group: dcol (crs x pq) = w_group^T (crs x kg) dy (kg x pq), row-major; in
            # column-major BLAS dcol^T = dy^T w_group: m = pq, n = crs, k = kg, w read transposed
            groups, kg, crs, pq, group_cols, image_cols = _group_gemms(geometry)
            for grp in range(groups):
                blas.gemm_strided_batched(handle.blas, "N", "T", pq, crs, kg, 1.0, fdy[grp * kg * pq:], pq,
                                          filter_dims[0] * pq, fw[grp * kg * crs:], crs, 0, 0.0,
                                          col[grp * group_cols:], pq, image_cols, x_desc.dims[0])
            handle.kernel(conv_col2im_kernel)[-(-x_desc.size // THREADS), THREADS, handle.stream](
                *geometry.kernel_args(), col, fdx)


def convolution_backward_filter(handle: Handle, x_desc: TensorDescriptor, x, filter_dims, conv, dy, dw,
                                algorithm: str = "implicit_gemm", workspace=None) -> None:
    """dw from x and dy (cudnnConvolutionBackwardFilter); "gemm" unfolds x into the workspace and sums
    dy col^T over the images with BLAS (beta = 1 after the first)."""
    _check_algorithm(algorithm, x_desc, filter_dims)
    out, geometry = _conv_geometry(x_desc, filter_dims, conv)
    size = int(np.prod(filter_dims))
    fx, fdy, fdw = _flat(x, "x", x_desc.size), _flat(dy, "dy", out.size), _flat(dw, "dw", size)
    col = _workspace(x_desc, filter_dims, conv, algorithm, workspace)
    with trace.span(4, "convolution_backward_filter", x=x_desc.dims, filter=tuple(filter_dims), algorithm=algorithm):
        if not size:
            return
        if algorithm == "direct":
            handle.kernel(conv_backward_filter_kernel)[-(-size // THREADS), THREADS, handle.stream](
                *geometry.kernel_args(), fx, fdy, fdw)
        elif algorithm == "implicit_gemm":
            _conv_launch(handle, "backward_filter", geometry, fdy, fx, fdw)
        else:
            # per group: dw (kg x crs) = sum over images of dy (kg x pq) col^T (pq x crs), row-major; in
            # column-major BLAS dw^T = col dy^T: m = crs, n = kg, k = pq, col read transposed
            _unfold(handle, geometry, fx, col)
            groups, kg, crs, pq, group_cols, image_cols = _group_gemms(geometry)
            for grp in range(groups):
                for b in range(x_desc.dims[0]):
                    blas.gemm(handle.blas, "T", "N", crs, kg, pq, 1.0, col[b * image_cols + grp * group_cols:], pq,
                              fdy[(b * filter_dims[0] + grp * kg) * pq:], pq, 1.0 if b else 0.0,
                              fdw[grp * kg * crs:], crs)


def _find(handle, direction, run, x_desc, filter_dims, conv, workspace) -> list[tuple[str, float]]:
    """Time each algorithm with events and rank them by simulated device time in ms; the winner is
    remembered for `get_convolution_algorithm`."""
    algorithms = [a for a in CONV_ALGORITHMS if _supported(a, x_desc, filter_dims)]
    need = max(convolution_workspace_size(x_desc, filter_dims, conv, a) for a in algorithms)
    if need and (workspace is None or workspace.nbytes < need):
        workspace = handle.api.device_array(need, np.uint8)
    timings = []
    for algorithm in algorithms:
        timings.append((algorithm, handle.device_time_ms(lambda a=algorithm: run(a, workspace))))
    timings.sort(key=lambda t: t[1])
    handle.algorithms[_problem(handle, direction, x_desc, filter_dims, conv)] = timings[0][0]
    return timings


def _problem(handle, direction, x_desc, filter_dims, conv) -> tuple:
    return direction, handle.properties.profile, x_desc, _filter(filter_dims), conv


def find_convolution_forward_algorithm(handle: Handle, x_desc: TensorDescriptor, x, filter_dims, w,
                                       conv: ConvolutionDescriptor, y, workspace=None) -> list[tuple[str, float]]:
    """Run every forward algorithm on this problem and rank them by simulated device time in ms
    (cudnnFindConvolutionForwardAlgorithm); y holds the last one's result. A workspace is allocated
    when none as large as "gemm" needs is given."""
    def run(algorithm, ws):
        convolution_forward(handle, x_desc, x, filter_dims, w, conv, y, algorithm, ws)
    return _find(handle, "forward", run, x_desc, filter_dims, conv, workspace)


def find_convolution_backward_data_algorithm(handle: Handle, x_desc: TensorDescriptor, filter_dims, w, conv, dy,
                                             dx, workspace=None) -> list[tuple[str, float]]:
    """cudnnFindConvolutionBackwardDataAlgorithm: every algorithm, ranked by simulated device time in ms."""
    def run(algorithm, ws):
        convolution_backward_data(handle, x_desc, filter_dims, w, conv, dy, dx, algorithm, ws)
    return _find(handle, "backward_data", run, x_desc, filter_dims, conv, workspace)


def find_convolution_backward_filter_algorithm(handle: Handle, x_desc: TensorDescriptor, x, filter_dims, conv, dy,
                                               dw, workspace=None) -> list[tuple[str, float]]:
    """cudnnFindConvolutionBackwardFilterAlgorithm: every algorithm, ranked by simulated device time in ms."""
    def run(algorithm, ws):
        convolution_backward_filter(handle, x_desc, x, filter_dims, conv, dy, dw, algorithm, ws)
    return _find(handle, "backward_filter", run, x_desc, filter_dims, conv, workspace)


def get_convolution_algorithm(handle: Handle, direction: str, x_desc: TensorDescriptor, filter_dims,
                              conv: ConvolutionDescriptor) -> str:
    """The algorithm for a problem without running anything (cudnnGetConvolution*Algorithm): the one a
    find step chose for this profile and shape on this handle, else "implicit_gemm" (no workspace)."""
    if direction not in CONV_DIRECTIONS:
        raise DnnError(f"direction must be one of {CONV_DIRECTIONS}, not {direction!r}")
    return handle.algorithms.get(_problem(handle, direction, x_desc, filter_dims, conv), "implicit_gemm")

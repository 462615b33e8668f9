/* gpu/cuda/kernels_gemv.cuh - the decode matrix-vector product (gemv_kernel): a single token's
 * products, bound by reading every weight once, with the RMSNorm before them folded into the
 * prologue and the bias/rope/KV step or the SwiGLU after them into the epilogue. The summation
 * order, the splits and the epilogues are described below, before the kernel's constants.
 */
#ifndef CAIRN_GPU_CUDA_KERNELS_GEMV_CUH
#define CAIRN_GPU_CUDA_KERNELS_GEMV_CUH

#include "gpu/cuda/kernels_common.cuh"
#include "gpu/cuda/kernels_elt.cuh"  /* rmsnorm_row, swiglu_elt */
#include "gpu/cuda/kernels_rope.cuh" /* qkv_args, qkv_item_store */

/* ---- the decode matrix-vector product -------------------------------------------------------
 *
 * A single token's products are matrix-vector products that read every weight once: their
 * speed is the memory's. cuBLAS serves them through its GEMM heuristics; this kernel is written
 * for exactly that case and folds in the small kernels around it, so a decode layer is five
 * launches instead of nine: rmsnorm + QKV + bias/rope/KV, attention, output, rmsnorm + gate/up +
 * SwiGLU, down. A prologue stages the input in shared memory as T:
 *   GV_PLAIN   in is T (cols): copied (the attention output before Wo, the SwiGLU before Wd);
 *   GV_NORM    in is the f32 residual x (cols): rmsnorm_row with weights nw, the code of
 *              rmsnorm_kernel at the same block size, so the same bits.
 *
 * The summation order. A row is cut into 16-byte pieces of V = 16 / sizeof(T) elements (the
 * last one zero-padded, in the staged input too) and the pieces into segments of GV_SEG = 32 *
 * GV_U. Lane l's sum of segment s is the chain over its pieces s GV_SEG + l + 32 u, u = 0 ..
 * GV_U - 1, each piece's products in element order (fmaf, in f32), starting from 0; the
 * segment's sum is warp_sum of the 32 lanes' (every lane gets the same bits); the row's sum is
 * 0 + seg 0 + seg 1 + ... in segment order. That order depends on the row's length only.
 *
 * The work. Each group of two rows is computed by SK warps of a block (SK = 1, 2, 4 or 8: the
 * split, a template parameter): warp `slice` of the group takes the slice-th of SK equal runs of
 * whole segments. With SK = 1 the warp adds its segment sums as it goes; otherwise each warp
 * leaves its segments' sums in shared memory and the group's first warp adds them all, in the
 * same order. So every split computes the same bits, and the host may pick whichever is
 * fastest on the device at hand (gv_tune in backend_tune.cuh times them): a matrix of few rows
 * (a layer's Q/K/V or down projection) has too few groups to keep the memory busy one warp a
 * group, and a split spreads each row over several. The grid takes no part either: every
 * decode step computes the same bits whatever the split and the number of blocks.
 *
 * A lane has GV_U pieces of each row in flight at once (a segment's loads are all issued before
 * their products are needed), and the warp sum of one segment is done after the loads of the
 * next are issued, while they are under way. `vec` says the rows can be read 16 bytes at a time
 * (cols a multiple of V and W 16-byte aligned); otherwise a piece is read element by element,
 * with the same sums. The epilogue, into out: GV_Y rows 2g, 2g+1 into y = W in (beta 0: y is not
 * read) or y = W in + beta y (beta 1: the residual), y = out (float); GV_QKV the two rows of qkv
 * item g (a rope pair, or two v elements; qkv_item_elems) through qkv_item_store, as
 * qkv_post_kernel stores them, out being the q row (float); GV_GLU rows g and rows / 2 + g (the
 * gate and up rows of the stacked gate/up matrix): out[g] = swiglu_elt(gate, up) in T, what
 * gated_kernel stores from GV_Y's output. The down product then reads its input as it is
 * (GV_PLAIN): the SwiGLU is computed once a token, not once in every block of the down product,
 * where it cost a third of the product's time on an H200.
 *
 * CPU reference: cairn__matvec (gpu/cpu/kernels_cpu.c) on the weights as the device holds them,
 * after cairn__rmsnorm, and before forward_chunk's bias/rope/cache steps or cairn__swiglu.
 * grid (any), block GV_WARPS * 32 = CK_THREADS, dynamic shared memory gv_smem_bytes(cols,
 * sizeof(T)); SK divides GV_WARPS */
#define GV_WARPS 8
#define GV_ROWS 2 /* rows a warp computes at once: a rope pair is one warp's */
/* 16-byte pieces of each row a lane has in flight. With 64 registers or fewer (every variant,
 * with nvcc 13 for sm_90) an SM holds 4 blocks; a compiler that needs more holds fewer
 * (__launch_bounds__ asking for 4 would make it spill instead): the host sizes each split's grid
 * from its own occupancy. */
#define GV_U 4
#define GV_SEG (32 * GV_U)          /* pieces a segment: the unit of the summation order */
enum { GV_PLAIN = 0, GV_NORM = 1 }; /* the prologue: what `in` is */
#define GV_SPLITS 4                 /* the splits: 1, 2, 4 and 8 warps a group */
__host__ __device__ constexpr int gv_split_index(int sk)
{
    return sk >= 8 ? 3 : sk >= 4 ? 2 : sk >= 2 ? 1 : 0;
}
enum { GV_Y = 0, GV_QKV = 1, GV_GLU = 2 }; /* the epilogue: where the rows go */
/* the row pairs of a product of rows rows (items: qkv_items, for GV_QKV) */
__host__ __device__ constexpr int gv_groups(int out, int rows, int items)
{
    return out == GV_QKV ? items : out == GV_GLU ? rows / 2 : (rows + 1) / 2;
}
static_assert(GV_WARPS * 32 == CK_THREADS,
              "the fused norm must run at rmsnorm_kernel's block size");
static_assert(GV_ROWS == 2, "a group is two rows: a qkv item");

/* a row of cols elements of elem bytes: its pieces and segments */
__host__ __device__ constexpr int gv_pieces(int cols, int elem)
{
    return (cols + 16 / elem - 1) / (16 / elem);
}
__host__ __device__ constexpr int gv_segs(int cols, int elem)
{
    return (gv_pieces(cols, elem) + GV_SEG - 1) / GV_SEG;
}
/* the dynamic shared memory: the staged input (whole pieces), then the segment sums of a
 * block's groups (at most GV_WARPS / 2 groups of two rows, when SK > 1) */
__host__ __device__ constexpr size_t gv_smem_bytes(int cols, int elem)
{
    return (size_t)gv_pieces(cols, elem) * 16 + (size_t)GV_WARPS * gv_segs(cols, elem) * 4;
}

/* acc + w . x over one 16-byte piece of each, in element order */
__device__ __forceinline__ float dot16(uint4 w, uint4 x, float acc, float)
{
    acc = fmaf(__uint_as_float(w.x), __uint_as_float(x.x), acc);
    acc = fmaf(__uint_as_float(w.y), __uint_as_float(x.y), acc);
    acc = fmaf(__uint_as_float(w.z), __uint_as_float(x.z), acc);
    return fmaf(__uint_as_float(w.w), __uint_as_float(x.w), acc);
}
__device__ __forceinline__ float2 to_f32x2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 to_f32x2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
/* the same for a piece of 16-bit pairs P (__half2, __nv_bfloat162) */
template <typename P> __device__ __forceinline__ float dot16_pairs(uint4 w, uint4 x, float acc)
{
    const P *a = (const P *)&w, *b = (const P *)&x;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 fa = to_f32x2(a[i]), fb = to_f32x2(b[i]);
        acc = fmaf(fa.x, fb.x, acc);
        acc = fmaf(fa.y, fb.y, acc);
    }
    return acc;
}
__device__ __forceinline__ float dot16(uint4 w, uint4 x, float acc, __half)
{
    return dot16_pairs<__half2>(w, x, acc);
}
__device__ __forceinline__ float dot16(uint4 w, uint4 x, float acc, __nv_bfloat16)
{
    return dot16_pairs<__nv_bfloat162>(w, x, acc);
}

/* piece c of the row wr (cols elements): one 16-byte load (vec), or element by element with
 * zeros past the row's end */
template <typename T>
__device__ __forceinline__ uint4 gv_piece(const T *__restrict__ wr, int c, int cols, int vec)
{
    if (vec)
        return __ldcs((const uint4 *)wr + c);
    constexpr int V = 16 / sizeof(T);
    uint4 u;
    T *t = (T *)&u;
#pragma unroll
    for (int k = 0; k < V; k++)
        t[k] = c * V + k < cols ? wr[c * V + k] : from_f32<T>(0.0f);
    return u;
}

/* the rows of group g: qkv item g's two elements, gate row g and its up row, or rows 2g and
 * 2g + 1 (2g again past the end: read, in bounds, and not stored) */
template <int OUT>
__device__ __forceinline__ void gv_group_rows(const qkv_args &qa, int rows, int g, int rr[GV_ROWS])
{
    if (OUT == GV_QKV)
        qkv_item_elems(qa, g, &rr[0], &rr[1]);
    else if (OUT == GV_GLU) {
        rr[0] = g;
        rr[1] = rows / 2 + g;
    } else {
        rr[0] = 2 * g;
        rr[1] = 2 * g + 1 < rows ? 2 * g + 1 : 2 * g;
    }
}

/* segment s's lane sums ls into the rows' sums: added to tot (SK 1), or left in part */
template <int SK>
__device__ __forceinline__ void gv_segment_done(float ls[GV_ROWS], float tot[GV_ROWS], float *part,
                                                int slot, int segs, int s)
{
#pragma unroll
    for (int r = 0; r < GV_ROWS; r++) {
        const float v = warp_sum(ls[r]);
        if (SK == 1)
            tot[r] += v;
        else if ((threadIdx.x & 31) == 0)
            part[(slot * GV_ROWS + r) * segs + s] = v;
    }
}

template <typename T, int IN, int OUT, int SK>
__global__ void __launch_bounds__(GV_WARPS * 32)
    gemv_kernel(const T *__restrict__ W, int rows, int cols, int vec, const void *__restrict__ in,
                const float *__restrict__ nw, float eps, float beta, void *__restrict__ out,
                int *__restrict__ ovf, qkv_args qa)
{
    extern __shared__ __align__(16) unsigned char gv_smem[];
    static_assert(GV_WARPS % SK == 0, "a block holds whole groups");
    constexpr int V = 16 / sizeof(T); /* elements per 16-byte piece */
    const int pieces = gv_pieces(cols, (int)sizeof(T)), segs = gv_segs(cols, (int)sizeof(T));
    T *xs = (T *)gv_smem;
    float *part = (float *)(gv_smem + (size_t)pieces * 16); /* [slot][row][segment], SK > 1 */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int groups = gv_groups(OUT, rows, OUT == GV_QKV ? qkv_items(qa) : 0);
    /* a block takes gpb groups at a time: warp w works on the slot-th, on its segments
     * [s_lo, s_hi) */
    const int gpb = GV_WARPS / SK, slot = w / SK, slice = w % SK;
    const int per = (segs + SK - 1) / SK, s_lo = slice * per;
    const int s_hi = s_lo + per < segs ? s_lo + per : segs;
    pdl_launch_dependents();
    /* The weights do not depend on the input: the pieces this lane reads first are sent for
     * (into L2) before the prologue, whose loads and barrier would otherwise delay them. */
    if (vec && s_lo < s_hi && (int)blockIdx.x * gpb + slot < groups) {
        int rr[GV_ROWS];
        gv_group_rows<OUT>(qa, rows, (int)blockIdx.x * gpb + slot, rr);
#pragma unroll
        for (int r = 0; r < GV_ROWS; r++)
#pragma unroll
            for (int u = 0; u < GV_U; u++)
                if (s_lo * GV_SEG + lane + 32 * u < pieces)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(
                        (const uint4 *)(W + (size_t)rr[r] * (size_t)cols) + s_lo * GV_SEG + lane +
                        32 * u));
    }
    pdl_wait(); /* from here on, the input and out: written by the kernels before */
    if (IN == GV_NORM)
        rmsnorm_row<T>((const float *)in, nw, cols, eps, xs, ovf);
    else if (cols % V == 0 && (uintptr_t)in % 16 == 0) { /* whole pieces, ROW_U at a time */
        const uint4 *src = (const uint4 *)in;
        uint4 *xp = (uint4 *)xs;
        const int B = blockDim.x;
        for (int k0 = threadIdx.x; k0 < pieces; k0 += ROW_U * B) {
            uint4 v[ROW_U];
#pragma unroll
            for (int j = 0; j < ROW_U; j++)
                v[j] = k0 + j * B < pieces ? src[k0 + j * B] : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < ROW_U; j++)
                if (k0 + j * B < pieces)
                    xp[k0 + j * B] = v[j];
        }
    } else { /* element by element, in batches of ROW_U as rmsnorm_row */
        const T *src = (const T *)in;
        const int B = blockDim.x;
        for (int k0 = threadIdx.x; k0 < cols; k0 += ROW_U * B) {
            T v[ROW_U];
#pragma unroll
            for (int j = 0; j < ROW_U; j++)
                v[j] = k0 + j * B < cols ? src[k0 + j * B] : from_f32<T>(0.0f);
#pragma unroll
            for (int j = 0; j < ROW_U; j++)
                if (k0 + j * B < cols)
                    xs[k0 + j * B] = v[j];
        }
    }
    for (int k = cols + threadIdx.x; k < pieces * V; k += blockDim.x) /* the last piece's pad */
        xs[k] = from_f32<T>(0.0f);
    __syncthreads();

    /* g0 is the same in every warp of the block, so the barriers below are the whole block's */
    const uint4 *xv = (const uint4 *)xs;
    for (int g0 = blockIdx.x * gpb; g0 < groups; g0 += gridDim.x * gpb) {
        const int g = g0 + slot;
        int rr[GV_ROWS] = {0, 0};
        float tot[GV_ROWS] = {0.0f, 0.0f};
        float y0[GV_ROWS] = {0.0f, 0.0f}; /* the residual, read before the weights, not after */
        if (g < groups && s_lo < s_hi) {
            gv_group_rows<OUT>(qa, rows, g, rr);
            if (OUT == GV_Y && beta != 0.0f && lane == 0 && slice == 0)
#pragma unroll
                for (int r = 0; r < GV_ROWS; r++)
                    y0[r] = ((const float *)out)[rr[r]];
            const T *wr[GV_ROWS];
#pragma unroll
            for (int r = 0; r < GV_ROWS; r++)
                wr[r] = W + (size_t)rr[r] * (size_t)cols;
            float ls[GV_ROWS] = {0.0f, 0.0f}; /* the lane's sums of the segment before */
            for (int s = s_lo; s < s_hi; s++) {
                const int c0 = s * GV_SEG + lane;
                uint4 wv[GV_ROWS][GV_U];
#pragma unroll
                for (int u = 0; u < GV_U; u++)
#pragma unroll
                    for (int r = 0; r < GV_ROWS; r++)
                        wv[r][u] = c0 + 32 * u < pieces ? gv_piece(wr[r], c0 + 32 * u, cols, vec)
                                                        : make_uint4(0, 0, 0, 0);
                if (s > s_lo)
                    gv_segment_done<SK>(ls, tot, part, slot, segs, s - 1);
#pragma unroll
                for (int r = 0; r < GV_ROWS; r++)
                    ls[r] = 0.0f;
#pragma unroll
                for (int u = 0; u < GV_U; u++)
                    if (c0 + 32 * u < pieces) {
                        const uint4 x = xv[c0 + 32 * u];
#pragma unroll
                        for (int r = 0; r < GV_ROWS; r++)
                            ls[r] = dot16(wv[r][u], x, ls[r], T());
                    }
            }
            gv_segment_done<SK>(ls, tot, part, slot, segs, s_hi - 1);
        }
        if (SK > 1) { /* the group's segment sums, added in order by its first warp */
            __syncthreads();
            if (slice == 0 && lane == 0 && g < groups)
#pragma unroll
                for (int r = 0; r < GV_ROWS; r++) {
                    float t = 0.0f;
                    for (int s = 0; s < segs; s++)
                        t += part[(slot * GV_ROWS + r) * segs + s];
                    tot[r] = t;
                }
            __syncthreads(); /* part is written again in the next round */
        }
        if (lane == 0 && slice == 0 && g < groups) {
            float *y = (float *)out;
            if (OUT == GV_QKV)
                qkv_item_store(qa, g, rr[0], rr[1], tot[0], tot[1], y, 0);
            else if (OUT == GV_GLU)
                ((T *)out)[g] = swiglu_elt<T>(tot[0], tot[1], ovf);
            else
#pragma unroll
                for (int r = 0; r < GV_ROWS; r++)
                    if (r == 0 || 2 * g + 1 < rows) /* the last group of odd rows has one */
                        y[rr[r]] = beta != 0.0f ? tot[r] + beta * y0[r] : tot[r];
        }
    }
}

/* ---- the batched decode product -------------------------------------------------------------
 *
 * gemv_batch_kernel: Y (nb, rows) = W (rows, cols) @ X (nb, cols)^T, or + Y (beta 1), for the
 * decode steps of nb <= GVB_MAX sequences at once (gpu/batch.c's continuous batching): every
 * piece of W a lane loads is applied to all nb input rows, so the weights, which bound a decode
 * step, are read once for the batch instead of once a sequence.
 *
 * Batch invariance: row r of input b is computed in exactly gemv_kernel's summation order (the
 * same pieces and segments, each lane's chain of GV_U pieces from 0 in element order with fmaf,
 * warp_sum of each segment, the segment sums added from 0 in segment order, through shared
 * memory in the same order when SK > 1), and no sum ever mixes two inputs. So Y[b] is bit for bit
 * gemv_kernel's GV_Y output for X[b] alone, whatever nb, the split or the grid
 * (tests/gpu/emu/test_batch_emu.cpp checks it for every element type, nb 1..16 and odd shapes).
 * The prologue and the fused epilogues are not here: the batched step runs rmsnorm_kernel
 * before, and qkv_post_paged_kernel / gated_kernel after, which store what gemv_kernel's fused
 * GV_NORM / GV_QKV / GV_GLU store (test_gemv_emu.cpp checks those equalities).
 *
 * The input is read from global memory (every warp of a block reads the same pieces: L1 hits),
 * not staged in shared memory as gemv_kernel stages its one row: GVB_MAX rows of a 14336-wide
 * SwiGLU input would not fit. Past the row's end a piece is zero-padded, as the staged input is.
 * xvec: X's rows are read 16 bytes at a time (cols and ldx multiples of V, X 16-byte aligned);
 * vec as gemv_kernel's. A batch of more than GVB_MAX runs as several launches (the host's loop).
 * CPU reference: cairn__matvec (gpu/cpu/kernels_cpu.c) for each row of X.
 * grid (any), block GV_WARPS * 32, dynamic shared memory gvb_smem_bytes(cols, sizeof(T)) */
#define GVB_MAX 8 /* inputs a launch: 2 x 8 lane sums and 2 x 8 row sums stay in registers */
__host__ __device__ constexpr size_t gvb_smem_bytes(int cols, int elem)
{
    return (size_t)GV_WARPS * GVB_MAX * gv_segs(cols, elem) * 4;
}

/* piece c of input row xr (cols elements): one 16-byte load (xvec), or element by element with
 * zeros past the row's end (the staged input's zero padding) */
template <typename T>
__device__ __forceinline__ uint4 gvb_in(const T *__restrict__ xr, int c, int cols, int xvec)
{
    if (xvec)
        return ((const uint4 *)xr)[c];
    constexpr int V = 16 / sizeof(T);
    uint4 u;
    T *t = (T *)&u;
#pragma unroll
    for (int k = 0; k < V; k++)
        t[k] = c * V + k < cols ? xr[c * V + k] : from_f32<T>(0.0f);
    return u;
}

template <typename T, int SK>
__global__ void __launch_bounds__(GV_WARPS * 32)
    gemv_batch_kernel(const T *__restrict__ W, int rows, int cols, int vec, const T *__restrict__ X,
                      int ldx, int xvec, int nb, float beta, float *__restrict__ Y, int ldy)
{
    extern __shared__ float gvb_part[]; /* [slot][row][input][segment], SK > 1 */
    static_assert(GV_WARPS % SK == 0, "a block holds whole groups");
    const int pieces = gv_pieces(cols, (int)sizeof(T)), segs = gv_segs(cols, (int)sizeof(T));
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int groups = (rows + 1) / 2;
    const int gpb = GV_WARPS / SK, slot = w / SK, slice = w % SK;
    const int per = (segs + SK - 1) / SK, s_lo = slice * per;
    const int s_hi = s_lo + per < segs ? s_lo + per : segs;
    pdl_launch_dependents();
    pdl_wait(); /* X and Y come from the kernels before */
    /* g0 is the same in every warp of the block, so the barriers below are the whole block's */
    for (int g0 = blockIdx.x * gpb; g0 < groups; g0 += gridDim.x * gpb) {
        const int g = g0 + slot;
        int rr[GV_ROWS] = {2 * g, 2 * g + 1 < rows ? 2 * g + 1 : 2 * g};
        float tot[GV_ROWS][GVB_MAX];
#pragma unroll
        for (int r = 0; r < GV_ROWS; r++)
#pragma unroll
            for (int b = 0; b < GVB_MAX; b++)
                tot[r][b] = 0.0f;
        if (g < groups && s_lo < s_hi) {
            const T *wr[GV_ROWS];
#pragma unroll
            for (int r = 0; r < GV_ROWS; r++)
                wr[r] = W + (size_t)rr[r] * (size_t)cols;
            for (int s = s_lo; s < s_hi; s++) {
                const int c0 = s * GV_SEG + lane;
                uint4 wv[GV_ROWS][GV_U];
#pragma unroll
                for (int u = 0; u < GV_U; u++)
#pragma unroll
                    for (int r = 0; r < GV_ROWS; r++)
                        wv[r][u] = c0 + 32 * u < pieces ? gv_piece(wr[r], c0 + 32 * u, cols, vec)
                                                        : make_uint4(0, 0, 0, 0);
                float ls[GV_ROWS][GVB_MAX]; /* the lane's sums of this segment, each from 0 */
#pragma unroll
                for (int r = 0; r < GV_ROWS; r++)
#pragma unroll
                    for (int b = 0; b < GVB_MAX; b++)
                        ls[r][b] = 0.0f;
#pragma unroll
                for (int u = 0; u < GV_U; u++)
                    if (c0 + 32 * u < pieces)
#pragma unroll
                        for (int b = 0; b < GVB_MAX; b++)
                            if (b < nb) {
                                const uint4 x =
                                    gvb_in(X + (size_t)b * (size_t)ldx, c0 + 32 * u, cols, xvec);
#pragma unroll
                                for (int r = 0; r < GV_ROWS; r++)
                                    ls[r][b] = dot16(wv[r][u], x, ls[r][b], T());
                            }
#pragma unroll
                for (int r = 0; r < GV_ROWS; r++)
#pragma unroll
                    for (int b = 0; b < GVB_MAX; b++)
                        if (b < nb) { /* nb is the same in every lane: whole-warp sums */
                            const float v = warp_sum(ls[r][b]);
                            if (SK == 1)
                                tot[r][b] += v;
                            else if (lane == 0)
                                gvb_part[((slot * GV_ROWS + r) * GVB_MAX + b) * segs + s] = v;
                        }
            }
        }
        if (SK > 1) { /* the group's segment sums, added in order by its first warp */
            __syncthreads();
            if (slice == 0 && lane == 0 && g < groups)
#pragma unroll
                for (int r = 0; r < GV_ROWS; r++)
#pragma unroll
                    for (int b = 0; b < GVB_MAX; b++)
                        if (b < nb) {
                            float t = 0.0f;
                            for (int s = 0; s < segs; s++)
                                t += gvb_part[((slot * GV_ROWS + r) * GVB_MAX + b) * segs + s];
                            tot[r][b] = t;
                        }
            __syncthreads(); /* gvb_part is written again in the next round */
        }
        if (lane == 0 && slice == 0 && g < groups)
#pragma unroll
            for (int b = 0; b < GVB_MAX; b++)
                if (b < nb) {
                    float *y = Y + (size_t)b * (size_t)ldy;
#pragma unroll
                    for (int r = 0; r < GV_ROWS; r++)
                        if (r == 0 || 2 * g + 1 < rows) /* the last group of odd rows has one */
                            y[rr[r]] = beta != 0.0f ? tot[r][b] + beta * y[rr[r]] : tot[r][b];
                }
    }
}

#endif /* CAIRN_GPU_CUDA_KERNELS_GEMV_CUH */

/* gpu/cuda/kernels_attention.cuh - attention over the KV cache: a single token's split over
 * the keys (attention_split_kernel, flash-decoding, merged by the last block of each head; and
 * attention_paged_kernel, the same for many sequences over a paged pool's block tables) and a
 * prompt chunk's tiles of tokens (attention_tile_kernel). The design is in the comment of
 * att_block below.
 */
#ifndef CAIRN_GPU_CUDA_KERNELS_ATTENTION_CUH
#define CAIRN_GPU_CUDA_KERNELS_ATTENTION_CUH

#include "gpu/cuda/kernels_common.cuh"

#define ATT_DECODE_WARPS                                                                           \
    8 /* warps a block of a single token's attention (80 registers: 3 blocks an SM) */
#define ATT_DECODE_U 4 /* keys a decode warp loads at once */
#define ATT_MAX_HD 256 /* largest head dimension the attention kernel holds in registers */

/* ---- attention ---------------------------------------------------------------------------
 *
 * CPU reference: attention_range (gpu/cpu/backend_cpu.c).
 * For token i (position p = *pos + i) and head h (kv head h / (n_heads / n_kv)):
 *   softmax(q_ih (hd) . K[lo..p] (t, hd) * scale) @ V[lo..p] (t, hd) -> out (n,
 * n_heads*hd)[i, h]; q is read from the rows of qkv (ld floats apart). lo is 0, or with a
 * sliding window of swa positions (a layer's, Mistral's, phi3's, gemma's: swa > 0) att_first:
 * p - swa + 1 once p >= swa, the rule of the CPU's attention_range. A score q . k * scale is
 * soft-capped (att_cap) before the softmax when cap > 0.
 *
 * att_block is the work of one block over keys [lo, hi): each warp runs an online softmax over
 * groups of U consecutive keys (warp w takes groups w, w + WARPS, ...), each lane holding hd/32
 * elements of q and of its running output. A group's K and V rows are all loaded before any of
 * its results is needed, so a warp has 2 * U rows in flight instead of waiting on one load after
 * another. The warps' partial results then meet in shared memory: the block's largest score M,
 * its sum L of exp(score - M) and its unnormalized output exp(score - M) @ V.
 *
 * attention_split_kernel (a single token): n_heads blocks alone would leave most of the GPU
 * idle while each waits on its keys one group after another, so the keys are split over
 * att_splits(n_heads) blocks per head (flash-decoding). Each block leaves its (M, L, output) in
 * part; the last block of a head to finish (a counter per head, which it resets) merges the
 * splits in order 0, 1, ... and writes the head's output. Every order is fixed, so a step
 * computes the same bits each time; the split count depends on the model only.
 * attention_tile_kernel (prompt chunks, below): a tile of tokens of one head a block, sharing
 * each key and value the cache gives among the tile's queries.
 * C is the cache's element type, float or __half (widened exactly as it is read: the float
 * arithmetic on the widened values, as on the CPU). hd <= ATT_MAX_HD */
/* blocks a single token's attention aims at, over all heads: one wave on an H100/H200 (132 SMs,
 * 3 blocks each) */
#define ATT_SPLIT_BLOCKS 256
#define ATT_MAX_SPLITS 16
static_assert(ATT_MAX_SPLITS <= 32, "the merge reads one split a lane of one warp");
__host__ __device__ __forceinline__ int att_splits(int n_heads)
{
    const int s = (ATT_SPLIT_BLOCKS + n_heads - 1) / n_heads;
    return s < 1 ? 1 : s > ATT_MAX_SPLITS ? ATT_MAX_SPLITS : s;
}

/* a score, soft-capped to cap * tanh(s / cap) when cap > 0 (gemma2; the CPU's attn_softcap) */
__device__ __forceinline__ float att_cap(float s, float cap)
{
    return cap > 0.0f ? __fmul_rn(cap, tanhf(__fdiv_rn(s, cap))) : s;
}

/* the first key position p attends to: its window's (swa > 0), else 0 */
__host__ __device__ __forceinline__ int att_first(int p, int swa)
{
    return swa > 0 && p >= swa ? p - swa + 1 : 0;
}

/* Where key t's row is among a layer's cache rows: the positional cache holds position t in
 * row t; the paged pool (gpu/batch.c) in row blocks[t / ATT_KV_BLOCK] * ATT_KV_BLOCK + t %
 * ATT_KV_BLOCK of its n_blocks * ATT_KV_BLOCK rows. Only addresses differ: the arithmetic on
 * the keys is the same either way. */
#define ATT_KV_BLOCK 16 /* CAIRN__KV_BLOCK (gpu/backend.h; the backend asserts they agree) */
struct att_rows_flat {
    __device__ __forceinline__ size_t operator()(int t) const { return (size_t)t; }
};
struct att_rows_paged {
    const int *__restrict__ blocks; /* the sequence's block table */
    __device__ __forceinline__ size_t operator()(int t) const
    {
        return (size_t)blocks[t / ATT_KV_BLOCK] * ATT_KV_BLOCK + (size_t)(t % ATT_KV_BLOCK);
    }
};

/* the block's shared memory for att_block */
template <int WARPS> struct att_smem {
    float m[WARPS], l[WARPS];
    float acc[WARPS][ATT_MAX_HD];
};

/* Keys [lo, hi) of head h against q: every thread gets the block's M and L; sm.acc[v] holds
 * warp v's output and sm.m[v] its largest score (merged by att_block_out). lo < hi. Key t is
 * row rows(t) of K and V (att_rows_flat, att_rows_paged). */
template <int WARPS, int U, typename C, typename ROWS>
__device__ __forceinline__ void att_block(const float *__restrict__ q, const C *__restrict__ K,
                                          const C *__restrict__ V, int kv_dim, int hd, float scale,
                                          float cap, int lo, int hi, att_smem<WARPS> &sm,
                                          float *M_out, float *L_out, ROWS rows)
{
    constexpr int NK = ATT_MAX_HD / 32;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float qr[NK], acc[NK];
#pragma unroll
    for (int k = 0; k < NK; k++) {
        const int e = lane + 32 * k;
        qr[k] = e < hd ? q[e] : 0.0f;
        acc[k] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int t0 = lo + w * U; t0 < hi; t0 += WARPS * U) {
        float s[U], vv[U][NK];
#pragma unroll
        for (int u = 0; u < U; u++) {
            /* a key past the range is read from its last row (in bounds) and weighs 0 */
            const int t = t0 + u < hi ? t0 + u : hi - 1;
            const size_t rt = rows(t);
            const C *kr = K + rt * (size_t)kv_dim, *vr = V + rt * (size_t)kv_dim;
            float d = 0.0f;
#pragma unroll
            for (int k = 0; k < NK; k++) {
                const int e = lane + 32 * k;
                if (e < hd) {
                    d += qr[k] * to_f32(kr[e]);
                    vv[u][k] = to_f32(vr[e]);
                } else
                    vv[u][k] = 0.0f;
            }
            s[u] = d;
        }
        float mn = m;
#pragma unroll
        for (int u = 0; u < U; u++) {
            s[u] = t0 + u < hi ? att_cap(warp_sum(s[u]) * scale, cap) : -INFINITY;
            mn = fmaxf(mn, s[u]);
        }
        const float corr = expf(m - mn); /* 0 for the first group (m = -inf; mn is finite) */
        float pr[U];
        l *= corr;
#pragma unroll
        for (int u = 0; u < U; u++) {
            pr[u] = expf(s[u] - mn); /* 0 for keys past the range */
            l += pr[u];
        }
#pragma unroll
        for (int k = 0; k < NK; k++) {
            float a = acc[k] * corr;
#pragma unroll
            for (int u = 0; u < U; u++)
                a += pr[u] * vv[u][k];
            acc[k] = a;
        }
        m = mn;
    }
    if (lane == 0) {
        sm.m[w] = m;
        sm.l[w] = l;
    }
#pragma unroll
    for (int k = 0; k < NK; k++) {
        const int e = lane + 32 * k;
        if (e < hd)
            sm.acc[w][e] = acc[k];
    }
    __syncthreads();
    /* warp 0 saw key lo, so M is finite; a warp that saw no key has m = -inf and contributes
     * exp(-inf) = 0 */
    float M = -INFINITY;
    for (int v = 0; v < WARPS; v++)
        M = fmaxf(M, sm.m[v]);
    float L = 0.0f;
    for (int v = 0; v < WARPS; v++)
        L += sm.l[v] * expf(sm.m[v] - M);
    *M_out = M;
    *L_out = L;
}

/* element e of the block's unnormalized output, after att_block */
template <int WARPS>
__device__ __forceinline__ float att_block_out(const att_smem<WARPS> &sm, float M, int e)
{
    float s = 0.0f;
    for (int v = 0; v < WARPS; v++)
        s += sm.acc[v][e] * expf(sm.m[v] - M);
    return s;
}

/* CPU reference: attention_range (gpu/cpu/backend_cpu.c), for a prompt chunk.
 * The prompt's attention, a tile of TQ consecutive tokens of one head per block (flash
 * attention on the CUDA cores): the block stages the tile's q rows once, then walks the keys in
 * chunks of KC, staging each chunk's K and V rows (widened to float) in shared memory, where
 * every query of the tile reads them: the cache is read once per tile rather than once per
 * token. Warp w takes the tile's queries w, w + ATT_TILE_WARPS, ...; for each, lane t scores
 * key c0 + t of the chunk (masked past the query's own position), the warp keeps the online
 * softmax's running max and sum, and lane l accumulates output elements l, l + 32, ... with each
 * key's weight taken from its lane by a shuffle. With a window (swa > 0) the chunks before the
 * tile's first window are not staged, and a query skips the chunks before its own window and
 * masks the keys before it. Rows of Qs and Ks are HDM + 1 floats apart so
 * that the 32 lanes reading 32 different keys' element e hit 32 different banks.
 * qkv (n, ld) rows [q | k | v], token i at position *pos + i; the cache holds positions up to
 * the chunk's last; out (n, n_heads * hd). grid (n_heads, ceil(n / TQ)), block ATT_TILE_WARPS *
 * 32; hd <= HDM, KC <= 32; shared memory (TQ + KC) (HDM + 1) + KC HDM floats (< 48 KB). */
#define ATT_TILE_WARPS 8
template <typename T, int TQ, int KC, int HDM, typename C>
__global__ void __launch_bounds__(ATT_TILE_WARPS * 32)
    attention_tile_kernel(const float *__restrict__ qkv, int ld, const C *__restrict__ kc,
                          const C *__restrict__ vc, const int *__restrict__ pos, int n, int n_heads,
                          int n_kv, int hd, int swa, float scale, float cap, T *__restrict__ out,
                          int *__restrict__ ovf)
{
    static_assert(KC <= 32 && TQ % ATT_TILE_WARPS == 0 && HDM % 32 == 0, "tile shape");
    constexpr int QPW = TQ / ATT_TILE_WARPS, NE = HDM / 32; /* queries a warp, elements a lane */
    __shared__ float Qs[TQ][HDM + 1], Ks[KC][HDM + 1], Vs[KC][HDM];
    const int h = blockIdx.x, i0 = blockIdx.y * TQ, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int nq = n - i0 < TQ ? n - i0 : TQ, p0 = *pos + i0;
    const int kv_dim = n_kv * hd, kvh = h / (n_heads / n_kv), keys = p0 + nq;
    for (int j = threadIdx.x; j < nq * hd; j += blockDim.x)
        Qs[j / hd][j % hd] = qkv[(size_t)(i0 + j / hd) * (size_t)ld + (size_t)h * hd + j % hd];
    float m[QPW], l[QPW], o[QPW][NE];
#pragma unroll
    for (int a = 0; a < QPW; a++) {
        m[a] = -INFINITY;
        l[a] = 0.0f;
#pragma unroll
        for (int k = 0; k < NE; k++)
            o[a][k] = 0.0f;
    }
    for (int c0 = att_first(p0, swa) / KC * KC; c0 < keys; c0 += KC) {
        __syncthreads(); /* the chunk before is read by every warp (and Qs written, the first time)
                          */
        for (int j = threadIdx.x; j < KC * hd; j += blockDim.x) {
            const int t = j / hd, e = j % hd, key = c0 + t;
            const size_t at = (size_t)key * (size_t)kv_dim + (size_t)kvh * hd + e;
            Ks[t][e] = key < keys ? to_f32(kc[at]) : 0.0f;
            Vs[t][e] = key < keys ? to_f32(vc[at]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int a = 0; a < QPW; a++) {
            const int q = w + a * ATT_TILE_WARPS, p = p0 + q; /* this query's position */
            const int lo = att_first(p, swa);
            /* warp-uniform: past the tile, or a chunk it does not see (after it, before its
             * window) */
            if (q >= nq || c0 > p || c0 + KC <= lo)
                continue;
            const int key = c0 + lane;
            float sc = -INFINITY;
            if (lane < KC && key <= p && key >= lo) {
                float d = 0.0f;
                for (int e = 0; e < hd; e++)
                    d += Qs[q][e] * Ks[lane][e];
                sc = att_cap(d * scale, cap);
            }
            float mc = sc;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                mc = fmaxf(mc, __shfl_xor_sync(0xffffffffu, mc, off));
            const float mn = fmaxf(m[a], mc); /* finite: a key of [lo, p] is in the chunk */
            const float corr = expf(m[a] - mn), pt = expf(sc - mn); /* 0 for masked keys */
            l[a] = l[a] * corr + warp_sum(pt);
#pragma unroll
            for (int k = 0; k < NE; k++)
                o[a][k] *= corr;
            for (int t = 0; t < KC; t++) {
                const float pw = __shfl_sync(0xffffffffu, pt, t);
#pragma unroll
                for (int k = 0; k < NE; k++)
                    if (lane + 32 * k < hd)
                        o[a][k] += pw * Vs[t][lane + 32 * k];
            }
            m[a] = mn;
        }
    }
#pragma unroll
    for (int a = 0; a < QPW; a++) {
        const int q = w + a * ATT_TILE_WARPS;
        if (q >= nq)
            continue;
        T *orow = out + (size_t)(i0 + q) * (size_t)n_heads * hd + (size_t)h * hd;
#pragma unroll
        for (int k = 0; k < NE; k++)
            if (lane + 32 * k < hd)
                orow[lane + 32 * k] = to_t_checked<T>(o[a][k] / l[a], ovf);
    }
}

/* Split sp of splits of one head's single-token attention (the block's part of
 * attention_split_kernel and attention_paged_kernel, which differ only in where the rows are):
 * q the head's query (hd), K, V its kv head's column of the cache (rows kv_dim apart, key t in
 * row rows(t)), first..keys-1 the positions attended to, split evenly, ph (splits, 2 + hd) the
 * head's partial results, *count its counter (zero between launches), o its output (hd). */
template <typename T, int WARPS, int U, typename C, typename ROWS>
__device__ __forceinline__ void
att_split_head(const float *__restrict__ q, const C *__restrict__ K, const C *__restrict__ V,
               ROWS rows, int first, int keys, int kv_dim, int hd, float scale, float cap, int sp,
               int splits, float *__restrict__ ph, int *__restrict__ count, T *__restrict__ o,
               int *__restrict__ ovf)
{
    __shared__ att_smem<WARPS> sm;
    __shared__ int is_last;
    const int len = (keys - first + splits - 1) / splits, lo = first + sp * len;
    const int hi = lo + len < keys ? lo + len : keys;
    float *mine = ph + (size_t)sp * (size_t)(2 + hd);
    if (lo < hi) {
        float M, L;
        att_block<WARPS, U>(q, K, V, kv_dim, hd, scale, cap, lo, hi, sm, &M, &L, rows);
        for (int e = threadIdx.x; e < hd; e += blockDim.x)
            mine[2 + e] = att_block_out(sm, M, e);
        if (threadIdx.x == 0) {
            mine[0] = M;
            mine[1] = L;
        }
    } else { /* no keys here (a short context): weighs nothing */
        for (int e = threadIdx.x; e < hd; e += blockDim.x)
            mine[2 + e] = 0.0f;
        if (threadIdx.x == 0) {
            mine[0] = -INFINITY;
            mine[1] = 0.0f;
        }
    }
    /* the last block of this head to get here merges: publish, then count */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        is_last = atomicAdd(count, 1) == splits - 1;
    __syncthreads();
    if (!is_last)
        return; /* the whole block */
    __threadfence();
    /* each split's weight exp(M_v - M) (0 for an empty one) and share of L, read at once by
     * the first warp; then every thread adds them in split order */
    __shared__ float sw[ATT_MAX_SPLITS], sl[ATT_MAX_SPLITS];
    if (threadIdx.x < 32) {
        const int v = threadIdx.x;
        const float mv = v < splits ? __ldcg(ph + (size_t)v * (2 + hd)) : -INFINITY;
        const float lv = v < splits ? __ldcg(ph + (size_t)v * (2 + hd) + 1) : 0.0f;
        float M = mv; /* split 0 holds key first: finite */
#pragma unroll
        for (int d = 16; d > 0; d >>= 1)
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, d));
        if (v < splits) {
            sw[v] = mv == -INFINITY ? 0.0f : expf(mv - M);
            sl[v] = lv * sw[v];
        }
    }
    __syncthreads();
    float L = 0.0f;
    for (int v = 0; v < splits; v++)
        L += sl[v];
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float s = 0.0f;
#pragma unroll
        for (int v = 0; v < ATT_MAX_SPLITS; v++)
            if (v < splits)
                s += __ldcg(ph + (size_t)v * (2 + hd) + 2 + e) * sw[v];
        o[e] = to_t_checked<T>(s / L, ovf);
    }
    if (threadIdx.x == 0)
        *count = 0; /* for the next step */
}

/* One token (row 0 of qkv), its keys att_first(*pos, swa)..*pos. part (n_heads, splits, 2 + hd):
 * a split's M, L and unnormalized output; count (n_heads): zero between launches. grid
 * (n_heads, splits), splits <= ATT_MAX_SPLITS (as att_splits gives), block WARPS * 32 */
template <typename T, int WARPS, int U, typename C>
__global__ void __launch_bounds__(WARPS * 32)
    attention_split_kernel(const float *__restrict__ qkv, const C *__restrict__ kc,
                           const C *__restrict__ vc, const int *__restrict__ pos, int n_heads,
                           int n_kv, int hd, int swa, float scale, float cap,
                           float *__restrict__ part, int *__restrict__ count, T *__restrict__ out,
                           int *__restrict__ ovf)
{
    pdl_launch_dependents();
    pdl_wait(); /* q and the cache come from the kernel before */
    const int h = blockIdx.x, splits = gridDim.y, kvh = h / (n_heads / n_kv), p = *pos;
    att_split_head<T, WARPS, U>(
        qkv + (size_t)h * hd, kc + (size_t)kvh * hd, vc + (size_t)kvh * hd, att_rows_flat(),
        att_first(p, swa), p + 1, n_kv * hd, hd, scale, cap, (int)blockIdx.y, splits,
        part + (size_t)h * splits * (size_t)(2 + hd), count + h, out + (size_t)h * hd, ovf);
}

/* CPU reference: attention_range (gpu/cpu/backend_cpu.c) over a sequence's paged keys.
 * The decode steps of n_seqs sequences over the paged pool (gpu/batch.c): sequence s's token
 * (row s of qkv, ld floats apart) at position pos[s] attends to its positions
 * att_first(pos[s], swa)..pos[s], key t
 * in row blocks[s * bt_ld + t / ATT_KV_BLOCK] * ATT_KV_BLOCK + t % ATT_KV_BLOCK of this layer's
 * pool kc, vc (n_blocks * ATT_KV_BLOCK, n_kv * hd). Each (sequence, head) is exactly
 * attention_split_kernel's head: the same splits (att_splits(n_heads)), the same keys in each,
 * the same merge order, so its output is bit for bit what the contiguous kernel gives the same
 * keys in a positional cache, whichever other sequences share the launch. part (n_seqs,
 * n_heads, splits, 2 + hd), count (n_seqs, n_heads): zero between launches; out (n_seqs,
 * n_heads * hd). grid (n_seqs * n_heads, splits), block WARPS * 32 */
template <typename T, int WARPS, int U, typename C>
__global__ void __launch_bounds__(WARPS * 32)
    attention_paged_kernel(const float *__restrict__ qkv, int ld, const C *__restrict__ kc,
                           const C *__restrict__ vc, const int *__restrict__ pos,
                           const int *__restrict__ blocks, int bt_ld, int n_heads, int n_kv, int hd,
                           int swa, float scale, float cap, float *__restrict__ part,
                           int *__restrict__ count, T *__restrict__ out, int *__restrict__ ovf)
{
    pdl_launch_dependents();
    pdl_wait(); /* q and the pool come from the kernel before */
    const int s = (int)blockIdx.x / n_heads, h = (int)blockIdx.x % n_heads, splits = gridDim.y;
    const int kvh = h / (n_heads / n_kv), sh = s * n_heads + h;
    att_split_head<T, WARPS, U>(
        qkv + (size_t)s * (size_t)ld + (size_t)h * hd, kc + (size_t)kvh * hd, vc + (size_t)kvh * hd,
        att_rows_paged{blocks + (size_t)s * (size_t)bt_ld}, att_first(pos[s], swa), pos[s] + 1,
        n_kv * hd, hd, scale, cap, (int)blockIdx.y, splits,
        part + (size_t)sh * splits * (size_t)(2 + hd), count + sh, out + (size_t)sh * hd, ovf);
}

#endif /* CAIRN_GPU_CUDA_KERNELS_ATTENTION_CUH */

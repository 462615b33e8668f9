/* gpu/cpu/kernels_cpu_avx512.c - the decode kernels for CPUs with AVX-512 (F, BW, VL, VNNI, VBMI):
 * the products of the types of 32-value blocks (Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS)
 * with one token (the decode's rows kernels) and with tiles of tokens (the prompt's and the
 * batched decode's), one kernel for both; Q4_K's likewise, the other K-quants' dot products (see
 * their sections below), the F32, F16 and BF16 dot products, axpy, and one head's attention over
 * a float or half cache. gpu/cpu/kernels_cpu.c picks these at run time, like its AVX2 kernels.
 *
 * Two ideas make the quantized products cheap. First, several blocks are handled in one pass
 * of 512-bit registers (four blocks of four rows, the next section): byte
 * permutes (vpermt2b) gather the values out of the interleaved scale/value layout, and vpdpbusd
 * (unsigned weight x signed int8 activation, 4 products per 32-bit lane) sums them in int32
 * lanes, exactly. Second, the activation is rearranged once per product into the kernel's lane
 * order (quad_prep), with its scales and the offset that makes the weights
 * unsigned (Q4_0: (q - 8) . a = q . a - 8 sum(a)) folded into the starting value of the dot
 * product, so per row nothing but the weights' own decoding remains; the activation is shared by
 * the rows of a pass, and the decoded weights by the tokens of a tile.
 */
#include "gpu/cpu/kernels_cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "gpu/gguf.h" /* the type ids */
#include "gpu/quant.h"

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,f16c")))

/* The tiles: 4 rows (one register of (row, block) lanes) x 8 tokens, an accumulator each. Thread
 * CPU time, 1 thread, a 2048 x 2048 matrix in cache, us per token at 64 tokens, on this Zen 5 VM
 * with the load of 4 of others on its 2 cores: Q4_0 35 -> 23, Q8_0 50.6 -> 34 over the kernel
 * before (a lane per 4 or 8 products of one row, 4 x 4 tiles); one token (the decode) 49 -> 56 and
 * 82 -> 95 in cache, where the decode's weights come from memory at every size that matters. */
#define QUAD_RR 4
#define QUAD_TT 8

/* ---- the types of 32-value blocks: the decode's and the prompt's product, one kernel -------
 * Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS (whose 256-value super-block is 8 blocks of
 * IQ4_NL's values under one header). One kernel serves one token (the decode, the rows kernels)
 * and tiles of tokens (the prompt and the batched decode, the tile kernels), so every output is
 * bit for bit the same in both. It takes 4 rows and 4 blocks (a quad) at a time, lane 4r + b of
 * a register holding row r's block b: a byte permute gathers each row's quad into four 128-bit
 * lanes of 4-byte groups (lane k: bytes 4k..4k+3 of the 4 blocks' values; Q8_0 takes two
 * permutes, for groups 0-3 and 4-7), and 128-bit shuffles of the 4 rows turn those into
 * registers with lane 4r + b = row r, block b, group k. Then every type's values are made
 * unsigned bytes:
 *   - Q4_0, Q4_1: the nibbles split by a shift and two ANDs (0..15);
 *   - IQ4_NL, IQ4_XS: the nibbles, then a byte shuffle of the 16 levels plus 128 (1..241);
 *   - Q5_0, Q5_1: each row's nibbles before the shuffles, with the fifth bit of every value taken
 *     from the block's 32-bit qh word by one vpmultishiftqb (each byte picks its own bit to
 *     bit 4) and one ternary OR (0..31), so they are two registers a row, as Q8_0's;
 *   - Q8_0: an XOR with 0x80 (w + 128).
 * The offset that made them unsigned comes back as -off * sum(a) (off 8, 16 or 128), prepared
 * with the activation as the dot product's starting value; Q4_1's and Q5_1's minimum m, whose
 * values need no offset, multiplies d_x * sum(a), prepared instead. A token then costs 8 vpdpbusd
 * (each lane summing its block's 32 products exactly, the activation's 16 bytes of group k
 * broadcast to the 4 rows), one conversion, one scale product and one multiply-add per 16
 * (row, block) pairs (a second multiply-add for the minimum), where the layout before this one
 * (a lane per 4 or 8 products of one row) spent those float operations 4 or 8 times over; the
 * weights' decoding is shared by the tile's tokens.
 *
 * The float order, the same for every row wherever it sits and however many tokens share the
 * pass: block b of the row (quad b / 4, phase b % 4) is added as d_w * d_x * (its exact integer
 * sum) into accumulator b % 4 (then m_w * (d_x sum(a)) where there is a minimum), one
 * multiply-add after the other in block order, and the row's result is (acc0 + acc1) +
 * (acc2 + acc3). Rows whose block count is not a multiple of 4 end on a quad filled with zeros
 * (weights, scales and activation), which adds exact zeros. */

/* The shuffles the (row, block) lane kernels share. transpose4: K[k], 128-bit lane r = lane k of
 * X[r] (4 rows' gathered registers into lanes 4r + b). lanes4: X lane 4r + b = the sum of the
 * four 128-bit lanes of pr[r] at dword b (one token's products, each row summed into its lanes).
 * store_rows: out[t * ld + r] = (acc0 + acc1) + (acc2 + acc3) of acc[t]'s lanes 4r.., r < R. */
AVX512 static inline __attribute__((always_inline)) void transpose4(const __m512i X[4],
                                                                    __m512i K[4])
{
    const __m512i t0 = _mm512_shuffle_i32x4(X[0], X[1], 0x44),
                  t1 = _mm512_shuffle_i32x4(X[0], X[1], 0xEE),
                  t2 = _mm512_shuffle_i32x4(X[2], X[3], 0x44),
                  t3 = _mm512_shuffle_i32x4(X[2], X[3], 0xEE);
    K[0] = _mm512_shuffle_i32x4(t0, t2, 0x88), K[1] = _mm512_shuffle_i32x4(t0, t2, 0xDD);
    K[2] = _mm512_shuffle_i32x4(t1, t3, 0x88), K[3] = _mm512_shuffle_i32x4(t1, t3, 0xDD);
}

AVX512 static inline __attribute__((always_inline)) __m512i lanes4(const __m512i pr[4])
{
    const __m512i t01 = _mm512_add_epi32(_mm512_shuffle_i32x4(pr[0], pr[1], 0x44),
                                         _mm512_shuffle_i32x4(pr[0], pr[1], 0xEE));
    const __m512i t23 = _mm512_add_epi32(_mm512_shuffle_i32x4(pr[2], pr[3], 0x44),
                                         _mm512_shuffle_i32x4(pr[2], pr[3], 0xEE));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(t01, t23, 0x88),
                            _mm512_shuffle_i32x4(t01, t23, 0xDD));
}

AVX512 static inline __attribute__((always_inline)) void
store_rows(const __m512 *acc, const int T, const int R, float *out, size_t ld)
{
    const __m512i pick = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        __m512 u = _mm512_add_ps(acc[t], _mm512_permute_ps(acc[t], 0xB1));
        u = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4E));
        _mm_mask_storeu_ps(out + (size_t)t * ld, (__mmask8)((1u << R) - 1),
                           _mm512_castps512_ps128(_mm512_permutexvar_ps(pick, u)));
    }
}

/* the first v of the 64 bytes at p (all of them for v >= 64, none for v <= 0), zeros after */
AVX512 static inline __m512i load_upto(const uint8_t *p, int64_t v)
{
    if (v >= 64)
        return _mm512_loadu_si512(p);
    return v <= 0 ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi8(((__mmask64)1 << v) - 1, p);
}

/* Byte 16k + 4b + e of a row's gathered quad: byte B b + O + 4k + e of the quad (blocks of B
 * bytes, their values at O; >= 64: the second register). */
#define GQ_(B, O, k, b)                                                                            \
    (B) * (b) + (O) + 4 * (k), (B) * (b) + (O) + 4 * (k) + 1, (B) * (b) + (O) + 4 * (k) + 2,       \
        (B) * (b) + (O) + 4 * (k) + 3
#define GQK_(B, O, k) GQ_(B, O, k, 0), GQ_(B, O, k, 1), GQ_(B, O, k, 2), GQ_(B, O, k, 3)
#define GQ(B, O)                                                                                   \
    {                                                                                              \
        GQK_(B, O, 0), GQK_(B, O, 1), GQK_(B, O, 2), GQK_(B, O, 3)                                 \
    }
/* byte 16k + 4b + e: byte e of block b's 32-bit qh word at H (every 128-bit lane alike) */
#define GH_(B, H, b) (B) * (b) + (H), (B) * (b) + (H) + 1, (B) * (b) + (H) + 2, (B) * (b) + (H) + 3
#define GHK_(B, H) GH_(B, H, 0), GH_(B, H, 1), GH_(B, H, 2), GH_(B, H, 3)
#define GH(B, H)                                                                                   \
    {                                                                                              \
        GHK_(B, H), GHK_(B, H), GHK_(B, H), GHK_(B, H)                                             \
    }
/* vpmultishiftqb's control for byte 16k + 4b + e of a gathered row: the bit of element
 * base + 4 + 4k + e of block b's qh word (dword b % 2 of the byte's qword) to bit 4 */
#define MS_(k, b, base)                                                                            \
    (32 * ((b) % 2) + (base) + 4 * (k)) & 63, (32 * ((b) % 2) + (base) + 4 * (k) + 1) & 63,        \
        (32 * ((b) % 2) + (base) + 4 * (k) + 2) & 63, (32 * ((b) % 2) + (base) + 4 * (k) + 3) & 63
#define MSK_(k, base) MS_(k, 0, base), MS_(k, 1, base), MS_(k, 2, base), MS_(k, 3, base)
#define MS(base)                                                                                   \
    {                                                                                              \
        MSK_(0, base), MSK_(1, base), MSK_(2, base), MSK_(3, base)                                 \
    }

static const uint8_t g_q4_0[64] = GQ(18, 2), g_q8_0a[64] = GQ(34, 2), g_q8_0b[64] = GQ(34, 10),
                     g_q4_1[64] = GQ(20, 4), g_q5_0[64] = GQ(22, 6), g_q5_1[64] = GQ(24, 8),
                     g_xs[64] = GQ(16, 0), h_q5_0[64] = GH(22, 2), h_q5_1[64] = GH(24, 4),
                     ms_lo[64] = MS(-4), ms_hi[64] = MS(12);
/* words b and 4 + b of a row's scale permute: block b's d and (Q4_1, Q5_1) m, B / 2 words apart */
#define GS(B)                                                                                      \
    {                                                                                              \
        0, (B) / 2, (B), 3 * (B) / 2, 1, (B) / 2 + 1, (B) + 1, 3 * (B) / 2 + 1                     \
    }
static const uint16_t s_q4_1[32] = GS(20), s_q5_0[32] = GS(22), s_q5_1[32] = GS(24);

/* byte 4b + e of lane r of the IQ4_XS scale permute (row r's header at byte 8r): scales_l byte
 * 2h + b / 2, scales_h byte h, the two bytes of d */
#define XSB_(r, b, h) 8 * (r) + 4 + 2 * (h) + (b) / 2, 8 * (r) + 2 + (h), 8 * (r), 8 * (r) + 1
#define XSR_(r, h) XSB_(r, 0, h), XSB_(r, 1, h), XSB_(r, 2, h), XSB_(r, 3, h)
#define XS(h)                                                                                      \
    {                                                                                              \
        XSR_(0, h), XSR_(1, h), XSR_(2, h), XSR_(3, h)                                             \
    }
static const uint8_t xs_idx[2][64] = {XS(0), XS(1)};

/* IQ4_XS quad h (sub-blocks 4h..4h+3) of 4 rows' super-blocks at w, rb bytes apart: lane 4r + b
 * the scale of row r's sub-block 4h + b, d (ls - 32), as floats */
AVX512 static inline __attribute__((always_inline)) __m512
iq4_xs_scales(const uint8_t *w, size_t rb, const int R, int h)
{
    /* each row's 8 header bytes (d, scales_h, scales_l) as qword r */
    uint64_t hd[4] = {0, 0, 0, 0};
    for (int r = 0; r < R; r++)
        memcpy(&hd[r], w + (size_t)r * rb, 8);
    const __m512i H = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(void *)hd));
    /* lane 4r + b: scales_l byte 2h + b / 2, scales_h byte h, d */
    const __m512i v = _mm512_permutexvar_epi8(_mm512_loadu_si512(xs_idx[h]), H);
    /* ls = (low nibble b % 2 of byte 0) | (bits 2b..2b+1 of byte 1) << 4 */
    const __m512i sl = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i sh = _mm512_set_epi32(14, 12, 10, 8, 14, 12, 10, 8, 14, 12, 10, 8, 14, 12, 10, 8);
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(v, sl), _mm512_set1_epi32(0xF));
    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(v, sh), _mm512_set1_epi32(3));
    const __m512i ls =
        _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(ls));
}

/* rows (R, n) of stride rb bytes @ tokens a[0..T) (each prepared in the type's form) ->
 * out[t * ld + r]; KIND one of CAIRN__QK_*; R <= 4 and T <= 8 constants after inlining, T
 * accumulators in registers */
AVX512 static inline __attribute__((always_inline)) void
quad_tile_avx512(const uint8_t *w, size_t rb, const cairn__xq_quad *const *a, int64_t n, float *out,
                 size_t ld, const int R, const int T, const int KIND)
{
    const uint8_t *gt = KIND == CAIRN__QK_Q8_0     ? g_q8_0a
                        : KIND == CAIRN__QK_Q4_1   ? g_q4_1
                        : KIND == CAIRN__QK_Q5_0   ? g_q5_0
                        : KIND == CAIRN__QK_Q5_1   ? g_q5_1
                        : KIND == CAIRN__QK_IQ4_XS ? g_xs
                                                   : g_q4_0;
    const __m512i ga = _mm512_loadu_si512(gt), gb = _mm512_loadu_si512(g_q8_0b);
    const __m512i gh = _mm512_loadu_si512(KIND == CAIRN__QK_Q5_0 ? h_q5_0 : h_q5_1);
    const __m512i mlo = _mm512_loadu_si512(ms_lo), mhi = _mm512_loadu_si512(ms_hi);
    const __m512i gs = _mm512_loadu_si512(KIND == CAIRN__QK_Q4_1   ? s_q4_1
                                          : KIND == CAIRN__QK_Q5_0 ? s_q5_0
                                                                   : s_q5_1);
    /* Q4_0, IQ4_NL: words 4s + b of the scale permute of two rows' quads, block b's f16 scale
     * (word 9b) of the first (s = 0) or the second row (s = 1, indices from 32); Q8_0: words b of
     * one row's, at word 17b of its first two registers */
    const __m512i s4 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 0, 0, 0, 59, 50, 41, 32, 27, 18, 9, 0);
    const __m512i s8 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 0, 0, 0, 0, 0, 0, 0, 51, 34, 17, 0);
    const __m512i m4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8((char)0x80),
                  b4 = _mm512_set1_epi8(0x10);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_add_epi8(
        _mm_loadu_si128((const __m128i *)(const void *)cairn__iq4nl_values), _mm_set1_epi8(-128)));
    const int64_t nb = n / 32, nq = (nb + 3) / 4;
    /* bytes of a quad in a row (IQ4_XS: half a super-block's, on average) */
    const int qb =
        KIND == CAIRN__QK_IQ4_XS ? (int)sizeof(cairn__block_iq4_xs) / 2 : 4 * CAIRN__QK_BYTES(KIND);
    const size_t pf = cairn__pf_ahead(rb, R);
    __m512 acc[8];
    /* only the T used: zeroing all 8 kept the array in memory (a rep stos a call) */
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < nq; g++) {
        /* bytes of this quad in each row: all, or the 1-3 blocks of the last one */
        const int64_t left = nb - 4 * g, v = left >= 4 ? qb : left * (qb / 4);
        const size_t off = KIND == CAIRN__QK_IQ4_XS ? (size_t)(g / 2) * sizeof(cairn__block_iq4_xs)
                                                    : (size_t)g * (size_t)qb;
        if (left >= 4)
            CAIRN__PF_RUN(w, pf, g, qb, R);
        else
            CAIRN__PF_TAIL(w, pf, off * R, R, rb);
        __m512i P[4], Q[4], S[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (r >= R) {
                P[r] = Q[r] = S[r] = _mm512_setzero_si512();
                continue;
            }
            const uint8_t *wr = w + (size_t)r * rb + off;
            if (KIND == CAIRN__QK_IQ4_XS) { /* the 64 value bytes of sub-blocks 4h.. */
                P[r] = _mm512_permutexvar_epi8(
                    ga, _mm512_loadu_si512(wr + offsetof(cairn__block_iq4_xs, qs) + 64 * (g & 1)));
                continue;
            }
            __m512i z0, z1;
            if (left >= 4) {
                z0 = _mm512_loadu_si512(wr);
                z1 = KIND == CAIRN__QK_Q8_0
                         ? _mm512_loadu_si512(wr + 64)
                         : _mm512_maskz_loadu_epi8(((__mmask64)1 << (qb - 64)) - 1, wr + 64);
            } else { /* masked: only the blocks there are */
                z0 = load_upto(wr, v);
                z1 = load_upto(wr + 64, v - 64);
            }
            P[r] = _mm512_permutex2var_epi8(z0, ga, z1);
            if (KIND == CAIRN__QK_Q8_0) {
                const __m512i y0 =
                    left >= 4 ? _mm512_loadu_si512(wr + 8) : load_upto(wr + 8, v - 8);
                const __m512i y1 =
                    left >= 4 ? _mm512_loadu_si512(wr + 72) : load_upto(wr + 72, v - 72);
                Q[r] = _mm512_permutex2var_epi8(y0, gb, y1);
                S[r] = _mm512_permutex2var_epi16(z0, s8, z1);
            } else if (KIND == CAIRN__QK_Q4_0 || KIND == CAIRN__QK_IQ4_NL)
                S[r] = z0;
            else
                S[r] = _mm512_permutex2var_epi16(z0, gs, z1);
            if (CAIRN__QK_FIVE(
                    KIND)) { /* the values of 0..31, split: P elements 4k.., Q 16 + 4k.. */
                const __m512i H = _mm512_permutex2var_epi8(z0, gh, z1);
                Q[r] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(P[r], 4), m4),
                                                 _mm512_multishift_epi64_epi8(mhi, H), b4,
                                                 0xF8); /* a | (b & c) */
                P[r] = _mm512_ternarylogic_epi32(_mm512_and_si512(P[r], m4),
                                                 _mm512_multishift_epi64_epi8(mlo, H), b4, 0xF8);
            }
        }
        /* K[k], k < 4 (and k >= 4 for the types of two registers): 128-bit lane r = lane k of
         * P[r] (of Q[r]); one token alone skips this (below) */
        __m512i K[8];
        if (T > 1) {
            transpose4(P, K);
            if (CAIRN__QK_TWO(KIND)) {
                transpose4(Q, K + 4);
                if (KIND == CAIRN__QK_Q8_0)
#pragma GCC unroll 8
                    for (int k = 0; k < 8; k++)
                        K[k] = _mm512_xor_si512(K[k], flip);
            } else
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) { /* elements 4k.. low nibbles, 16 + 4k.. high */
                    K[4 + k] = _mm512_and_si512(_mm512_srli_epi16(K[k], 4), m4);
                    K[k] = _mm512_and_si512(K[k], m4);
                    if (CAIRN__QK_LUT(KIND)) {
                        K[k] = _mm512_shuffle_epi8(lut, K[k]);
                        K[4 + k] = _mm512_shuffle_epi8(lut, K[4 + k]);
                    }
                }
        }
        /* lane 4r + b: row r's block b's scale (and minimum) */
        __m512 sw, mw = _mm512_setzero_ps();
        if (KIND == CAIRN__QK_IQ4_XS)
            sw = iq4_xs_scales(w + off, rb, R, (int)(g & 1));
        else {
            __m256i sh, mh = _mm256_setzero_si256();
            if (KIND == CAIRN__QK_Q4_0 || KIND == CAIRN__QK_IQ4_NL) {
                const __m512i s01 = _mm512_permutex2var_epi16(S[0], s4, S[1]),
                              s23 = _mm512_permutex2var_epi16(S[2], s4, S[3]);
                sh = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_castsi512_si128(s01)),
                                             _mm512_castsi512_si128(s23), 1);
            } else {
                const __m512i s01 = _mm512_unpacklo_epi64(S[0], S[1]),
                              s23 = _mm512_unpacklo_epi64(S[2], S[3]);
                sh = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_castsi512_si128(s01)),
                                             _mm512_castsi512_si128(s23), 1);
                if (CAIRN__QK_MIN(KIND)) {
                    const __m512i m01 = _mm512_unpackhi_epi64(S[0], S[1]),
                                  m23 = _mm512_unpackhi_epi64(S[2], S[3]);
                    mh =
                        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_castsi512_si128(m01)),
                                                _mm512_castsi512_si128(m23), 1);
                }
            }
            sw = _mm512_cvtph_ps(sh);
            if (CAIRN__QK_MIN(KIND))
                mw = _mm512_cvtph_ps(mh);
        }
        if (T == 1) {
            /* one token: each row's gathered groups against the activation as it lies (lane k,
             * dword b: groups k and 4 + k of block b, the offset in lane 0), then the four
             * 128-bit lanes of each row summed into lane 4r + b: the same exact integers as
             * the transposed tile's, for 6 shuffles instead of 8 and 2 loads instead of 8 */
            const cairn__xq_quad *x = &a[0][g];
            const __m512i alo = _mm512_loadu_si512(x->a[0]), ahi = _mm512_loadu_si512(x->a[4]);
            const __m512i c0 = CAIRN__QK_MIN(KIND)
                                   ? _mm512_setzero_si512()
                                   : _mm512_zextsi128_si512(_mm_load_si128((const __m128i *)x->c));
            __m512i pr[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m512i lo, hi;
                if (KIND == CAIRN__QK_Q8_0)
                    lo = _mm512_xor_si512(P[r], flip), hi = _mm512_xor_si512(Q[r], flip);
                else if (CAIRN__QK_FIVE(KIND))
                    lo = P[r], hi = Q[r];
                else {
                    lo = _mm512_and_si512(P[r], m4);
                    hi = _mm512_and_si512(_mm512_srli_epi16(P[r], 4), m4);
                    if (CAIRN__QK_LUT(KIND))
                        lo = _mm512_shuffle_epi8(lut, lo), hi = _mm512_shuffle_epi8(lut, hi);
                }
                pr[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(c0, lo, alo), hi, ahi);
            }
            const __m512i X = lanes4(pr);
            const __m512 sx = _mm512_broadcast_f32x4(_mm_load_ps(x->d));
            acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(X), _mm512_mul_ps(sw, sx), acc[0]);
            if (CAIRN__QK_MIN(KIND))
                acc[0] = _mm512_fmadd_ps(mw, _mm512_broadcast_f32x4(_mm_load_ps(x->s)), acc[0]);
            continue;
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const cairn__xq_quad *x = &a[t][g];
#define BC(p) _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(const void *)(p)))
            /* two chains of 4 (the sum is exact in any order): one token alone is bound by the
             * latency of its chain */
            __m512i p = _mm512_dpbusd_epi32(CAIRN__QK_MIN(KIND) ? _mm512_setzero_si512() : BC(x->c),
                                            K[0], BC(x->a[0]));
            __m512i q = _mm512_dpbusd_epi32(_mm512_setzero_si512(), K[4], BC(x->a[4]));
#pragma GCC unroll 3
            for (int k = 1; k < 4; k++) {
                p = _mm512_dpbusd_epi32(p, K[k], BC(x->a[k]));
                q = _mm512_dpbusd_epi32(q, K[4 + k], BC(x->a[4 + k]));
            }
#undef BC
            const __m512 sx = _mm512_broadcast_f32x4(_mm_load_ps(x->d));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(p, q)),
                                     _mm512_mul_ps(sw, sx), acc[t]);
            if (CAIRN__QK_MIN(KIND))
                acc[t] = _mm512_fmadd_ps(mw, _mm512_broadcast_f32x4(_mm_load_ps(x->s)), acc[t]);
        }
    }
    store_rows(acc, T, R, out, ld);
}

/* Each type's kernels from the lane kernels (quad_tile_avx512, k16_tile_avx512) */
#define QUAD_KERNELS(name, KIND)                                                                   \
    CAIRN__LANE_KERNELS(AVX512, name, quad_tile_avx512, cairn__xq_quad, KIND, QUAD_RR, QUAD_TT)

QUAD_KERNELS(q4_0, CAIRN__QK_Q4_0)
QUAD_KERNELS(q8_0, CAIRN__QK_Q8_0)
QUAD_KERNELS(q4_1, CAIRN__QK_Q4_1)
QUAD_KERNELS(q5_0, CAIRN__QK_Q5_0)
QUAD_KERNELS(q5_1, CAIRN__QK_Q5_1)
QUAD_KERNELS(iq4_nl, CAIRN__QK_IQ4_NL)
QUAD_KERNELS(iq4_xs, CAIRN__QK_IQ4_XS)
#undef QUAD_KERNELS

/* w (n) . x (n) -> float, F32 (the dot_fn signature of kernels_cpu.c; xq, xs unused). Attention
 * calls it once per head and position with n = head_dim (64 for most models), which is one pass
 * of the 64-wide loop; the tail is masked, so no scalar loop follows. */
AVX512 float cairn__dot_f32_avx512(const uint8_t *w, const float *x, const void *xq,
                                   const float *xs, int64_t n)
{
    (void)xq, (void)xs;
    const float *wf = (const float *)(const void *)w;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(wf + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(wf + i + 16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(wf + i + 32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(wf + i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(wf + i), _mm512_loadu_ps(x + i), a0);
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, wf + i), _mm512_maskz_loadu_ps(k, x + i), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* 16 halves or bfloat16s at p as floats: both widen exactly */
AVX512 static inline __attribute__((always_inline)) __m512 wide16(const uint8_t *p, const int bf)
{
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return bf ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
              : _mm512_cvtph_ps(h);
}

/* the same for the first n < 16 of them (the rest read as 0, nothing past them touched) */
AVX512 static inline __attribute__((always_inline)) __m512 wide16_part(const uint8_t *p, int n,
                                                                       const int bf)
{
    const __m256i h = _mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), p);
    return bf ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
              : _mm512_cvtph_ps(h);
}

/* F16 (bf 0) or BF16 (bf 1) w (n) . x (n): the F32 kernel's loop on widened weights, 64 a pass in
 * 4 chains (the AVX2 kernels widen 8 at a time and were bound by that in cache, at ~1.5x a cold
 * read) */
AVX512 static inline __attribute__((always_inline)) float
dot_h16_avx512(const uint8_t *w, const float *x, int64_t n, const int bf)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(wide16(w + 2 * i, bf), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(wide16(w + 2 * i + 32, bf), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(wide16(w + 2 * i + 64, bf), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(wide16(w + 2 * i + 96, bf), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(wide16(w + 2 * i, bf), _mm512_loadu_ps(x + i), a0);
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(wide16_part(w + 2 * i, (int)(n - i), bf),
                             _mm512_maskz_loadu_ps(k, x + i), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* w (n) . x (n) -> float */
AVX512 float cairn__dot_f16_avx512(const uint8_t *w, const float *x, const void *xq,
                                   const float *xs, int64_t n)
{
    (void)xq, (void)xs;
    return dot_h16_avx512(w, x, n, 0);
}

/* w (n) . x (n) -> float */
AVX512 float cairn__dot_bf16_avx512(const uint8_t *w, const float *x, const void *xq,
                                    const float *xs, int64_t n)
{
    (void)xq, (void)xs;
    return dot_h16_avx512(w, x, n, 1);
}

/* y (n) += a * x (n) */
AVX512 void cairn__axpy_avx512(float *y, float a, const float *x, int64_t n)
{
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i,
                         _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(
            y + i, k,
            _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i)));
    }
}

/* Attention of one head at decode, H = head_dim / 16 (1..8) constant after inlining: q and the
 * output stay in H registers each, and the K / V rows, which sit ld elements apart (ld =
 * head_dim in the CPU backend's cache: one contiguous run per head), are prefetched ATT_PF
 * positions ahead: they are out of cache after a layer's weights went through, and a caller
 * with a wider stride (a row per position holding every head) gets no help from the hardware
 * prefetcher. F16 (constant after inlining) says the cache holds IEEE halves: a
 * load widens 16 of them exactly (vcvtph2ps), so the arithmetic is the f32 kernel's on the
 * widened rows, bit for bit. The loops over H are unrolled by pragma: left to itself gcc kept
 * o0 / o1 on the stack, a load and a store around every multiply-add (3.4 instead of 4.6 ns a
 * position at head size 64, in cache). */
#define ATT_PF 16
AVX512 static inline __attribute__((always_inline)) __m512 kv_load(const void *row, int i,
                                                                   const int F16)
{
    return F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)))
               : _mm512_loadu_ps((const float *)row + i);
}

/* row t of a cache slice whose rows are ld elements apart */
static inline __attribute__((always_inline)) const char *kv_row(const void *base, int64_t t,
                                                                size_t ld, const int F16)
{
    return (const char *)base + (size_t)t * ld * (F16 ? 2u : 4u);
}

/* the cache lines of row t's 16 H elements (a line holds 16 floats or 32 halves) */
static inline __attribute__((always_inline)) void kv_prefetch(const char *row, const int H,
                                                              const int F16)
{
#pragma GCC unroll 8
    for (int h = 0; h < H; h += F16 ? 2 : 1)
        _mm_prefetch(row + 64 * (F16 ? h / 2 : h), _MM_HINT_T0);
}

AVX512 static inline __attribute__((always_inline)) void
attn_head_avx512(const float *q, const void *K, const void *V, size_t ld, int n, float scale,
                 float *sc, float *out, const int H, const int F16)
{
    __m512 qv[8], o0[8], o1[8];
#pragma GCC unroll 8
    for (int h = 0; h < H; h++) {
        qv[h] = _mm512_loadu_ps(q + 16 * h);
        o0[h] = o1[h] = _mm512_setzero_ps();
    }
    /* sc (n) = q . K rows * scale */
    for (int t = 0; t < n; t++) {
        const char *k = kv_row(K, t, ld, F16);
        kv_prefetch(kv_row(K, t + ATT_PF, ld, F16), H, F16);
        __m512 a = _mm512_mul_ps(qv[0], kv_load(k, 0, F16));
#pragma GCC unroll 8
        for (int h = 1; h < H; h++)
            a = _mm512_fmadd_ps(qv[h], kv_load(k, 16 * h, F16), a);
        sc[t] = _mm512_reduce_add_ps(a) * scale;
    }
    for (int t = 0; t < ATT_PF && t < n; t++) /* the first V rows, while softmax runs */
        kv_prefetch(kv_row(V, t, ld, F16), H, F16);
    cairn__softmax(sc, n);
    /* out (16 H) = sum_t sc[t] V row t; two sets of accumulators halve the FMA chain */
    int t = 0;
    for (; t + 2 <= n; t += 2) {
        const char *v0 = kv_row(V, t, ld, F16), *v1 = kv_row(V, t + 1, ld, F16);
        const __m512 p0 = _mm512_set1_ps(sc[t]), p1 = _mm512_set1_ps(sc[t + 1]);
        kv_prefetch(kv_row(V, t + ATT_PF, ld, F16), H, F16);
        kv_prefetch(kv_row(V, t + 1 + ATT_PF, ld, F16), H, F16);
#pragma GCC unroll 8
        for (int h = 0; h < H; h++) {
            o0[h] = _mm512_fmadd_ps(p0, kv_load(v0, 16 * h, F16), o0[h]);
            o1[h] = _mm512_fmadd_ps(p1, kv_load(v1, 16 * h, F16), o1[h]);
        }
    }
    if (t < n) {
        const __m512 p0 = _mm512_set1_ps(sc[t]);
#pragma GCC unroll 8
        for (int h = 0; h < H; h++)
            o0[h] = _mm512_fmadd_ps(p0, kv_load(kv_row(V, t, ld, F16), 16 * h, F16), o0[h]);
    }
#pragma GCC unroll 8
    for (int h = 0; h < H; h++)
        _mm512_storeu_ps(out + 16 * h, _mm512_add_ps(o0[h], o1[h]));
}

/* see cairn__attn_head; hd a multiple of 16, at most 128; f16: K and V hold halves */
AVX512 void cairn__attn_head_avx512(const float *q, const void *K, const void *V, size_t ld, int n,
                                    int hd, float scale, float *sc, float *out, int f16)
{
    switch (hd / 16 + (f16 ? 8 : 0)) {
#define ATT_CASE(H)                                                                                \
    case H:                                                                                        \
        attn_head_avx512(q, K, V, ld, n, scale, sc, out, H, 0);                                    \
        break;                                                                                     \
    case H + 8:                                                                                    \
        attn_head_avx512(q, K, V, ld, n, scale, sc, out, H, 1);                                    \
        break;
        ATT_CASE(1)
        ATT_CASE(2)
        ATT_CASE(3)
        ATT_CASE(4)
        ATT_CASE(5)
        ATT_CASE(6)
        ATT_CASE(7)
        ATT_CASE(8)
#undef ATT_CASE
    default:
        break;
    }
}
/* the sum of v's 8 floats */
AVX512 static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- F32, F16 and BF16 weights against tiles of float tokens (the prompt's products) ------
 * A tile of 4 rows x 6 tokens keeps 24 accumulators of 16 products each: per 16 columns, 4
 * weight loads (F16 widened by vcvtph2ps, BF16 by a shift), 6 token loads and 24 multiply-adds,
 * so the arithmetic, not the loads, is the bound, and F16 is widened in registers rather than
 * dequantized into memory for sgemm. Each (row, token) result is then its accumulator's 16 lanes
 * summed, 4 rows at a time (sum4x). Not bit for bit the decode's dot product (that is
 * cairn__matmul_rows' promise, not cairn__matmul's): float sums in another order. */
#define FT_RR 4
#define FT_TT 6

/* the horizontal sums of a, b, c and d, as one vector [sum a, sum b, sum c, sum d] */
AVX512 static inline __attribute__((always_inline)) __m128 sum4x(__m512 a, __m512 b, __m512 c,
                                                                 __m512 d)
{
    const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    /* per 128-bit lane: a, b, c, d's partial sums */
    const __m512 u =
        _mm512_add_ps(_mm512_shuffle_ps(t0, t1, 0x44), _mm512_shuffle_ps(t0, t1, 0xEE));
    const __m256 v =
        _mm256_add_ps(_mm512_castps512_ps256(u),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
}

/* 16 weights of type WT (0 F32, 1 F16, 2 BF16) at element k of row p, as floats; the first m
 * only (the rest 0) where m < 16 */
AVX512 static inline __attribute__((always_inline)) __m512 fw16(const uint8_t *p, int64_t k, int m,
                                                                const int WT)
{
    if (WT == 0) {
        const float *f = (const float *)(const void *)p + k;
        return m >= 16 ? _mm512_loadu_ps(f) : _mm512_maskz_loadu_ps((__mmask16)((1u << m) - 1), f);
    }
    const uint16_t *h = (const uint16_t *)(const void *)p + k;
    const __m256i v = m >= 16 ? _mm256_loadu_si256((const __m256i *)(const void *)h)
                              : _mm256_maskz_loadu_epi16((__mmask16)((1u << m) - 1), h);
    return WT == 1 ? _mm512_cvtph_ps(v)
                   : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* rows (R, n) of stride rb bytes @ T tokens (x[t], n floats each) -> out[t * ld + r] */
AVX512 static inline __attribute__((always_inline)) void
ftile_avx512(const uint8_t *w, size_t rb, const float *const *x, int64_t n, float *out, size_t ld,
             const int R, const int T, const int WT)
{
    __m512 acc[FT_RR][FT_TT];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    /* whole steps of 16, then one masked step: one loop whose loads were masked or not by a
     * test in each kept the accumulators in memory */
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512 wv[FT_RR];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = fw16(w + (size_t)r * rb, k, 16, WT);
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            const __m512 xv = _mm512_loadu_ps(x[t] + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    if (k < n) {
        const int m = (int)(n - k);
        const __mmask16 mk = (__mmask16)((1u << m) - 1);
        __m512 wv[FT_RR];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = fw16(w + (size_t)r * rb, k, m, WT);
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            const __m512 xv = _mm512_maskz_loadu_ps(mk, x[t] + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    const __m512 z = _mm512_setzero_ps();
#pragma GCC unroll 6
    for (int t = 0; t < T; t++)
        _mm_mask_storeu_ps(
            out + (size_t)t * ld, (__mmask8)((1u << R) - 1),
            sum4x(acc[0][t], R > 1 ? acc[1][t] : z, R > 2 ? acc[2][t] : z, R > 3 ? acc[3][t] : z));
}

CAIRN__FLOAT_TILES(AVX512, cairn__float_tile_avx512, ftile_avx512, FT_RR, FT_TT)

/* Rows (R <= 4, n) of F32 (WT 0), F16 (1) or BF16 (2) weights, stride rb bytes, . x (n) ->
 * out (R): each row's arithmetic is its dot product's (cairn__dot_f32_avx512, dot_h16_avx512),
 * instruction for instruction, so the bits are the same; the rows share each load of x, which
 * for long rows (x of 8192 floats no longer in L1 beside the streaming weights) was what a row
 * at a time was bound by: 20 GB/s on F16 2048 x 8192 against 36 on 8192 x 2048 */
AVX512 static inline __attribute__((always_inline)) void frows_avx512(const uint8_t *w, size_t rb,
                                                                      const float *x, int64_t n,
                                                                      float *out, const int R,
                                                                      const int WT)
{
    const size_t es = WT == 0 ? 4 : 2;
    __m512 a[4][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < 4; c++)
            a[r][c] = _mm512_setzero_ps();
    /* the pass's R rows as the one contiguous run they are, walked R times as fast as a row:
     * the next pass's bytes (or 8 KB ahead), as the quantized kernels prefetch; 2 KB ahead in
     * each row left a pass's first 2 KB of every row to demand misses (F32 8192 x 2048 cold 36
     * GB/s against 66 for 2048 x 8192) */
    const size_t pf = cairn__pf_ahead(rb, R);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        CAIRN__PF_RUN(w, pf, i / 64, (int)(64 * es), R);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512 xv = _mm512_loadu_ps(x + i + 16 * c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                a[r][c] =
                    _mm512_fmadd_ps(fw16(w + (size_t)r * rb, i + 16 * c, 16, WT), xv, a[r][c]);
        }
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 xv = _mm512_loadu_ps(x + i);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            a[r][0] = _mm512_fmadd_ps(fw16(w + (size_t)r * rb, i, 16, WT), xv, a[r][0]);
    }
    if (i < n) {
        const __m512 xv = _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), x + i);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            a[r][1] = _mm512_fmadd_ps(fw16(w + (size_t)r * rb, i, (int)(n - i), WT), xv, a[r][1]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        out[r] = _mm512_reduce_add_ps(
            _mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3])));
}

CAIRN__FLOAT_ROWS3(AVX512, frows_avx512)

/* ---- K-quants: Q4_K and Q5_K against the int8 activation ----------------------------------
 *
 * The activation comes as cairn__xk blocks (kernels_cpu.h): a super-block's 256 int8 values in
 * order, 64-byte aligned, so each 64 of them is one aligned load. Q4_K: a chunk of 32 quant
 * bytes holds sub-block 2c in its low nibbles and 2c+1 in its high ones; broadcast to both
 * halves of a register and shifted by 0 and 4 (vpsrlvw), it lines up with activation bytes
 * 64c..64c+63, and vpdpbusd leaves sub-block 2c in lanes 0-7 and 2c+1 in lanes 8-15. Each lane's
 * int32 is scaled by its sub-block's d * sc * xd (a permute of the 8 per-block factors) into
 * one float accumulator. (Q6_K is on the K16 lane kernel below, with Q2_K and Q3_K.) */

/* the sum of a K-quant kernel's four accumulator chains, in the one order every caller uses */
AVX512 static inline float sum4(const __m512 acc[4])
{
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

/* T rows' worth of one Q4_K (Q5 0) or Q5_K (Q5 1) row: w (n) . x_t (n) -> out[t] for T tokens (1 or
 * 2, a constant at each call), xk[t] each token's cairn__xk blocks. The weights are unpacked once
 * for all T tokens; each token's arithmetic is the same instructions in the same order whatever T
 * is, so a token's result does not depend on the token beside it. Q5_K's fifth bits (bit j of its
 * 32 qh bytes for sub-block j) are added as 16 under a mask. */
AVX512 static inline __attribute__((always_inline)) void
q45_K_dot_t(const uint8_t *w, const cairn__xk_block *const *xk, int T, int64_t n, float *out,
            const int Q5)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    const size_t bb = Q5 ? sizeof(cairn__block_q5_K) : sizeof(cairn__block_q4_K);
    const size_t qs_at = Q5 ? offsetof(cairn__block_q5_K, qs) : offsetof(cairn__block_q4_K, qs);
    __m512i hbit[4]; /* Q5_K: the qh bit of sub-block 2c in the low half, 2c + 1 in the high */
    for (int c = 0; c < 4; c++)
        hbit[c] = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * c))),
                                     _mm256_set1_epi8((char)(2 << (2 * c))), 1);
    /* 16-bit lanes: the register's low half by 0, its high half by 4 */
    const __m512i nib = _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL,
                                         0x0004000400040004LL, 0x0004000400040004LL, 0, 0, 0, 0);
    __m512i idx[4]; /* lanes 0-7: factor 2c, 8-15: factor 2c+1 */
    for (int c = 0; c < 4; c++)
        idx[c] = _mm512_set_epi32(2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1,
                                  2 * c + 1, 2 * c + 1, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c,
                                  2 * c, 2 * c);
    /* one accumulator per chunk and token: a single chain of 4 multiply-adds per super-block was
     * the kernel's bound in cache */
    __m512 acc[2][4];
    __m256 macc[2];
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < 4; c++)
            acc[t][c] = _mm512_setzero_ps();
        macc[t] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++, w += bb) {
        const cairn__q4_K_head hd = cairn__q4_K_head_of(w);
        const uint16_t dh = hd.d, mh = hd.dmin;
        const uint8_t *qs = w + qs_at;
        const __m512i qh =
            Q5 ? _mm512_broadcast_i64x4(_mm256_loadu_si256(
                     (const __m256i *)(const void *)(w + offsetof(cairn__block_q5_K, qh))))
               : _mm512_setzero_si512();
        const uint64_t sc = hd.sc, m = hd.m;
        const __m256 dsc = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(dh)),
                                         _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                             _mm_loadl_epi64((const __m128i *)(const void *)&sc))));
        const __m256 mf = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(mh)),
                                        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                            _mm_loadl_epi64((const __m128i *)(const void *)&m))));
        __m512 f[2];
        for (int t = 0; t < T; t++) {
            f[t] = _mm512_castps256_ps512(_mm256_mul_ps(dsc, _mm256_load_ps(xk[t][i].d)));
            macc[t] = _mm256_add_ps(macc[t], _mm256_mul_ps(mf, _mm256_load_ps(xk[t][i].ds)));
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i q = _mm512_and_si512(
                _mm512_srlv_epi16(_mm512_broadcast_i64x4(_mm256_loadu_si256(
                                      (const __m256i *)(const void *)(qs + 32 * c))),
                                  nib),
                m4);
            if (Q5) /* the fifth bits as a mask register: one masked add of 16 */
                q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, hbit[c]), q, sixteen);
            for (int t = 0; t < T; t++) {
                const __m512i p =
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), q,
                                        _mm512_load_si512((const void *)(xk[t][i].a + 64 * c)));
                acc[t][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                                            _mm512_permutexvar_ps(idx[c], f[t]), acc[t][c]);
            }
        }
    }
    for (int t = 0; t < T; t++)
        out[t] = sum4(acc[t]) - hsum8(macc[t]);
}

/* ---- Q4_K: (row, sub-block) lanes, one kernel for 1-8 tokens -------------------------------
 * As the Q4_0 kernel: lane 8r + s of a register holds row r's sub-block s (of 32 weights), so
 * vpdpbusd sums each sub-block's 32 products exactly in 8 steps (group k: elements 4k..4k+3),
 * and one conversion, one scale product and two multiply-adds (the scale's and the min's) per
 * token serve 16 (row, sub-block) pairs, where q45_K_dot_t's lanes of 4 products pay them 8
 * times over. The weights of 2 rows are gathered once per super-block for all the tile's tokens:
 * for group k, dword 8c + k of a row's 128 nibble bytes (chunk c: sub-block 2c in the low
 * nibbles, 2c + 1 in the high) goes to lanes 2c and 2c + 1, shifted by 0 and 4. The activation's
 * bytes in that order are cairn__xk_block.g.
 *
 * The float order of a row, whatever shares its pass: sub-block s's lane takes, super-block after
 * super-block, acc = fma(isum, (d * sc) * xd, acc), then acc = fma(-(dmin * m), ds, acc); the row
 * is
 * ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)). Q4_K's dot product (one row, one token) is
 * this kernel too, so the decode, the prompt and the batched decode agree bit for bit. */

/* rows (R <= 2, n) of stride rb bytes @ tokens a[0..T) (T <= 8), cairn__xk blocks ->
 * out[t * ld + r] */
AVX512 static inline __attribute__((always_inline)) void
q4_K_tile_avx512(const uint8_t *w, size_t rb, const cairn__xk_block *const *a, int64_t n,
                 float *out, size_t ld, const int R, const int T)
{
    const size_t bb = sizeof(cairn__block_q4_K), qs_at = offsetof(cairn__block_q4_K, qs);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i nib = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    __m512i gidx[8]; /* group k: lanes 8r + 2c + h take dword 8c + k of the row */
    for (int k = 0; k < 8; k++)
        gidx[k] = _mm512_set_epi32(24 + k, 24 + k, 16 + k, 16 + k, 8 + k, 8 + k, k, k, 24 + k,
                                   24 + k, 16 + k, 16 + k, 8 + k, 8 + k, k, k);
    const int64_t nsb = n / CAIRN__QK_K;
    const size_t pf = cairn__pf_ahead(rb, R);
    __m512 acc[8];
    /* only the T used: zeroing all 8 kept the array in memory (a rep stos a call) */
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const size_t off = (size_t)i * bb;
        CAIRN__PF_RUN(w, pf, i, (int)bb, R);
        const uint8_t *w0 = w + off, *w1 = w + (R > 1 ? rb : 0) + off;
        const cairn__q4_K_head h0 = cairn__q4_K_head_of(w0), h1 = cairn__q4_K_head_of(w1);
        const __m512i r00 = _mm512_loadu_si512(w0 + qs_at),
                      r01 = _mm512_loadu_si512(w0 + qs_at + 64);
        const __m512i r10 = _mm512_loadu_si512(w1 + qs_at),
                      r11 = _mm512_loadu_si512(w1 + qs_at + 64);
        __m512i K[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i x =
                _mm512_mask_blend_epi32(0xFF00, _mm512_permutex2var_epi32(r00, gidx[k], r01),
                                        _mm512_permutex2var_epi32(r10, gidx[k], r11));
            K[k] = _mm512_and_si512(_mm512_srlv_epi32(x, nib), m4);
        }
        /* lane 8r + s: d * sc[s] and dmin * m[s] of row r (a missing second row: zeros) */
        const __m512 dv = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_cvtsh_ss(h0.d)),
                                               _mm512_set1_ps(R > 1 ? _cvtsh_ss(h1.d) : 0.0f));
        const __m512 mv = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_cvtsh_ss(h0.dmin)),
                                               _mm512_set1_ps(R > 1 ? _cvtsh_ss(h1.dmin) : 0.0f));
        const __m512 dsc = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_set_epi64x(
                                                 (long long)h1.sc, (long long)h0.sc))));
        const __m512 mf = _mm512_mul_ps(mv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                                _mm_set_epi64x((long long)h1.m, (long long)h0.m))));
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const cairn__xk_block *x = &a[t][i];
#define BC8(p) _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)(const void *)(p)))
            __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), K[0], BC8(x->g));
            __m512i q = _mm512_dpbusd_epi32(_mm512_setzero_si512(), K[4], BC8(x->g + 128));
#pragma GCC unroll 3
            for (int k = 1; k < 4; k++) {
                p = _mm512_dpbusd_epi32(p, K[k], BC8(x->g + 32 * k));
                q = _mm512_dpbusd_epi32(q, K[4 + k], BC8(x->g + 32 * (4 + k)));
            }
            const __m512 xd = _mm512_castsi512_ps(BC8(x->d)), ds = _mm512_castsi512_ps(BC8(x->ds));
#undef BC8
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(p, q)),
                                     _mm512_mul_ps(dsc, xd), acc[t]);
            acc[t] = _mm512_fnmadd_ps(mf, ds, acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        __m512 u = _mm512_add_ps(acc[t], _mm512_permute_ps(acc[t], 0xB1));
        u = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4E));
        u = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, 0xB1));
        out[(size_t)t * ld] = _mm512_cvtss_f32(u);
        if (R > 1)
            out[(size_t)t * ld + 1] = _mm512_cvtss_f32(_mm512_shuffle_f32x4(u, u, 0x02));
    }
}

/* W rows (nr, n) of stride rb bytes . x (n) -> out (nr); xk: n / 256 cairn__xk blocks */
AVX512 void cairn__q4_K_rows_avx512(const uint8_t *w, size_t rb, int nr, const void *xk, int64_t n,
                                    float *out)
{
    const cairn__xk_block *a = xk;
    for (; nr >= 2; nr -= 2, w += 2 * rb, out += 2)
        q4_K_tile_avx512(w, rb, &a, n, out, 0, 2, 1);
    if (nr)
        q4_K_tile_avx512(w, rb, &a, n, out, 0, 1, 1);
}

/* W rows (nr, n) of stride rb bytes @ nt tokens -> out[t * ld + r]; xp[t]: token t's cairn__xk
 * blocks */
AVX512 void cairn__q4_K_tile_avx512(const uint8_t *w, size_t rb, int nr, const void *const *xp,
                                    int nt, int64_t n, float *out, size_t ld)
{
    const cairn__xk_block *const *a = (const cairn__xk_block *const *)xp;
    for (; nr >= 2; nr -= 2, w += 2 * rb, out += 2)
        CAIRN__TILE_T(q4_K_tile_avx512, w, rb, a, n, out, ld, 2, nt, 8);
    if (nr)
        CAIRN__TILE_T(q4_K_tile_avx512, w, rb, a, n, out, ld, 1, nt, 8);
}

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
AVX512 float cairn__dot_q4_K_avx512(const uint8_t *w, const float *x, const void *xq,
                                    const float *xs, int64_t n)
{
    (void)x, (void)xs;
    float out;
    cairn__q4_K_rows_avx512(w, 0, 1, xq, n, &out);
    return out;
}

/* w (n) . x (n) -> float; xq: n / 256 cairn__xk blocks */
AVX512 float cairn__dot_q5_K_avx512(const uint8_t *w, const float *x, const void *xq,
                                    const float *xs, int64_t n)
{
    (void)x, (void)xs;
    const cairn__xk_block *xk[1] = {xq};
    float out;
    q45_K_dot_t(w, xk, 1, n, &out, 1);
    return out;
}

/* the same row against two tokens' cairn__xk blocks, as cairn__dot2_q4_K_avx512 */
AVX512 void cairn__dot2_q5_K_avx512(const uint8_t *w, const void *xa, const void *xb, int64_t n,
                                    float *out)
{
    const cairn__xk_block *xk[2] = {xa, xb};
    q45_K_dot_t(w, xk, 2, n, out, 1);
}

/* ---- Q2_K and Q3_K: (row, sub-block) lanes, one kernel for 1-8 tokens ---------------------
 * As the quad kernel, with sub-blocks of 16 for blocks: a step takes 4 rows and 64 elements of
 * their super-block (4 sub-blocks of 16), lane 4r + s of a register holding row r's sub-block
 * s, so vpdpbusd sums each sub-block's 16 products exactly in 4 steps (group g: elements
 * 4g..4g+3). The elements of step m are those of activation blocks 2m and 2m + 1, whose 2-bit
 * fields share 32 bytes of qs (bits 2j.. of qs[32n + l] for element 128n + 32j + l) and Q3_K's
 * third bits the 32 bytes of hmask (bit 4n + j of hmask[l]): a byte permute gathers a row's
 * bytes into lane g, dword s, a variable shift per dword (vpsrlvd) brings each sub-block's
 * field down, and (Q3_K) a byte test of hmask against that sub-block's bit adds 4 under a mask;
 * 128-bit shuffles of the 4 rows then give lane 4r + s, as the quad kernel's. The values are
 * unsigned, 0..3 or 0..7: Q3_K's -4 comes back as -4 * sum(a) over the sub-block, prepared as the
 * dot product's start, and Q2_K's minimum (dmin * m) multiplies d_x * sum(a), prepared beside
 * it. Each token then costs 4 vpdpbusd, a conversion, a scale product and one multiply-add (two
 * for Q2_K) per 16 (row, sub-block) pairs; the gathering and the scales are shared by the tile's
 * tokens. The float order of a row: sub-block lane s, step after step, acc = fma(isum, sw * d_x,
 * acc) (then acc = fma(-dmin * m, d_x sum, acc)); the row is (acc lanes s 0 + 1) + (2 + 3). */

/* byte 16g + 4s + e of a row's gathered step: byte O + 16 (s % 2) + 4g + e of its super-block
 * (the 32 bytes of qs or hmask that the step's two blocks share start at O) */
#define GK16_(O, g, s)                                                                             \
    (O) + 16 * ((s) % 2) + 4 * (g), (O) + 16 * ((s) % 2) + 4 * (g) + 1,                            \
        (O) + 16 * ((s) % 2) + 4 * (g) + 2, (O) + 16 * ((s) % 2) + 4 * (g) + 3
#define GK16G_(O, g) GK16_(O, g, 0), GK16_(O, g, 1), GK16_(O, g, 2), GK16_(O, g, 3)
#define GK16(O)                                                                                    \
    {                                                                                              \
        GK16G_(O, 0), GK16G_(O, 1), GK16G_(O, 2), GK16G_(O, 3)                                     \
    }
/* qs of half n: Q2_K's at 16 + 32n, Q3_K's at 32 + 32n; Q3_K's hmask at 0 */
/* byte 16g + 4s + e: byte 16s + 4g + e of a Q6_K half's 64 ql bytes */
#define GQ6_(g, s)                                                                                 \
    16 * (s) + 4 * (g), 16 * (s) + 4 * (g) + 1, 16 * (s) + 4 * (g) + 2, 16 * (s) + 4 * (g) + 3
#define GQ6G_(g) GQ6_(g, 0), GQ6_(g, 1), GQ6_(g, 2), GQ6_(g, 3)
static const uint8_t g_q2k[2][64] = {GK16(16), GK16(48)}, g_q3k[2][64] = {GK16(32), GK16(64)},
                     g_hm[64] = GK16(0), g_q6k[64] = {GQ6G_(0), GQ6G_(1), GQ6G_(2), GQ6G_(3)};

/* rows (R, n) of stride rb bytes @ tokens a[0..T) (k16_prep) -> out[t * ld + r];
 * Q2_K (Q3 0) or Q3_K (Q3 1); R <= 4 and T <= 8 constants after inlining */
AVX512 static inline __attribute__((always_inline)) void
k16_tile_avx512(const uint8_t *w, size_t rb, const cairn__xq_k16 *const *a, int64_t n, float *out,
                size_t ld, const int R, const int T, const int KQ)
{
    const int Q3 = KQ == CAIRN__K16_Q3, Q6 = KQ == CAIRN__K16_Q6;
    const size_t bb = Q6   ? sizeof(cairn__block_q6_K)
                      : Q3 ? sizeof(cairn__block_q3_K)
                           : sizeof(cairn__block_q2_K);
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4), m4 = _mm512_set1_epi8(0x0F);
    const __m512i ghm = _mm512_loadu_si512(g_hm);
    const __m512i rsel = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const size_t pf = cairn__pf_ahead(rb, R);
    __m512 acc[8];
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / CAIRN__QK_K; i++) {
        const size_t off = (size_t)i * bb;
        CAIRN__PF_RUN(w, pf, i, (int)bb, R);
        /* W[m], dword r: row r's scales of sub-blocks 4m..4m+3 (a byte each: Q3_K's 6 bits,
         * unsigned, or Q2_K's scale | min << 4); D (M): lane 4r + s row r's d (-dmin) */
        __m128i W[4], S[4];
        uint16_t dh[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const uint8_t *b = w + (size_t)r * rb + off;
            if (r >= R)
                S[r] = _mm_setzero_si128();
            else if (Q6) { /* 16 signed scales */
                S[r] = _mm_loadu_si128(
                    (const __m128i *)(const void *)(b + offsetof(cairn__block_q6_K, scales)));
                memcpy(&dh[r], b + offsetof(cairn__block_q6_K, d), 2);
            } else if (Q3) { /* the 12 packed bytes */
                S[r] = _mm_maskz_loadu_epi8(0x0FFF, b + offsetof(cairn__block_q3_K, scales));
                memcpy(&dh[r], b + offsetof(cairn__block_q3_K, d), 2);
            } else {
                S[r] = _mm_loadu_si128((const __m128i *)(const void *)b);
                memcpy(&dh[r], b + offsetof(cairn__block_q2_K, d), 2);
                memcpy(&dh[4 + r], b + offsetof(cairn__block_q2_K, dmin), 2);
            }
        }
        { /* the 4 x 4 dword transposition: T[k], dword r = dword k of row r's S */
            const __m128i u0 = _mm_unpacklo_epi32(S[0], S[1]), u1 = _mm_unpackhi_epi32(S[0], S[1]),
                          u2 = _mm_unpacklo_epi32(S[2], S[3]), u3 = _mm_unpackhi_epi32(S[2], S[3]);
            const __m128i T0 = _mm_unpacklo_epi64(u0, u2), T1 = _mm_unpackhi_epi64(u0, u2),
                          T2 = _mm_unpacklo_epi64(u1, u3), T3 = _mm_unpackhi_epi64(u1, u3);
            if (Q3) { /* cairn__q3_K_scales_u6 on the 4 rows at once */
                const __m128i m4 = _mm_set1_epi8(0x0F), m2 = _mm_set1_epi8(3);
                W[0] =
                    _mm_or_si128(_mm_and_si128(T0, m4), _mm_slli_epi32(_mm_and_si128(T2, m2), 4));
                W[1] = _mm_or_si128(_mm_and_si128(T1, m4),
                                    _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(T2, 2), m2), 4));
                W[2] = _mm_or_si128(_mm_and_si128(_mm_srli_epi32(T0, 4), m4),
                                    _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(T2, 4), m2), 4));
                W[3] = _mm_or_si128(_mm_and_si128(_mm_srli_epi32(T1, 4), m4),
                                    _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(T2, 6), m2), 4));
            } else
                W[0] = T0, W[1] = T1, W[2] = T2, W[3] = T3;
        }
        /* (the halves as a vector by inserts: a load from their stores would not forward) */
        const __m512 DM = _mm512_castps256_ps512(_mm256_cvtph_ps(
            _mm_setr_epi16((short)dh[0], (short)dh[1], (short)dh[2], (short)dh[3], (short)dh[4],
                           (short)dh[5], (short)dh[6], (short)dh[7])));
        const __m512 D = _mm512_permutexvar_ps(rsel, DM);
        const __m512 M = Q3 ? D
                            : _mm512_sub_ps(_mm512_setzero_ps(),
                                            _mm512_permutexvar_ps(
                                                _mm512_add_epi32(rsel, _mm512_set1_epi32(4)), DM));
        /* each row's super-block in two registers (Q3_K: 110 bytes, Q2_K: 84; Q6_K's are read
         * a step at a time) */
        __m512i Z0[4], Z1[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (r >= R || Q6) {
                Z0[r] = Z1[r] = _mm512_setzero_si512();
                continue;
            }
            const uint8_t *b = w + (size_t)r * rb + off;
            Z0[r] = _mm512_loadu_si512(b);
            Z1[r] = _mm512_maskz_loadu_epi8(((__mmask64)1 << (bb - 64)) - 1, b + 64);
        }
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            const int nh = m / 2, j0 = 2 * (m % 2); /* blocks j0, j0 + 1 of half nh */
            const __m512i gq = _mm512_loadu_si512(Q3 ? g_q3k[nh] : g_q2k[nh]),
                          gq6 = _mm512_loadu_si512(g_q6k);
            /* dword s: the field of block j0 + s / 2, bits 2j.. (and bit 4nh + j of hmask) */
            const __m512i shv = _mm512_set_epi32(
                2 * j0 + 2, 2 * j0 + 2, 2 * j0, 2 * j0, 2 * j0 + 2, 2 * j0 + 2, 2 * j0, 2 * j0,
                2 * j0 + 2, 2 * j0 + 2, 2 * j0, 2 * j0, 2 * j0 + 2, 2 * j0 + 2, 2 * j0, 2 * j0);
            /* each byte of dword s: bit 4nh + j of hmask */
            const int hb = 4 * nh + j0, h0 = (int)(0x01010101u << hb),
                      h1 = (int)(0x01010101u << (hb + 1));
            const __m512i hsel =
                _mm512_set_epi32(h1, h1, h0, h0, h1, h1, h0, h0, h1, h1, h0, h0, h1, h1, h0, h0);
            __m512i P[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                if (Q6) { /* ql bytes 64nh + 16s + 4g.. (nibble m % 2), qh 128 + 32nh + .. */
                    if (r >= R) {
                        P[r] = _mm512_setzero_si512();
                        continue;
                    }
                    const uint8_t *b = w + (size_t)r * rb + off;
                    const __m512i ql = _mm512_permutexvar_epi8(
                        gq6, _mm512_loadu_si512(b + offsetof(cairn__block_q6_K, ql) + 64 * nh));
                    const __m512i qh = _mm512_permutexvar_epi8(
                        ghm,
                        _mm512_zextsi256_si512(_mm256_loadu_si256(
                            (const __m256i *)(const void *)(b + offsetof(cairn__block_q6_K, qh) +
                                                            32 * nh))));
                    const __m512i lo = m % 2 ? _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4)
                                             : _mm512_and_si512(ql, m4);
                    P[r] = _mm512_or_si512(
                        lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi32(qh, shv), m3), 4));
                    continue;
                }
                P[r] = _mm512_and_si512(
                    _mm512_srlv_epi32(_mm512_permutex2var_epi8(Z0[r], gq, Z1[r]), shv), m3);
                if (Q3)
                    P[r] = _mm512_mask_add_epi8(
                        P[r], _mm512_test_epi8_mask(_mm512_permutexvar_epi8(ghm, Z0[r]), hsel),
                        P[r], four);
            }
            /* lane 4r + s: row r's scale of sub-block 4m + s (and Q2_K's minimum) */
            const __m512i us = _mm512_cvtepu8_epi32(W[m]);
            __m512 sw, mw = _mm512_setzero_ps();
            if (Q6)
                sw = _mm512_mul_ps(D, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(W[m])));
            else if (Q3)
                sw = _mm512_mul_ps(D,
                                   _mm512_cvtepi32_ps(_mm512_sub_epi32(us, _mm512_set1_epi32(32))));
            else {
                sw = _mm512_mul_ps(
                    D, _mm512_cvtepi32_ps(_mm512_and_si512(us, _mm512_set1_epi32(0xF))));
                mw = _mm512_mul_ps(M, _mm512_cvtepi32_ps(_mm512_srli_epi32(us, 4)));
            }
            __m512i K[4];
            if (T > 1)
                transpose4(P, K);
            if (T == 1) {
                /* one token: each row's gathered groups against the activation as it lies
                 * (lane g, dword s: group g of sub-block s, the offset in lane 0), the four
                 * 128-bit lanes of each row then summed into lane 4r + s: the tile's integers */
                const cairn__xq_k16 *x = &a[0][4 * i + m];
                const __m512i av = _mm512_loadu_si512((const void *)x->a);
                const __m512i c =
                    _mm512_zextsi128_si512(_mm_load_si128((const __m128i *)(const void *)x->c));
                const __m512i c0 = Q3 ? c : Q6 ? _mm512_slli_epi32(c, 3) : _mm512_setzero_si512();
                __m512i pr[4];
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++)
                    pr[r] = _mm512_dpbusd_epi32(c0, P[r], av);
                const __m512i X = lanes4(pr);
                const __m512 sx = _mm512_broadcast_f32x4(_mm_load_ps(x->d));
                acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(X), _mm512_mul_ps(sw, sx), acc[0]);
                if (KQ == CAIRN__K16_Q2)
                    acc[0] = _mm512_fmadd_ps(mw, _mm512_broadcast_f32x4(_mm_load_ps(x->s)), acc[0]);
                continue;
            }
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const cairn__xq_k16 *x = &a[t][4 * i + m];
#define BC(p) _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(const void *)(p)))
                __m512i p = Q3   ? BC(x->c)
                            : Q6 ? _mm512_slli_epi32(BC(x->c), 3)
                                 : _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++)
                    p = _mm512_dpbusd_epi32(p, K[g], BC(x->a[g]));
#undef BC
                const __m512 sx = _mm512_broadcast_f32x4(_mm_load_ps(x->d));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sw, sx), acc[t]);
                if (KQ == CAIRN__K16_Q2)
                    acc[t] = _mm512_fmadd_ps(mw, _mm512_broadcast_f32x4(_mm_load_ps(x->s)), acc[t]);
            }
        }
    }
    store_rows(acc, T, R, out, ld);
}

#define K16_KERNELS(name, KQ)                                                                      \
    CAIRN__LANE_KERNELS(AVX512, name, k16_tile_avx512, cairn__xq_k16, KQ, QUAD_RR, QUAD_TT)

K16_KERNELS(q2_K, CAIRN__K16_Q2)
K16_KERNELS(q3_K, CAIRN__K16_Q3)
K16_KERNELS(q6_K, CAIRN__K16_Q6)
#undef K16_KERNELS

/* The rows and tile kernels of a type, and the form of the activation they take (-1: none here) */
const cairn__kernel_set cairn__kernels_avx512[] = {
    {CAIRN__GGML_Q4_0, CAIRN__XF_Q4, q4_0_rows, q4_0_tile},
    {CAIRN__GGML_Q8_0, CAIRN__XF_Q8, q8_0_rows, q8_0_tile},
    {CAIRN__GGML_Q4_1, CAIRN__XF_MIN, q4_1_rows, q4_1_tile},
    {CAIRN__GGML_Q5_0, CAIRN__XF_Q5, q5_0_rows, q5_0_tile},
    {CAIRN__GGML_Q5_1, CAIRN__XF_MIN, q5_1_rows, q5_1_tile},
    {CAIRN__GGML_IQ4_NL, CAIRN__XF_Q8, iq4_nl_rows, iq4_nl_tile},
    {CAIRN__GGML_IQ4_XS, CAIRN__XF_Q8, iq4_xs_rows, iq4_xs_tile},
    {CAIRN__GGML_Q2_K, CAIRN__XF_K16, q2_K_rows, q2_K_tile},
    {CAIRN__GGML_Q3_K, CAIRN__XF_K16, q3_K_rows, q3_K_tile},
    {CAIRN__GGML_Q6_K, CAIRN__XF_K16, q6_K_rows, q6_K_tile},
    {CAIRN__GGML_Q4_K, CAIRN__XF_XK, cairn__q4_K_rows_avx512, cairn__q4_K_tile_avx512},
    {CAIRN__GGML_F32, CAIRN__XF_FLOAT, f32_frows, NULL},
    {CAIRN__GGML_F16, CAIRN__XF_FLOAT, f16_frows, NULL},
    {CAIRN__GGML_BF16, CAIRN__XF_FLOAT, bf16_frows, NULL},
    {0, -1, NULL, NULL}};

#endif /* __x86_64__ */

/* gpu/kernels_cpu.h - CPU compute kernels: quantized matrix-vector products for decode,
 * dequantize+sgemm matrix-matrix products for the prompt, and the small element-wise operations
 * of a transformer layer. They run on the thread pool of gpu/threadpool.h. Internal to gpu/.
 *
 * A weight matrix W (rows, cols) is row-major in its ggml storage type: `rows` rows of `cols`
 * elements each, row r starting at data + r * row_bytes (a ggml tensor with ne = [cols, rows]).
 */
#ifndef CAIRN_GPU_KERNELS_CPU_H
#define CAIRN_GPU_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- weights -------------------------------------------------------------------------------- */
typedef struct {
    uint32_t type;      /* enum cairn__ggml_type */
    int64_t rows, cols; /* cols is a multiple of the type's block size */
    size_t row_bytes;
    const uint8_t *data;
} cairn__mat;

/* Which instruction set the kernels picked at startup: "avx2" or "scalar". */
const char *cairn__kernels_isa(void);
/* For tests and benchmarks: force the scalar kernels (1) or go back to detection (0). */
void cairn__kernels_force_scalar(int on);

/* Bytes of scratch cairn__matvec needs for an input of `cols` elements (the activation vector
 * quantized to Q8_0 blocks for the integer kernels). */
size_t cairn__matvec_scratch_bytes(int64_t cols);

/* W (rows, cols) @ x (cols) -> out (rows), rows split over the pool's threads.
 * For Q8_0 / Q4_0 weights x is first quantized to Q8_0 blocks (into scratch) and the products
 * are int8 dot products, as llama.cpp does; other types use x in float. */
void cairn__matvec(cairn__pool *p, const cairn__mat *W, const float *x, float *out, void *scratch);

/* Several products of one input in one pass of the pool (at most 4 matrices, all with the
 * same cols): W[k] (rows_k, cols) @ x (cols) -> out[k] (rows_k). Saves a synchronisation per
 * matrix (Q, K and V; gate and up). */
void cairn__matvec_n(cairn__pool *p, const cairn__mat *const *W, int n, const float *x,
                     float *const *out, void *scratch);

/* Bytes of scratch cairn__matmul needs (an f32 tile of dequantized weight rows). */
size_t cairn__matmul_scratch_bytes(const cairn__mat *W);
/* W (rows, cols) @ X^T: X (n, cols) -> OUT (n, rows), row-major with leading dimension rows.
 * Dequantizes W a tile at a time (F32 weights are used in place) and multiplies with sgemm
 * (OpenBLAS when built with it, a threaded plain loop otherwise). Float activations: results
 * match cairn__matvec to float rounding except for Q8_0/Q4_0, whose decode path rounds x to
 * int8. */
void cairn__matmul(cairn__pool *p, const cairn__mat *W, const float *X, int64_t n, float *OUT,
                   float *scratch);

/* Dequantizes row r of W into dst (cols floats). */
void cairn__mat_row(const cairn__mat *W, int64_t r, float *dst);

/* ---- element-wise ---------------------------------------------------------------------------- */
/* a (n) . b (n) -> float (vectorized like the matvec kernels) */
float cairn__dot_f32(const float *a, const float *b, int64_t n);
/* y (n) += a * x (n) */
void cairn__axpy(float *y, float a, const float *x, int64_t n);
/* out (n) = x (n) / rms(x) * w (n) ; out may alias x */
void cairn__rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);
/* x (n) = softmax(x) in place */
void cairn__softmax(float *x, int64_t n);
/* g (n) = silu(g) * u (n) */
void cairn__swiglu(float *g, const float *u, int64_t n);

#ifdef __cplusplus
}
#endif

#endif

/* gpu/cpu/blas.h - the CPU backend's float matrix products on OpenBLAS, which gpu/cpu/blas.c
 * loads at run time with the core chosen for this CPU, or on cairn's own loops. Internal to gpu/.
 */
#ifndef CAIRN_GPU_BLAS_H
#define CAIRN_GPU_BLAS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the float products run on OpenBLAS: loads it on the first call (thread-safe; later
 * calls give the same answer). 0 where the build has no OpenBLAS, where this process cannot load
 * it, or where CAIRN_BLAS=cairn asks for cairn's own loops (another value of CAIRN_BLAS is
 * ignored); the callers then take those loops. The first call sets OPENBLAS_CORETYPE in the
 * environment for the moment of loading (blas.c): make it before starting threads that read the
 * environment, as the CPU backend's creation does. */
int cairn__blas_on(void);

/* Row-major C (m, n) = alpha * A (m, k) @ op(B) + beta * C, where op(B) is B^T for a B of
 * (n, k) when trans_b, else B (k, n): cblas_sgemm. Only when cairn__blas_on(). */
void cairn__sgemm(int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);

/* OpenBLAS's thread count (process-wide: openblas_set_num_threads); no-ops without OpenBLAS. */
void cairn__blas_set_threads(int n);
/* OpenBLAS's thread count, or 0 without OpenBLAS. */
int cairn__blas_threads(void);

/* Which path the float products take, for a stats line: "openblas:CORE", CORE being OpenBLAS's
 * own name of the core it runs (openblas_get_corename()), with "(OPENBLAS_CORETYPE)" after it
 * when the user's variable chose it; "cairn" for cairn's own loops. Loads OpenBLAS as
 * cairn__blas_on() does. Static storage. */
const char *cairn__blas_desc(void);

/* The core cairn asks OpenBLAS for on this CPU when the user has not set OPENBLAS_CORETYPE:
 * "SKYLAKEX", "HASWELL", or NULL (OpenBLAS's own pick). For tests. */
const char *cairn__blas_core_for_cpu(void);

#ifdef __cplusplus
}
#endif

#endif

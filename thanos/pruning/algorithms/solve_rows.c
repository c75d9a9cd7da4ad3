/* The CPU row solver of Thanos (thanos.py: native_solver), built once per machine with the system C
   compiler and loaded with ctypes.

   Per row, gather A = Z[q][:, q], left-looking blocked Cholesky A = R^T R of [A | b], back substitution.
   Each row's system stays in the core's cache and costs no dispatch, where the batched torch solver pays
   per-matrix overheads of 15-20 us for systems of 64 unknowns. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef float v16 __attribute__((vector_size(64))); /* 16 floats: one AVX-512 or two AVX registers */

/* Row k of [A | b] (already reduced by rows 0..from-1) minus its projections on rows from..k-1, scaled by
   the pivot: row k of [R | z] with R^T R = A, R^T z = b. Returns 1 if the pivot is not positive. */
static int finish_row(float *A, int64_t w, int64_t s, int64_t k, int64_t from) {
    float *ak = A + k * w;
    int64_t i = from;
    for (; i + 4 <= k; i += 4) {
        const float *a0 = A + i * w, *a1 = a0 + w, *a2 = a1 + w, *a3 = a2 + w;
        const float c0 = a0[k], c1 = a1[k], c2 = a2[k], c3 = a3[k];
        for (int64_t j = k; j <= s; ++j) ak[j] -= c0 * a0[j] + c1 * a1[j] + c2 * a2[j] + c3 * a3[j];
    }
    for (; i < k; ++i) {
        const float *ai = A + i * w;
        const float c = ai[k];
        for (int64_t j = k; j <= s; ++j) ak[j] -= c * ai[j];
    }
    if (!(ak[k] > 0.0f)) return 1;
    const float root = sqrtf(ak[k]), inv = 1.0f / root;
    ak[k] = root;
    for (int64_t j = k + 1; j <= s; ++j) ak[j] *= inv;
    return 0;
}

/* Rows r0 <= r < r1: x_r = A^-1 b, A = Z[q][:, q], q = idx[r, :size[r]], b = rhs[r, :size[r]]; x_r is zero
   beyond size[r]. Panels of four rows of [A | b] are reduced by all rows above them with 4 x 16
   accumulators (each loaded row serves four), then among themselves; back substitution with R gives x_r.
   Returns the number of rows whose A is not positive definite. */
int64_t solve_rows(const float *Z, int64_t ldz, const int64_t *idx, const int64_t *size, const float *rhs,
                   float *x, int64_t ld, int64_t r0, int64_t r1) {
    const int64_t wmax = (ld + 16) / 16 * 16;
    float *A = aligned_alloc(64, sizeof(float) * (size_t)(wmax * (ld + 1)));
    if (!A) return r1 - r0;
    int64_t failed = 0;
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t s = size[r], w = (s + 16) / 16 * 16;
        const int64_t *q = idx + r * ld;
        const float *b = rhs + r * ld;
        float *xr = x + r * ld;
        for (int64_t j = s; j < ld; ++j) xr[j] = 0.0f;
        int bad = 0;
        int64_t k0 = 0;
        for (; k0 + 4 <= s && !bad; k0 += 4) {
            const int64_t c0 = k0 / 16 * 16;
            for (int t = 0; t < 4; ++t) {
                const float *zk = Z + q[k0 + t] * ldz;
                float *ak = A + (k0 + t) * w;
                for (int64_t j = c0; j < s; ++j) ak[j] = zk[q[j]];
                ak[s] = b[k0 + t];
                for (int64_t j = s + 1; j < w; ++j) ak[j] = 0.0f;
            }
            for (int64_t j0 = c0; j0 < w; j0 += 16) {
                v16 acc0 = *(v16 *)(A + (k0 + 0) * w + j0);
                v16 acc1 = *(v16 *)(A + (k0 + 1) * w + j0);
                v16 acc2 = *(v16 *)(A + (k0 + 2) * w + j0);
                v16 acc3 = *(v16 *)(A + (k0 + 3) * w + j0);
                for (int64_t i = 0; i < k0; ++i) {
                    const float *ai = A + i * w;
                    const v16 v = *(const v16 *)(ai + j0);
                    acc0 -= ai[k0] * v;
                    acc1 -= ai[k0 + 1] * v;
                    acc2 -= ai[k0 + 2] * v;
                    acc3 -= ai[k0 + 3] * v;
                }
                *(v16 *)(A + (k0 + 0) * w + j0) = acc0;
                *(v16 *)(A + (k0 + 1) * w + j0) = acc1;
                *(v16 *)(A + (k0 + 2) * w + j0) = acc2;
                *(v16 *)(A + (k0 + 3) * w + j0) = acc3;
            }
            for (int t = 0; t < 4 && !bad; ++t) bad = finish_row(A, w, s, k0 + t, k0);
        }
        for (int64_t k = k0; k < s && !bad; ++k) {
            const float *zk = Z + q[k] * ldz;
            float *ak = A + k * w;
            for (int64_t j = k; j < s; ++j) ak[j] = zk[q[j]];
            ak[s] = b[k];
            bad = finish_row(A, w, s, k, 0);
        }
        if (bad) {
            ++failed;
            continue;
        }
        for (int64_t i = s - 1; i >= 0; --i) {
            const float *ai = A + i * w;
            float acc = ai[s];
            for (int64_t j = i + 1; j < s; ++j) acc -= ai[j] * xr[j];
            xr[i] = acc / ai[i];
        }
    }
    free(A);
    return failed;
}

/* One new token's attention over a cache, reading each stored key and value row once, where it lies.
 *
 * q (Hkv, G, D): the token's G query heads per key/value head; keys and values (Hkv, capacity, D), of which the
 * first `length` positions are valid (the rest are never read, so no mask is needed); out (Hkv, G, D); scores
 * (Hkv, G, length) scratch. `attend_head` reads a paged cache as well (the server's pool, read by the one-call
 * step): a head's rows then lie in blocks of `size` positions, position p in block table[p / size], `stride`
 * floats from block 0, row p % size. Each pass walks the rows in order and looks up a block only where one starts. For each key/value head: one pass over its key rows scores all G queries against each
 * row while it is in the first-level cache, a softmax per query, then one pass over its value rows adds each row
 * into all G outputs. Grouped heads share the rows: nothing is copied G times. `attend_rows` splits the key/value
 * heads across `threads`; `attend_head` is one head's loop, which the one-call decode step (step.c) runs inside
 * its own team of threads.
 *
 * Where the compiler targets AVX-512 and a head is 64 wide with at most 4 queries per key/value head (SmolLM2 and
 * GPT-2 both), the rows go through 16-lane registers: the G queries and the G outputs stay in registers for the
 * whole pass, and the loop asks for rows PREFETCH_ROWS ahead (without the hint one pass read about 7 GB/s on a
 * 2-core Xeon, half what a plain sum reads). Elsewhere plain loops that the compiler vectorises as it can.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "vector_math.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define PREFETCH_ROWS 16

static void softmax_rows(float *__restrict__ s, long count, long length) {
    for (long g = 0; g < count; g++, s += length) {  /* the largest score subtracted first, as torch's softmax does */
        float largest = s[0], total = 0.0f;
        for (long p = 1; p < length; p++) largest = s[p] > largest ? s[p] : largest;
        long p = 0;
#if defined(VECTOR_MATH_AVX2)
        const __m256 top = _mm256_set1_ps(largest);
        __m256 sums = _mm256_setzero_ps();
        for (; p + 8 <= length; p += 8) {
            const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + p), top));
            _mm256_storeu_ps(s + p, e);
            sums = _mm256_add_ps(sums, e);
        }
        total = sum8(sums);
#endif
        for (; p < length; p++) { s[p] = expf(s[p] - largest); total += s[p]; }
        const float inverse = 1.0f / total;
        for (long q = 0; q < length; q++) s[q] *= inverse;
    }
}

/* Where one head's rows lie: in blocks of `size` rows listed by `table`, `stride` floats per block id; or, with no
 * table, in one run (`size` at least the length, so no block ever ends). */
typedef struct {
    const int64_t *table;
    long size, stride;
} Rows;

/* the first row of the block that starts at position p (p a multiple of size), from the head's block 0 row 0 */
static inline const float *block_at(const float *base, Rows at, long p) {
    return at.table ? base + at.table[p / at.size] * at.stride : base;  /* no table: called at p = 0 only */
}

/* Where to prefetch from while reading the block that starts at p: row `slot` of the next block (in one run, the
 * row PREFETCH_ROWS ahead), so that the hint crosses a block boundary as the rows do; the last block hints at
 * itself (lines already on their way). */
static inline const float *ahead_of(const float *base, Rows at, long p, long length, long dim) {
    if (!at.table) return base + PREFETCH_ROWS * dim;
    return p + at.size < length ? block_at(base, at, p + at.size) : block_at(base, at, p);
}

static void head_plain(const float *__restrict__ hq, const float *hk, const float *hv, Rows at,
                       float *__restrict__ ho, float *__restrict__ hs, long group, long dim, long length, float scale) {
    const float *row = block_at(hk, at, 0);
    for (long p = 0, slot = 0; p < length; p++, slot++, row += dim) {
        if (slot == at.size) { slot = 0; row = block_at(hk, at, p); }
        for (long g = 0; g < group; g++) {
            float dot = 0.0f;
            for (long d = 0; d < dim; d++) dot += hq[g * dim + d] * row[d];
            hs[g * length + p] = dot * scale;
        }
    }
    softmax_rows(hs, group, length);
    for (long i = 0; i < group * dim; i++) ho[i] = 0.0f;
    row = block_at(hv, at, 0);
    for (long p = 0, slot = 0; p < length; p++, slot++, row += dim) {
        if (slot == at.size) { slot = 0; row = block_at(hv, at, p); }
        for (long g = 0; g < group; g++) {
            const float w = hs[g * length + p];
            for (long d = 0; d < dim; d++) ho[g * dim + d] += w * row[d];
        }
    }
}

#if defined(__AVX512F__)
static void head_avx512_64(const float *__restrict__ hq, const float *hk, const float *hv, Rows at,
                           float *__restrict__ ho, float *__restrict__ hs, long group, long length, float scale) {
    __m512 q[4][4], acc[4][4];
    for (long g = 0; g < group; g++)
        for (int c = 0; c < 4; c++) { q[g][c] = _mm512_mul_ps(_mm512_loadu_ps(hq + g * 64 + 16 * c), _mm512_set1_ps(scale)); acc[g][c] = _mm512_setzero_ps(); }
    const float *row = block_at(hk, at, 0), *ahead = ahead_of(hk, at, 0, length, 64);
    for (long p = 0, slot = 0; p < length; p++, slot++, row += 64) {
        if (slot == at.size) { slot = 0; row = block_at(hk, at, p); ahead = ahead_of(hk, at, p, length, 64); }
        for (int c = 0; c < 4; c++) _mm_prefetch((const char *)(ahead + slot * 64 + 16 * c), _MM_HINT_T0);
        const __m512 k0 = _mm512_loadu_ps(row), k1 = _mm512_loadu_ps(row + 16);
        const __m512 k2 = _mm512_loadu_ps(row + 32), k3 = _mm512_loadu_ps(row + 48);
        for (long g = 0; g < group; g++) {
            __m512 t = _mm512_mul_ps(q[g][0], k0);
            t = _mm512_fmadd_ps(q[g][1], k1, t);
            t = _mm512_fmadd_ps(q[g][2], k2, t);
            t = _mm512_fmadd_ps(q[g][3], k3, t);
            hs[g * length + p] = _mm512_reduce_add_ps(t);
        }
    }
    softmax_rows(hs, group, length);
    row = block_at(hv, at, 0);
    const float *ahead_v = ahead_of(hv, at, 0, length, 64);
    for (long p = 0, slot = 0; p < length; p++, slot++, row += 64) {
        if (slot == at.size) { slot = 0; row = block_at(hv, at, p); ahead_v = ahead_of(hv, at, p, length, 64); }
        for (int c = 0; c < 4; c++) _mm_prefetch((const char *)(ahead_v + slot * 64 + 16 * c), _MM_HINT_T0);
        const __m512 v0 = _mm512_loadu_ps(row), v1 = _mm512_loadu_ps(row + 16);
        const __m512 v2 = _mm512_loadu_ps(row + 32), v3 = _mm512_loadu_ps(row + 48);
        for (long g = 0; g < group; g++) {
            const __m512 w = _mm512_set1_ps(hs[g * length + p]);
            acc[g][0] = _mm512_fmadd_ps(w, v0, acc[g][0]);
            acc[g][1] = _mm512_fmadd_ps(w, v1, acc[g][1]);
            acc[g][2] = _mm512_fmadd_ps(w, v2, acc[g][2]);
            acc[g][3] = _mm512_fmadd_ps(w, v3, acc[g][3]);
        }
    }
    for (long g = 0; g < group; g++)
        for (int c = 0; c < 4; c++) _mm512_storeu_ps(ho + g * 64 + 16 * c, acc[g][c]);
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
/* The same in 8-lane registers, for CPUs with AVX2 and no AVX-512, a head 64 wide and at most 3 queries per
 * key/value head (SmolLM2's 3): each key row's 8 pieces are multiplied into every query's sum, and the value pass
 * runs twice, over each half of the 64 features, so that 3 queries' sums (12 registers) stay in registers. */
static void head_avx2_64(const float *__restrict__ hq, const float *hk, const float *hv, Rows at,
                         float *__restrict__ ho, float *__restrict__ hs, long group, long length, float scale) {
    float q[3 * 64];
    for (long i = 0; i < group * 64; i++) q[i] = hq[i] * scale;
    const float *row = block_at(hk, at, 0), *ahead = ahead_of(hk, at, 0, length, 64);
    for (long p = 0, slot = 0; p < length; p++, slot++, row += 64) {
        if (slot == at.size) { slot = 0; row = block_at(hk, at, p); ahead = ahead_of(hk, at, p, length, 64); }
        for (int c = 0; c < 4; c++) _mm_prefetch((const char *)(ahead + slot * 64 + 16 * c), _MM_HINT_T0);
        for (long g = 0; g < group; g++) {
            const float *qg = q + g * 64;
            /* two sums of four products each: two short chains of multiply-adds, not one of eight */
            __m256 t0 = _mm256_mul_ps(_mm256_loadu_ps(qg), _mm256_loadu_ps(row));
            __m256 t1 = _mm256_mul_ps(_mm256_loadu_ps(qg + 8), _mm256_loadu_ps(row + 8));
            for (int c = 16; c < 64; c += 16) {
                t0 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + c), _mm256_loadu_ps(row + c), t0);
                t1 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + c + 8), _mm256_loadu_ps(row + c + 8), t1);
            }
            hs[g * length + p] = sum8(_mm256_add_ps(t0, t1));
        }
    }
    softmax_rows(hs, group, length);
    for (int half = 0; half < 64; half += 32) {
        __m256 acc[3][4];
        for (long g = 0; g < group; g++)
            for (int c = 0; c < 4; c++) acc[g][c] = _mm256_setzero_ps();
        row = block_at(hv, at, 0) + half;
        const float *ahead = ahead_of(hv, at, 0, length, 64) + half;
        for (long p = 0, slot = 0; p < length; p++, slot++, row += 64) {
            if (slot == at.size) {
                slot = 0;
                row = block_at(hv, at, p) + half;
                ahead = ahead_of(hv, at, p, length, 64) + half;
            }
            _mm_prefetch((const char *)(ahead + slot * 64), _MM_HINT_T0);
            _mm_prefetch((const char *)(ahead + slot * 64 + 16), _MM_HINT_T0);
            for (long g = 0; g < group; g++) {
                const __m256 w = _mm256_set1_ps(hs[g * length + p]);
                for (int c = 0; c < 4; c++) acc[g][c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8 * c), acc[g][c]);
            }
        }
        for (long g = 0; g < group; g++)
            for (int c = 0; c < 4; c++) _mm256_storeu_ps(ho + g * 64 + half + 8 * c, acc[g][c]);
    }
}
#endif

#ifdef __cplusplus
extern "C"
#endif
/* one key/value head's `group` queries hq (G, D) over its `length` rows, hk and hv its block 0 row 0 and `table`
 * its blocks (NULL: one run): the loop for that head's shape. Also called by the one-call decode step (step.c),
 * inside its own team of threads, over a contiguous cache or the server's pool. */
void attend_head(const float *__restrict__ hq, const float *hk, const float *hv, const int64_t *table, long size,
                 long stride, float *__restrict__ ho, float *__restrict__ hs, long group, long dim, long length) {
    const float scale = 1.0f / sqrtf((float)dim);
    const Rows at = {table, table ? size : length, stride};  /* no table: one run, no block ever ends */
#if defined(__AVX512F__)
    if (dim == 64 && group <= 4) { head_avx512_64(hq, hk, hv, at, ho, hs, group, length, scale); return; }
#elif defined(__AVX2__) && defined(__FMA__)
    if (dim == 64 && group <= 3) { head_avx2_64(hq, hk, hv, at, ho, hs, group, length, scale); return; }
#endif
    head_plain(hq, hk, hv, at, ho, hs, group, dim, length, scale);
}

#ifdef __cplusplus
extern "C"
#endif
void attend_rows(const float *__restrict__ q, const float *__restrict__ keys, const float *__restrict__ values,
                 float *__restrict__ out, float *__restrict__ scores, long kv_heads, long group, long dim,
                 long capacity, long length, int threads) {
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (long h = 0; h < kv_heads; h++)
        attend_head(q + h * group * dim, keys + h * capacity * dim, values + h * capacity * dim, NULL, capacity, 0,
                    out + h * group * dim, scores + h * group * length, group, dim, length);
}

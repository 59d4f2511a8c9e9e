/* One decode step of the Llama decoder, every layer in one call: the step with no per-operation cost.
 *
 * The decoder's arithmetic (llm_models/llama/model.py), written out for a batch of rows, each a request at its own
 * position: per layer RMSNorm, one product by q/k/v stacked, the rotary turn of q and k, the new key and value
 * written at the row's position of its cache (the decoder's contiguous store, or the server's pool of blocks
 * through the row's block table: `CacheView`), attention of each query head over positions 0 .. position, the o
 * product added to the residual,
 * RMSNorm, one product by gate/up stacked, SwiGLU, the down product added; then the final norm and the head.
 * Weights are float32 (out, in) matrices or int8 codes (out, in) with one float32 scale per row
 * (llm_models/kernels/quantize.py); activations and the cache are float32.
 *
 * Why one call: a one-row step moves about 0.5 GB of float32 weights in some 25 ms, but its thirty layers also make
 * a few hundred small operations (norms, the rotary turn, softmax, residual adds), each a dispatch through Python and
 * PyTorch that costs microseconds while doing nanoseconds of arithmetic. Here they are a few loops over 576 numbers.
 *
 * Threads: one OpenMP team for the whole step. Each product splits its weight rows in runs of whole four-row
 * blocks (`omp for`), attention splits the (row, key/value head) pairs, the small vector operations split the
 * batch's rows (at batch 1, one thread); each ends in the team's barrier. Products read four rows at once with one load of x serving all four, so
 * each row keeps its own sum and the four multiply-add chains overlap (one chain alone waits on its own latency:
 * the int8 loop over one row at a time streamed about 8 GB/s on a 2-core AMD EPYC). Where the compiler targets
 * AVX2 and FMA the block goes through 8-lane registers (int8 through 16-lane ones where it targets AVX-512:
 * STEP_AVX512); elsewhere plain loops the compiler vectorises as it can.
 * Built by llm_models/native.py with -fassociative-math: sums run in another order than a sequential loop's, as
 * any BLAS's do (the step is held to the decoder's logits within the decode lab's fast-mode tolerance).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "vector_math.h"
#if defined(VECTOR_MATH_AVX2)
#define STEP_AVX2 1
#endif
/* Where the compiler targets AVX-512, the int8 product takes 16 columns a step instead of 8: the same packed layout,
 * each row's two runs of 8 codes joined into one register, so each instruction that widens, converts or multiplies
 * does twice the work. Alternating with the 8-lane loop in one process on a 2-core Xeon at context 128, int8 took
 * 15.1 -> 13.5 ms on one thread and 8.5 -> 7.5 ms on two: with the hints below keeping memory busy, the loop's
 * instructions were what an int8 step waited on. The float32 product stays at 8 lanes: 16 bought it 2-7% in the
 * decode lab's rounds, while the server's step, as a client saw it, went from 43 to 49 ms a token. The sums run in
 * another order (16 lanes, then any last 8 columns through the 8-lane loop): logits move by about 1e-4. */
#if defined(STEP_AVX2) && defined(__AVX512F__)
#define STEP_AVX512 1
#endif

#define BLOCK_ROWS 4
/* Each product asks for its weights ahead of the block it reads, into the second-level cache (hint T1; a hint past a
 * matrix's end is harmless, hints never fault). Into the first-level cache (T0) a profile put most of the step's
 * samples on the load just after each hint, which is how a core looks whose line-fill buffers are all taken; into
 * L2 the same step read its weights faster, on a 2-core Xeon at context 128 (variants alternating in one process):
 * float32 from 52.8 to 44.8 ms on one thread and 27.4 to 23.2 ms on two, int8 from 18.3 to 16.1 ms and 10.7 to
 * 9.1 ms (with no hint, int8 took 22.1 ms). float32 is asked for 8 KiB ahead (most of a four-row block of 576
 * columns), int8 for 4 KiB (almost two blocks); 2 to 16 KiB measured alike. */
#ifndef PREFETCH_BYTES
#define PREFETCH_BYTES 4096
#endif
#ifndef PREFETCH_BYTES_F32
#define PREFETCH_BYTES_F32 8192
#endif
#define PREFETCH_HINT _MM_HINT_T1

typedef struct {
    long layers, width, heads, kv_heads, head_dim, hidden, vocab;
    float eps;
    int int8;  /* 0: float32 matrices, 1: int8 codes with row scales */
} StepShape;

#if defined(STEP_AVX2)
/* 8 int8 codes from p, sign-extended and converted: 8 float32 lanes */
#define WIDEN8(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#endif

/* Matrices are packed (llm_models/llama/native_step.py, ``pack``): rows in blocks of four, padded with zero rows to a
 * whole block, and within a block, for each run of 8 columns, the four rows' 8 weights one after another. A block
 * is then read strictly in address order, one 128-byte (float32) or 32-byte (int8) piece per 8 columns: in the
 * rows' own layout the four rows are four streams 4 * cols bytes apart, and the float32 head read at about 15 GB/s
 * on one thread of a 2-core AMD EPYC where a plain sum reads 19. cols is a multiple of 8. */

/* block `b` of y = W x: y[4b .. 4b + 3], W float32 packed */
static inline __attribute__((always_inline)) void block_f32(const float *__restrict__ x, const float *__restrict__ w, float *__restrict__ out, long b,
                      long cols) {
    const float *__restrict__ p = w + b * BLOCK_ROWS * cols;
#if defined(STEP_AVX2)
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (long i = 0; i < cols; i += 8, p += 32) {
        _mm_prefetch((const char *)p + PREFETCH_BYTES_F32, PREFETCH_HINT);  /* this step's 128 bytes, ahead */
        _mm_prefetch((const char *)p + PREFETCH_BYTES_F32 + 64, PREFETCH_HINT);
        const __m256 xv = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p), a0);
        a1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p + 8), a1);
        a2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p + 16), a2);
        a3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(p + 24), a3);
    }
    out[0] = sum8(a0); out[1] = sum8(a1); out[2] = sum8(a2); out[3] = sum8(a3);
#else
    float acc[BLOCK_ROWS] = {0.0f};
    for (long i = 0; i < cols; i += 8, p += 32)
        for (int r = 0; r < BLOCK_ROWS; r++)
            for (int j = 0; j < 8; j++) acc[r] += x[i + j] * p[8 * r + j];
    for (int r = 0; r < BLOCK_ROWS; r++) out[r] = acc[r];
#endif
}

/* block `b` of y = (codes x) * scale, codes int8 packed: each code widened to float32 inside the loop, so memory
 * delivers one byte per weight and no float32 copy exists */
static inline __attribute__((always_inline)) void block_int8(const float *__restrict__ x, const int8_t *__restrict__ codes, const float *__restrict__ scale,
                       float *__restrict__ out, long b, long cols) {
    const int8_t *__restrict__ p = codes + b * BLOCK_ROWS * cols;
    const float *__restrict__ s = scale + b * BLOCK_ROWS;
#if defined(STEP_AVX512)
    const char *ahead = (const char *)p + PREFETCH_BYTES;
    __m512 b0 = _mm512_setzero_ps(), b1 = b0, b2 = b0, b3 = b0;
    long i = 0;
    for (; i + 16 <= cols; i += 16, p += 64) {
        _mm_prefetch(ahead + 4 * i, PREFETCH_HINT);
        const __m512 xv = _mm512_loadu_ps(x + i);
/* 16 codes of one row, its run of 8 at lo and its next run 32 bytes on: 16 float32 lanes */
#define W16(lo) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_castpd_si128(_mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64((const __m128i *)(lo))), (const double *)((lo) + 32)))))
        b0 = _mm512_fmadd_ps(xv, W16(p), b0);
        b1 = _mm512_fmadd_ps(xv, W16(p + 8), b1);
        b2 = _mm512_fmadd_ps(xv, W16(p + 16), b2);
        b3 = _mm512_fmadd_ps(xv, W16(p + 24), b3);
    }
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i < cols; i += 8, p += 32) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(xv, WIDEN8(p), a0);
        a1 = _mm256_fmadd_ps(xv, WIDEN8(p + 8), a1);
        a2 = _mm256_fmadd_ps(xv, WIDEN8(p + 16), a2);
        a3 = _mm256_fmadd_ps(xv, WIDEN8(p + 24), a3);
    }
    out[0] = (_mm512_reduce_add_ps(b0) + sum8(a0)) * s[0]; out[1] = (_mm512_reduce_add_ps(b1) + sum8(a1)) * s[1];
    out[2] = (_mm512_reduce_add_ps(b2) + sum8(a2)) * s[2]; out[3] = (_mm512_reduce_add_ps(b3) + sum8(a3)) * s[3];
#elif defined(STEP_AVX2)
    const char *ahead = (const char *)p + PREFETCH_BYTES;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (long i = 0; i < cols; i += 8, p += 32) {
        if ((i & 15) == 0) _mm_prefetch(ahead + 4 * i, PREFETCH_HINT);  /* 64 bytes per 16 columns */
        const __m256 xv = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(xv, WIDEN8(p), a0);
        a1 = _mm256_fmadd_ps(xv, WIDEN8(p + 8), a1);
        a2 = _mm256_fmadd_ps(xv, WIDEN8(p + 16), a2);
        a3 = _mm256_fmadd_ps(xv, WIDEN8(p + 24), a3);
    }
    out[0] = sum8(a0) * s[0]; out[1] = sum8(a1) * s[1]; out[2] = sum8(a2) * s[2]; out[3] = sum8(a3) * s[3];
#else
    float acc[BLOCK_ROWS] = {0.0f};
    for (long i = 0; i < cols; i += 8, p += 32)
        for (int r = 0; r < BLOCK_ROWS; r++)
            for (int j = 0; j < 8; j++) acc[r] += x[i + j] * (float)p[8 * r + j];
    for (int r = 0; r < BLOCK_ROWS; r++) out[r] = acc[r] * s[r];
#endif
}

/* Y = X W^T for `batch` rows of X (batch, cols) into Y (batch, rows): the team's share of whole weight blocks
 * each, every row of X multiplied by a block while it is in the first-level cache, so the weights cross memory once
 * per step whatever the batch. Called by every thread of the team. The last block's padding rows are computed into
 * a local and dropped. int8 scales are padded like the rows. */
static void product(const StepShape *shape, const void *matrix, const float *scale, const float *x, long x_stride,
                    float *y, long y_stride, long batch, long rows, long cols) {
    const long blocks = (rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
    #pragma omp for schedule(static)
    for (long b = 0; b < blocks; b++)
        for (long i = 0; i < batch; i++) {
            float out[BLOCK_ROWS];
            if (shape->int8) block_int8(x + i * x_stride, (const int8_t *)matrix, scale, out, b, cols);
            else block_f32(x + i * x_stride, (const float *)matrix, out, b, cols);
            for (long r = 0; r < BLOCK_ROWS && b * BLOCK_ROWS + r < rows; r++) y[i * y_stride + b * BLOCK_ROWS + r] = out[r];
        }
}

/* out = x / sqrt(mean(x^2) + eps) * weight, the sum in float32 as the decoder's F.rms_norm */
static void rms_norm(const float *x, const float *weight, float *out, long width, float eps) {
    float total = 0.0f;
    for (long i = 0; i < width; i++) total += x[i] * x[i];
    const float inverse = 1.0f / sqrtf(total / (float)width + eps);
    for (long i = 0; i < width; i++) out[i] = x[i] * inverse * weight[i];
}

/* gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i] for `count` (at most 8) entries: SwiGLU */
static void swiglu(float *__restrict__ gate, const float *__restrict__ up, long count) {
#if defined(STEP_AVX2)
    if (count == 8) {
        const __m256 g = _mm256_loadu_ps(gate), one = _mm256_set1_ps(1.0f);
        const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
        _mm256_storeu_ps(gate, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up)));
        return;
    }
#endif
    for (long i = 0; i < count; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* turn each (j, j + D/2) pair of a head by its angle: cos and sin (D,) hold each angle twice, as the decoder's */
static void rotate(float *head, const float *cos_, const float *sin_, long dim) {
    const long half = dim / 2;
    for (long j = 0; j < half; j++) {
        const float a = head[j], b = head[j + half];
        head[j] = a * cos_[j] - b * sin_[j];
        head[j + half] = b * cos_[j + half] + a * sin_[j + half];
    }
}

/* the `group` query heads of one key/value head over its `length` stored rows, each row read once for all of
 * them, the rows in one run or in blocks listed by `table` (attend_rows.c, built into the same library) */
#ifdef __cplusplus
extern "C"
#endif
void attend_head(const float *hq, const float *hk, const float *hv, const int64_t *table, long size, long stride,
                 float *ho, float *hs, long group, long dim, long length);

/* Where the cache lies. keys, values: per layer, that layer's block 0, head 0, row 0. Position p of row i's head h
 * is at  block * block_stride + h * head_stride + (p % block_size) * D  from there, block being
 * tables[i * width + p / block_size], or 0 with no tables: the decoder's own (1, Hkv, capacity, D) store per layer
 * is one block of `capacity` positions; the server's pool (blocks, layers x Hkv, S, D) is blocks of S positions
 * with every layer's heads side by side. */
typedef struct {
    float *const *keys, *const *values;
    const int64_t *tables;
    long width, block_size, block_stride, head_stride;
} CacheView;

/* row i's block and row within it for position p: the element offset of its head 0 */
static long cache_offset(const CacheView *cache, long i, long p, long dim) {
    const long block = cache->tables ? cache->tables[i * cache->width + p / cache->block_size] : 0;
    return block * cache->block_stride + (p % cache->block_size) * dim;
}

#ifdef __cplusplus
extern "C"  /* built by g++ where no C compiler is found: keep the C name */
#endif
/* One step for `batch` rows, row i a token at positions[i] after its own cached positions 0 .. positions[i] - 1.
 * x (batch, width): the tokens' embedding rows on entry, the residual streams after the last layer on return.
 * matrices: per layer qkv, o, gate_up, down (4 * layers pointers), then the head; scales the same (int8 only).
 * norms: per layer the attention and MLP norms, then the final norm. cos_, sin_ (batch, D): each row's angles.
 * scratch: batch * (2 width + (H + 2 Hkv) D + H D + 2 hidden) floats. scores: batch * H * (longest position + 1)
 * floats. logits (batch, vocab). */
void llama_step(const StepShape *shape, const void *const *matrices, const float *const *scales,
                const float *const *norms, const CacheView *cache, long batch, const int64_t *positions,
                const float *cos_, const float *sin_, float *x, float *scratch, float *scores, float *logits,
                int threads) {
    const long C = shape->width, H = shape->heads, Hkv = shape->kv_heads, D = shape->head_dim, F = shape->hidden;
    const long group = H / Hkv, qkv_rows = (H + 2 * Hkv) * D;
    long longest = 0;
    for (long i = 0; i < batch; i++) longest = positions[i] + 1 > longest ? positions[i] + 1 : longest;
    /* each (batch, n) with n the per-row width: rows of one buffer lie one after another */
    float *normed = scratch, *qkv = normed + batch * C, *attended = qkv + batch * qkv_rows;
    float *gate_up = attended + batch * H * D, *added = gate_up + batch * 2 * F;
    #pragma omp parallel num_threads(threads)
    {
        for (long l = 0; l < shape->layers; l++) {
            const void *const *m = matrices + 4 * l;
            const float *const *s = scales ? scales + 4 * l : NULL;
            float *layer_keys = cache->keys[l], *layer_values = cache->values[l];
            #pragma omp for schedule(static)
            for (long i = 0; i < batch; i++) rms_norm(x + i * C, norms[2 * l], normed + i * C, C, shape->eps);
            product(shape, m[0], s ? s[0] : NULL, normed, C, qkv, qkv_rows, batch, qkv_rows, C);  /* q, k, v */
            #pragma omp for schedule(static)
            for (long i = 0; i < batch; i++) {
                float *row = qkv + i * qkv_rows;
                const float *row_cos = cos_ + i * D, *row_sin = sin_ + i * D;
                const long at = cache_offset(cache, i, positions[i], D);
                for (long h = 0; h < H; h++) rotate(row + h * D, row_cos, row_sin, D);
                for (long h = 0; h < Hkv; h++) {
                    float *k = row + (H + h) * D;
                    rotate(k, row_cos, row_sin, D);
                    memcpy(layer_keys + at + h * cache->head_stride, k, D * sizeof(float));
                    memcpy(layer_values + at + h * cache->head_stride, row + (H + Hkv + h) * D, D * sizeof(float));
                }
            }
            #pragma omp for schedule(static) collapse(2)
            for (long i = 0; i < batch; i++)
                for (long kv = 0; kv < Hkv; kv++) {  /* row i's query heads kv * group .. (kv + 1) * group - 1 */
                    const int64_t *table = cache->tables ? cache->tables + i * cache->width : NULL;
                    attend_head(qkv + i * qkv_rows + kv * group * D, layer_keys + kv * cache->head_stride,
                                layer_values + kv * cache->head_stride, table, cache->block_size, cache->block_stride,
                                attended + (i * H + kv * group) * D, scores + (i * H + kv * group) * longest, group, D,
                                positions[i] + 1);
                }
            product(shape, m[1], s ? s[1] : NULL, attended, H * D, added, C, batch, C, H * D);
            #pragma omp for schedule(static)
            for (long i = 0; i < batch; i++) {
                for (long c = 0; c < C; c++) x[i * C + c] += added[i * C + c];
                rms_norm(x + i * C, norms[2 * l + 1], normed + i * C, C, shape->eps);
            }
            product(shape, m[2], s ? s[2] : NULL, normed, C, gate_up, 2 * F, batch, 2 * F, C);  /* gate, up */
            #pragma omp for schedule(static) collapse(2)
            for (long i = 0; i < batch; i++)
                for (long f = 0; f < F; f += 8)
                    swiglu(gate_up + i * 2 * F + f, gate_up + i * 2 * F + F + f, F - f < 8 ? F - f : 8);
            product(shape, m[3], s ? s[3] : NULL, gate_up, 2 * F, added, C, batch, C, F);
            #pragma omp for schedule(static)
            for (long i = 0; i < batch; i++)
                for (long c = 0; c < C; c++) x[i * C + c] += added[i * C + c];
        }
        #pragma omp for schedule(static)
        for (long i = 0; i < batch; i++) rms_norm(x + i * C, norms[2 * shape->layers], normed + i * C, C, shape->eps);
        product(shape, matrices[4 * shape->layers], scales ? scales[4 * shape->layers] : NULL, normed, C, logits,
                shape->vocab, batch, shape->vocab, C);
    }
}

/* One new token per request attending over that request's own blocks of a paged cache, read where they lie.
 *
 * The pool keeps every block's keys as (blocks, heads, S, D) rows, a block holding S positions; a request's block
 * table lists its blocks in order, so position p of request b lives in block tables[b][p / S], row p % S. A
 * gather would first copy each request's blocks into one contiguous (Hkv, P, D) tensor per layer and step (every
 * byte of the context written once and read again); this loop reads each stored row once, where it is.
 *
 * q (B, Hkv, G, D) float32: each request's G query heads per key/value head. keys, values: the first element of
 * one layer's (blocks, Hkv, S, D) view, block_stride elements from one block to the next (the pool stores every
 * layer's heads side by side, so a block is more than Hkv x S x D), S x D from one head to the next. tables
 * (B, width) int64, lengths (B,) int64: request b reads positions 0 .. lengths[b] - 1. out (B, Hkv, G, D) float32;
 * scores (B, Hkv, G, longest) float32 scratch. The cache holds float32 or bfloat16 (widened to float32 as each row
 * is read); every sum is float32, as torch's CPU attention computes for 16-bit inputs.
 *
 * For each (request, key/value head) pair: one pass over its key rows scores all G queries against each row, a
 * softmax per query (the largest score subtracted first, as torch's does), one pass over its value rows adds each
 * row into all G outputs. Pairs are split over OpenMP threads.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float widen_bf16(uint16_t bits) {
    const uint32_t wide = (uint32_t)bits << 16;  /* bfloat16 is the top half of a float32 */
    float value;
    memcpy(&value, &wide, sizeof value);
    return value;
}

static void softmax_rows(float *__restrict__ s, long count, long stride, long length) {
    for (long g = 0; g < count; g++, s += stride) {
        float largest = s[0], total = 0.0f;
        for (long p = 1; p < length; p++) largest = s[p] > largest ? s[p] : largest;
        for (long p = 0; p < length; p++) { s[p] = expf(s[p] - largest); total += s[p]; }
        const float inverse = 1.0f / total;
        for (long p = 0; p < length; p++) s[p] *= inverse;
    }
}

/* One (request, head) pair over rows of type T, widened by WIDEN: the same loop for both storage types. */
#define PAIR(NAME, T, WIDEN)                                                                                        \
static void NAME(const float *__restrict__ hq, const T *__restrict__ keys, const T *__restrict__ values,          \
                 const int64_t *__restrict__ table, float *__restrict__ ho, float *__restrict__ hs, long group,     \
                 long dim, long size, long block_stride, long head_offset, long length, long longest, float scale) { \
    for (long p = 0; p < length; p++) {                                                                              \
        const T *__restrict__ row = keys + table[p / size] * block_stride + head_offset + (p % size) * dim;        \
        for (long g = 0; g < group; g++) {                                                                           \
            float dot = 0.0f;                                                                                        \
            for (long d = 0; d < dim; d++) dot += hq[g * dim + d] * WIDEN(row[d]);                                  \
            hs[g * longest + p] = dot * scale;                                                                       \
        }                                                                                                            \
    }                                                                                                                \
    softmax_rows(hs, group, longest, length);                                                                        \
    for (long i = 0; i < group * dim; i++) ho[i] = 0.0f;                                                             \
    for (long p = 0; p < length; p++) {                                                                              \
        const T *__restrict__ row = values + table[p / size] * block_stride + head_offset + (p % size) * dim;      \
        for (long g = 0; g < group; g++) {                                                                           \
            const float w = hs[g * longest + p];                                                                     \
            for (long d = 0; d < dim; d++) ho[g * dim + d] += w * WIDEN(row[d]);                                    \
        }                                                                                                            \
    }                                                                                                                \
}

#define AS_FLOAT(x) (x)
PAIR(pair_float32, float, AS_FLOAT)
PAIR(pair_bfloat16, uint16_t, widen_bf16)

#ifdef __cplusplus
extern "C"
#endif
void attend_blocks(const float *__restrict__ q, const void *keys, const void *values,
                   const int64_t *__restrict__ tables, const int64_t *__restrict__ lengths, float *__restrict__ out,
                   float *__restrict__ scores, long batch, long kv_heads, long group, long dim, long size,
                   long block_stride, long width, long longest, int bfloat16, int threads) {
    const float scale = 1.0f / sqrtf((float)dim);
    #pragma omp parallel for num_threads(threads) schedule(static) collapse(2)
    for (long b = 0; b < batch; b++) {
        for (long h = 0; h < kv_heads; h++) {
            const long pair = b * kv_heads + h, head_offset = h * size * dim;
            const float *hq = q + pair * group * dim;
            float *ho = out + pair * group * dim, *hs = scores + pair * group * longest;
            if (bfloat16)
                pair_bfloat16(hq, (const uint16_t *)keys, (const uint16_t *)values, tables + b * width, ho, hs, group,
                              dim, size, block_stride, head_offset, lengths[b], longest, scale);
            else
                pair_float32(hq, (const float *)keys, (const float *)values, tables + b * width, ho, hs, group, dim,
                             size, block_stride, head_offset, lengths[b], longest, scale);
        }
    }
}

/* Small vector helpers the decode step's C loops share (attend_rows.c, step.c).
 *
 * exp8: e^x in 8 float32 lanes, Cephes' expf as Julien Pommier's avx_mathfun writes it (x = n ln 2 + r, a
 * degree-6 polynomial for e^r, 2^n put into the exponent bits): relative error about 2e-7 over the softmax's
 * range, x <= 0. Why: glibc's expf is one call per number, and a softmax over 1,024 positions for 3 queries in each
 * of 30 layers makes 92,160 of them a step; with expf the attention of one token read its cache at about 6.5 GB/s on
 * a 2-core AMD EPYC whose plain sum reads 19. Inputs below -88.38 give 0 (e^-88.38 is below float32's smallest
 * normal number anyway).
 */
#ifndef LLM_MODELS_VECTOR_MATH_H
#define LLM_MODELS_VECTOR_MATH_H
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VECTOR_MATH_AVX2 1

static inline float sum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), _mm256_set1_ps(-88.3762626647949f));
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  /* r = x - n ln 2, ln 2 in two parts */
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x), _mm256_set1_ps(1.0f));
    const __m256i power = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(power));  /* n = -127 (x near -88.4) makes 2^n 0 */
}
#endif
#endif

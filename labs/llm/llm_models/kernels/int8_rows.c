/* One row times an int8 weight-only matrix: y[o] = scale[o] * sum_i x[i] * codes[o][i].
 *
 * Each code is widened to float32 inside the loop that streams it, so memory delivers one byte per weight and
 * no float32 copy of the matrix ever exists. Rows are split across `threads` OpenMP threads (the runtime is the
 * one PyTorch already loaded), each taking a run of whole four-row blocks.
 *
 * Where the compiler targets AVX-512 (-march=native on a CPU that has it), four rows go through the loop at once:
 * one load of x serves four rows, and each row keeps its own 16-lane sum. The loop also asks for the bytes it will
 * need PREFETCH_BYTES ahead: widening, converting and multiplying each code keeps the core busy enough that the
 * hardware prefetcher alone leaves memory idle (measured on a 2-core Xeon, 1 GB of codes, one thread: 7.2 GB/s
 * without the hint, 10.9 GB/s with it at 4 KiB; 2 KiB and 16 KiB were no better). Elsewhere a plain loop that the
 * compiler vectorises as it can. Built by llm_models/kernels/int8_loop.py with -fassociative-math, which lets the
 * compiler keep several partial sums in vector registers: the sum's order differs from a sequential loop's by float
 * rounding, as any BLAS's does.
 */
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define BLOCK_ROWS 4
#define PREFETCH_BYTES 4096

static void rows_plain(const float *__restrict__ x, const int8_t *__restrict__ codes, const float *__restrict__ scale,
                       float *__restrict__ y, long first, long last, long cols) {
    for (long o = first; o < last; o++) {
        const int8_t *__restrict__ row = codes + o * cols;
        float acc = 0.0f;
        for (long i = 0; i < cols; i++) acc += x[i] * (float)row[i];
        y[o] = acc * scale[o];
    }
}

#if defined(__AVX512F__)
/* 16 codes from p, sign-extended and converted: 16 float32 lanes */
#define WIDEN(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p))))

static void rows_avx512(const float *__restrict__ x, const int8_t *__restrict__ codes, const float *__restrict__ scale,
                        float *__restrict__ y, long first, long last, long cols) {
    long o = first;
    const long full = cols & ~15L;  /* columns the 16-lane loop covers; the rest (if any) one by one */
    for (; o + BLOCK_ROWS <= last; o += BLOCK_ROWS) {
        const int8_t *r0 = codes + o * cols, *r1 = r0 + cols, *r2 = r1 + cols, *r3 = r2 + cols;
        /* the block's four rows are contiguous: 4 bytes of it pass for each column step */
        const char *ahead = (const char *)r0 + PREFETCH_BYTES;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (long i = 0; i < full; i += 16) {
            _mm_prefetch(ahead + 4 * i, _MM_HINT_T0);
            _mm_prefetch(ahead + 4 * i + 64, _MM_HINT_T0);
            const __m512 xv = _mm512_loadu_ps(x + i);
            a0 = _mm512_fmadd_ps(xv, WIDEN(r0 + i), a0);
            a1 = _mm512_fmadd_ps(xv, WIDEN(r1 + i), a1);
            a2 = _mm512_fmadd_ps(xv, WIDEN(r2 + i), a2);
            a3 = _mm512_fmadd_ps(xv, WIDEN(r3 + i), a3);
        }
        float s0 = _mm512_reduce_add_ps(a0), s1 = _mm512_reduce_add_ps(a1);
        float s2 = _mm512_reduce_add_ps(a2), s3 = _mm512_reduce_add_ps(a3);
        for (long i = full; i < cols; i++) {
            s0 += x[i] * r0[i]; s1 += x[i] * r1[i]; s2 += x[i] * r2[i]; s3 += x[i] * r3[i];
        }
        y[o] = s0 * scale[o]; y[o + 1] = s1 * scale[o + 1]; y[o + 2] = s2 * scale[o + 2]; y[o + 3] = s3 * scale[o + 3];
    }
    rows_plain(x, codes, scale, y, o, last, cols);  /* the last rows of a run that is not a whole block */
}
#endif

#ifdef __cplusplus
extern "C"  /* built by g++ where no C compiler is found: keep the C name */
#endif
void int8_rows(const float *__restrict__ x, const int8_t *__restrict__ codes, const float *__restrict__ scale,
               float *__restrict__ y, long rows, long cols, int threads) {
    #pragma omp parallel num_threads(threads)
    {
        long parts = 1, part = 0;
#ifdef _OPENMP
        parts = omp_get_num_threads();
        part = omp_get_thread_num();
#endif
        /* each thread a run of whole blocks, so no block is split between two threads */
        const long per = ((rows + parts - 1) / parts + BLOCK_ROWS - 1) / BLOCK_ROWS * BLOCK_ROWS;
        const long first = part * per, last = first + per < rows ? first + per : rows;
        if (first < last) {
#if defined(__AVX512F__)
            rows_avx512(x, codes, scale, y, first, last, cols);
#else
            rows_plain(x, codes, scale, y, first, last, cols);
#endif
        }
    }
}

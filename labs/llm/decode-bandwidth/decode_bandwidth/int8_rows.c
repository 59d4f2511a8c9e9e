/* One row times an int8 weight-only matrix: y[o] = scale[o] * sum_i x[i] * codes[o][i].
 *
 * Each code is widened to float32 inside the loop that streams it, so memory delivers one byte per weight and
 * no float32 copy of the matrix ever exists. Rows are split across `threads` OpenMP threads (the runtime is the
 * one PyTorch already loaded). Built by decode_bandwidth/native.py with -fassociative-math, which lets the
 * compiler keep several partial sums in vector registers: the sum's order differs from a sequential loop's by
 * float rounding, as any BLAS's does.
 */
#include <stdint.h>

#ifdef __cplusplus
extern "C"  /* built by g++ where no C compiler is found: keep the C name */
#endif
void int8_rows(const float *__restrict__ x, const int8_t *__restrict__ codes, const float *__restrict__ scale,
               float *__restrict__ y, long rows, long cols, int threads) {
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (long o = 0; o < rows; o++) {
        const int8_t *__restrict__ row = codes + o * cols;
        float acc = 0.0f;
        for (long i = 0; i < cols; i++) acc += x[i] * (float)row[i];
        y[o] = acc * scale[o];
    }
}

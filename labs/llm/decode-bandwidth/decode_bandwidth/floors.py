"""The two floors a decode step is set against, as the benchmark measures them: the read kernels that give the
memory floor (their shapes, and the bytes each moves) and the square matmul that gives the arithmetic floor.

Torch-free, and the one home of each: the timed module (decode_bandwidth.bandwidth) and the benchmark take them
from here, and so do the record's figures, views and tests.
"""

from __future__ import annotations

from collections.abc import Sequence

# The square matmul that measures arithmetic, n per dtype: 1,024 in float32; 512 where the CPU has no bfloat16
# units, so that one product (2 x 512^3 flops, seconds when emulated) leaves time for the steps it prices.
MATMUL_SIZES = {"float32": 1024, "bfloat16": 512, "float16": 512}
# Paired rounds of the read kernels over a buffer of the trained step's own bytes and over the large buffer, per
# thread count: 5, the fewest whose middle half (the noise a 'faster' must clear) spans more than two rounds.
STEP_SIZED_ROUNDS = 5
MIN_BANDWIDTH_PASSES = 10  # the floor is the best of at least ten passes of each read kernel
STREAMS = 16  # the multi-stream read sums this many equal slices of the buffer, element by element
MATVEC_COLUMNS = 4096  # the BLAS read: the buffer as a matrix this wide, times a vector
COMPILED_COLUMNS = 768  # the generated read: GPT-2 small's width, the row length of all but one of its products,
# and the width at which that loop streamed fastest on the development CPU (rows of 4,096 were slower)
# The read kernels the floor takes the fastest of. A step whose matrix-vector products stream weights
# faster than one kernel reads memory would beat a floor built on that kernel alone: a floor must be
# the best any kernel on this machine achieves, the BLAS matrix-vector product included.
READ_KERNELS = {
    "sum": "torch.sum over the whole buffer",
    "dot": "torch.dot of its two halves",
    "streams": f"an element-wise sum of its {STREAMS} equal slices ({STREAMS} read streams at once; "
               f"it writes a {STREAMS}th of the bytes, counted too)",
    "matvec": f"torch.mv, the buffer as a {MATVEC_COLUMNS}-column matrix times a vector (the BLAS "
              "matrix-vector product a decode step's weights go through)",
    "compiled": f"the buffer as a {COMPILED_COLUMNS}-column matrix times a vector through the loop "
                "torch.compile generates for ours-compiled's one-row multiplies",
}


def kernel_bytes(kernel: str, buffer_bytes: int) -> int:
    """The bytes a read kernel moves over the buffer: all of them read, plus what it writes. The generated
    loop reads whole rows of COMPILED_COLUMNS float32 values, so a tail shorter than a row stays unread."""
    if kernel == "streams":
        return buffer_bytes + buffer_bytes // STREAMS
    if kernel == "compiled":
        return buffer_bytes // (4 * COMPILED_COLUMNS) * (4 * COMPILED_COLUMNS)
    return buffer_bytes


def best_rate(amount: float, durations_ns: Sequence[int]) -> tuple[int, float]:
    """The fastest pass and the rate it gives: bytes (or flops) per second."""
    best = min(durations_ns)
    return best, amount / best * 1e9


def square_matmul_flops(size: int) -> int:
    return 2 * size**3

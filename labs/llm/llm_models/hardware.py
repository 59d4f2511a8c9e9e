"""Published figures of the hardware people serve models on, for arithmetic a page labels as arithmetic.

Nothing here is measured in this repository: each figure is a vendor's datasheet number, with its link, so a
page can set what this CPU measures beside what the same formulas give on an accelerator. Where the arithmetic
and the measurement differ in kind (a CPU's ridge point a few flops per byte, an accelerator's a few hundred),
the lessons that depend on it invert, and a page says which.

Torch-free: the decode and serving labs' figures packages derive their accelerator rows from these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_bytes: float  # the device memory the weights and the KV cache share
    bandwidth_bytes_per_s: float  # peak memory bandwidth, as the datasheet states it
    bf16_flops_per_s: float  # dense BF16 matrix throughput (datasheets often print the 2:4-sparse figure, twice this)
    source: str  # the datasheet

    @property
    def ridge_flops_per_byte(self) -> float:
        """The arithmetic intensity at which the device's compute and its memory take equally long: below it a
        kernel waits on bytes, above it on arithmetic (the roofline's ridge point)."""
        return self.bf16_flops_per_s / self.bandwidth_bytes_per_s


# NVIDIA's H100 SXM product page: 80 GB HBM3, 3.35 TB/s; BF16 Tensor Core 1,979 TFLOPS "with sparsity", so
# 989.5 TFLOPS dense.
H100_SXM = Accelerator(
    name="NVIDIA H100 SXM 80 GB",
    memory_bytes=80e9,
    bandwidth_bytes_per_s=3.35e12,
    bf16_flops_per_s=1979e12 / 2,
    source="https://www.nvidia.com/en-us/data-center/h100/",
)

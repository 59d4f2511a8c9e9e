"""Which cache format, with which parameters: one frozen dataclass, checked once against the head width, and the
format a label names.

The formats are shared with the serving lab, whose admission prices blocks in them, so they live below both labs
(llm_models.cache_formats, with each format's byte formulas); this lab's modules, views and tests name them here.
Torch-free: the figures module (and through it the site build) budgets with these formats without importing torch.
"""

from __future__ import annotations

from llm_models.cache_formats import (
    FLOAT_SIDE_BITS,
    FORMAT_NAMES,
    FP8_CALIBRATIONS,
    FP8_MAX,
    FP8_SCALES,
    FP8_SMALLEST_NORMAL,
    GGML_BLOCK,
    KIVI_BITS,
    SIDES,
    SPLITTABLE,
    CacheFormat,
    format_of,
)

__all__ = ["FLOAT_SIDE_BITS", "FORMAT_NAMES", "FP8_CALIBRATIONS", "FP8_MAX", "FP8_SCALES", "FP8_SMALLEST_NORMAL",
           "GGML_BLOCK", "KIVI_BITS", "SIDES", "SPLITTABLE", "CacheFormat", "format_of"]

"""A GPT-2-size decoder with random weights: its decode step against the memory floor and transformers."""

from .cache import ConcatCache, PreallocatedCache, random_concat_cache
from .config import PRESETS, DecoderConfig, preset
from .decode import cached_step_logits, full_step_logits, greedy_generate
from .model import Decoder, DecoderLayer, affine

__all__ = [
    "PRESETS",
    "ConcatCache",
    "Decoder",
    "DecoderConfig",
    "DecoderLayer",
    "PreallocatedCache",
    "affine",
    "cached_step_logits",
    "full_step_logits",
    "greedy_generate",
    "preset",
    "random_concat_cache",
]

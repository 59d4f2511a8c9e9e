"""One random-weight decoder block with a full-prefix path and an incremental KV-cached path."""

from .attention import causal_attention, causal_mask, reference_attention
from .config import ModelConfig
from .decode import cached_step_logits, decode_step, full_prefix_step_logits, prefill
from .equivalence import ATOL, RTOL, StepComparison, compare_paths
from .memory import cache_storage_bytes, kv_cache_bytes
from .model import Cache, DecoderBlock, KVStore

__all__ = [
    "ATOL",
    "RTOL",
    "StepComparison",
    "compare_paths",
    "decode_step",
    "prefill",
    "Cache",
    "DecoderBlock",
    "KVStore",
    "ModelConfig",
    "cache_storage_bytes",
    "cached_step_logits",
    "causal_attention",
    "causal_mask",
    "full_prefix_step_logits",
    "kv_cache_bytes",
        "reference_attention",
]

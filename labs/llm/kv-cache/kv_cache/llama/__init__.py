"""The project's own Llama-family decoder, run on the trained SmolLM2-135M-Instruct or a tiny random config.

A subpackage on purpose: the other labs' record fingerprints cover
``kv_cache/*.py``, and nothing they measure imports this.
"""

from .cache import LayerCache, new_cache
from .config import LlamaDecoderConfig
from .decode import cached_step_logits, decode_step, full_prefix_step_logits, prefill
from .generate import ChatModel, Generation, greedy_full_recompute, greedy_tokens, smollm2
from .model import LlamaDecoder, rms_norm, rotary_angles, rotate
from .weights import Trained, WeightsError, trained

__all__ = [
    "ChatModel",
    "Generation",
    "LayerCache",
    "LlamaDecoder",
    "LlamaDecoderConfig",
    "Trained",
    "WeightsError",
    "cached_step_logits",
    "decode_step",
    "full_prefix_step_logits",
    "greedy_full_recompute",
    "greedy_tokens",
    "new_cache",
    "prefill",
    "rms_norm",
    "rotary_angles",
    "rotate",
    "smollm2",
    "trained",
]

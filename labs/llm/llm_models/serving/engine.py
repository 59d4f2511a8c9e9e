"""What a server instance serves: the model, its block pool and the admission policy, from one config.

One engine for either model: the small random one the load experiments sweep (``llm_models.serving.model``, token ids
in and out), or a decoder with a tokenizer, the trained SmolLM2-135M (``chat``: ``llm_models.serving.llama`` over the
shared Llama decoder, text in and out). The scheduler, the pool and the admission policies are the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch

from llm_models.llama.kinds import WEIGHTS
from llm_models.toy.config import ModelConfig

from .admission import AdmissionPolicy, KVBudget, MaxRunning
from .dtypes import DTYPES
from .model import ServingModel
from .pool import LayeredPool, pool_block_bytes
from .prefill_bound import TTFT_TARGET_S, PrefillCost
from .prefix import INDEXES, CachingPool
from .runner import ServedModel
from .scheduler import ORDERS, Scheduler

if TYPE_CHECKING:  # the trained model's types; its modules import transformers, which a random-model server never needs
    from llm_models.llama.config import LlamaDecoderConfig
    from llm_models.llama.generate import ChatModel

# Four layers of width 768 (12 query heads, 2 key/value heads). On a CPU, batching pays when a step's cost is
# mostly reading the weights, which a batch shares; with a much smaller model, per-step Python and HTTP overhead
# dominate and there is little for a batch to share. What one step costs is measured, not assumed (the record's
# step_times); at this size the whole benchmark still fits in a few minutes on a 2-core machine. A 512-entry
# vocabulary keeps the output head from dominating.
SERVING_MODEL = ModelConfig(vocab_size=512, width=768, heads=12, kv_heads=2, max_positions=512)
SERVING_LAYERS = 4


def serving_model(dtype: str) -> ModelConfig:
    """The served model in ``dtype`` (float32 or bfloat16): the same seeded weights, rounded once to that dtype."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return replace(SERVING_MODEL, dtype=getattr(torch, dtype))


@dataclass(frozen=True)
class EngineConfig:
    model: ModelConfig | LlamaDecoderConfig = SERVING_MODEL
    layers: int = SERVING_LAYERS
    block_size: int = 16
    num_blocks: int = 256
    policy: AdmissionPolicy = field(default_factory=lambda: KVBudget(256 * pool_block_bytes(SERVING_MODEL,
                                                                                      SERVING_LAYERS, 16)))
    max_waiting: int = 256
    # The waiting queue's bound by time (llm_models.serving.prefill_bound): None leaves only the count bound above, as the load
    # experiments need (their bursts are the point); prefill_rate fixes the cost instead of measuring it (tests): that
    # many tokens a second, no fixed part per call.
    ttft_target_s: float | None = TTFT_TARGET_S
    prefill_rate: float | None = None
    honor_disconnect: bool = True
    model_name: str = "kv-serving-random"
    threads: int = 1  # torch intra-op threads of the decode worker
    chat: ChatModel | None = None  # a decoder with its tokenizer (EngineConfig.for_chat); None: the random model
    # Automatic prefix caching (llm_models.serving.prefix): None keeps every request's prefill whole, as the load, admission
    # and cancellation experiments were measured; "hash" (vLLM) or "radix" (SGLang) picks the index.
    prefix_index: str | None = None
    order: str = "fcfs"  # the waiting queue's order (llm_models.serving.scheduler.ORDERS)
    # The trained model's kernel timings as JSON (llm_models.serving.kernels.dump_timings): its kernels chosen by them instead
    # of timed at start (the benchmark hands every trained server the table it timed quietly; tests fix one)
    kernel_ns: str | None = None
    # The trained model's matrices: float32, or int8 codes with a scale per row read by the decode steps
    # (llm_models.serving.llama.LlamaServingModel); the random model has float32 or bfloat16 (its dtype) only
    weights: str = "float32"
    # Chunked prefill (llm_models.serving.scheduler): at most this many prompt tokens prefilled per pass, a whole
    # number of blocks, so a long prompt no longer stops every running stream for its whole prefill; None: each
    # prompt whole in the pass that admits it, as every experiment of the serving and prefix labs was measured
    prefill_chunk: int | None = None

    @classmethod
    def for_chat(cls, chat: ChatModel, block_size: int, num_blocks: int, policy: AdmissionPolicy,
                 **options: object) -> EngineConfig:
        """The engine serving ``chat``'s decoder: its config, its layers, its name."""
        config = chat.model.config
        return cls(model=config, layers=config.layers, block_size=block_size, num_blocks=num_blocks, policy=policy,
                   model_name=chat.name, chat=chat, **options)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        if self.weights not in WEIGHTS or (self.weights != "float32" and self.chat is None):
            raise ValueError(f"weights must be float32, or int8 for the trained model, got {self.weights!r}"
                             + ("" if self.chat is not None else " for the random model"))
        if self.prefix_index is not None and self.prefix_index not in INDEXES:
            raise ValueError(f"prefix_index must be one of {', '.join(INDEXES)} or None, got {self.prefix_index!r}")
        if self.order not in ORDERS or (self.order != "fcfs" and self.prefix_index is None):
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, and {self.order!r} needs a prefix cache "
                             f"(prefix_index={self.prefix_index!r})")
        if self.chat is not None and (self.model is not self.chat.model.config or self.layers != self.model.layers):
            raise ValueError("a chat model's engine takes its config and layers from the decoder "
                             "(EngineConfig.for_chat)")
        if isinstance(self.policy, KVBudget):
            size = self.policy.priced_block_bytes(self.block_bytes, self.layers, self.block_size, self.model.kv_heads,
                                                  self.model.head_dim)
            blocks = self.policy.kv_budget_bytes // size
            if not 1 <= blocks <= self.num_blocks:
                raise ValueError(f"kv_budget_bytes={self.policy.kv_budget_bytes} is {blocks} blocks of {size} "
                                 f"bytes; it must be 1 to the pool's {self.num_blocks} blocks")

    @property
    def block_bytes(self) -> int:
        return pool_block_bytes(self.model, self.layers, self.block_size)

    def build(self) -> Scheduler:
        """A fresh model, pool and scheduler (not started)."""
        torch.set_num_threads(self.threads)
        prefix = (None if self.prefix_index is None
                  else CachingPool(self.model, self.layers, self.num_blocks, self.block_size, self.prefix_index))
        # with prefix caching on, the cache is the pool: its freed blocks stay cached until the pool needs them
        pool = LayeredPool(self.model, self.layers, self.num_blocks, self.block_size) if prefix is None else prefix
        if self.chat is None:
            assert isinstance(self.model, ModelConfig)
            model: ServedModel = ServingModel(self.model, self.layers)
        else:
            from .llama import served

            model = served(self.chat.model, self.kernel_ns, self.weights)
        cost = None if self.prefill_rate is None else PrefillCost.given(self.prefill_rate)
        return Scheduler(model, pool, self.policy, max_waiting=self.max_waiting, honor_disconnect=self.honor_disconnect,
                         ttft_target_s=self.ttft_target_s, prefill_cost=cost, order=self.order, prefix=prefix,
                         prefill_chunk=self.prefill_chunk)

    def as_record(self) -> dict[str, object]:
        return {"model": self.model.as_record(), "layers": self.layers, "block_size": self.block_size,
                "num_blocks": self.num_blocks, "block_bytes": self.block_bytes,
                "admission": self.policy.describe(), "max_waiting": self.max_waiting,
                "honor_disconnect": self.honor_disconnect, "threads": self.threads,
                **({} if self.prefix_index is None else {"prefix_index": self.prefix_index, "order": self.order}),
                **({} if self.prefill_chunk is None else {"prefill_chunk": self.prefill_chunk})}


def policy_from(max_running: int | None, kv_budget_bytes: int | None) -> AdmissionPolicy:
    if (max_running is None) == (kv_budget_bytes is None):
        raise ValueError(f"choose exactly one admission policy: max_running={max_running}, "
                         f"kv_budget_bytes={kv_budget_bytes}")
    return MaxRunning(max_running) if max_running is not None else KVBudget(kv_budget_bytes)


__all__ = ["EngineConfig", "SERVING_LAYERS", "SERVING_MODEL", "policy_from", "serving_model"]

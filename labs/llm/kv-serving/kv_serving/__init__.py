"""A streaming completion server over the storage lab's block pool: continuous batching, admission by
KV bytes or by request count, and cancellation that frees a request's blocks."""

from .model import ServingModel
from .pool import LayeredPool, block_bytes, blocks_for

__all__ = ["LayeredPool", "ServingModel", "block_bytes", "blocks_for"]

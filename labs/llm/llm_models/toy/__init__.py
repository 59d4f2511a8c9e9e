"""The toy decoder: one pre-norm decoder block with random weights, with a full-prefix path and an incremental
KV-cached path, small enough that every test runs in milliseconds.

- ``config``: ``ModelConfig``, the block's shape, dtype and seed.
- ``model``: ``DecoderBlock``, whose ``forward`` serves both paths; ``Cache`` and the ``KVStore`` protocol a
  store that writes in place implements.
- ``decode``: ``prefill`` and ``decode_step``, the two calls a decoding loop makes.
- ``equivalence``: ``ATOL`` and ``RTOL``, within which its cached and full-prefix logits must agree.

The KV-cache lab explains it; the storage, window, quantization, serving and decode labs build on it.
"""

# Torch-free on purpose, like llm_models itself: import what you use from its module (llm_models.toy.model, ...).

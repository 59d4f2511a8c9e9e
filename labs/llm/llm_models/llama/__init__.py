"""The project's own Llama-family decoder, run on the trained SmolLM2-135M-Instruct or on a tiny random config.

- ``config``: ``LlamaDecoderConfig``, the decoder's shape (SmolLM2-135M's by default), read from transformers'.
- ``model``: ``LlamaDecoder`` (RMSNorm, rotary positions, grouped-query attention, SwiGLU, tied embeddings).
- ``cache``: ``LayerCache``, one layer's preallocated keys and values, written in place.
- ``decode``: prefill, one decode step, and the cached and full-prefix teacher-forced loops.
- ``generate``: greedy generation with and without the cache, ``ChatModel`` and ``smollm2()``.
- ``weights``: the packaged GGUF file, dequantized once per machine into a cache folder (``trained()``).
- ``tiny``: a tiny seeded random Llama and its transformers twin, for quick runs.
- ``native_step``: ``NativeStep``, one decode step in a single C call (``step.c``), float32 or int8 weights, over the
  decoder's own cache at batch 1 or over the server's block pool for a batch.
- ``traffic``: torch-free, the bytes and flops one decode step must move and compute, from a config's numbers.

The KV-cache lab's trained-model section, the decode lab's trained-model step, the quantization lab's quality
measurement and the serving lab's chat server run it.
"""

# Torch-free on purpose: importing one module of the decoder must not import the others (a lab's fingerprint
# names only the modules its benchmark imports). Import what you use from its module.

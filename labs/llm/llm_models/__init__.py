"""The models several labs run, below the labs: nothing here imports a lab.

- ``attention``: causal attention over a cached prefix and a chunk of new positions (fused, one-query and
  written-out forms), the mask aligned to absolute positions.
- ``inputs``: what every decoder does with its input before any layer: check the token ids and number the new
  positions after the cached prefix (the offset rule).
- ``toy``: the toy decoder block with random weights (``DecoderBlock``, its ``ModelConfig``, ``prefill`` and
  ``decode_step``, the ``ATOL`` and ``RTOL`` its two paths agree within), which the KV-cache lab explains and the
  storage, window, quantization, serving and decode labs build on.
- ``llama``: the Llama-family decoder that runs the trained SmolLM2-135M-Instruct, its config, weights loading
  and their cache, its per-layer KV cache, greedy generation, the chat front end, a tiny random Llama for
  quick runs (``llama.tiny``), and the bytes and flops of its decode step (``llama.traffic``).
- ``paged``: one token's attention over a paged cache's blocks, and the block pool itself (``paged.pool``:
  ``BlockPool``, ``PoolExhausted``), which the storage lab pages requests into and the serving lab shares.
- ``kernels``: the kernels that multiply rows by a weight matrix (BLAS, oneDNN, inductor's row dot, int8
  weight-only products and their C loop), which the decode lab times and the serving lab picks among.
- ``serving``: the serving core (block pools per request, the served toy and trained decoders and their kernel
  table, requests, admission, prefix caching, the scheduler and its engine configuration), which the serving lab's
  HTTP server runs and the prefix lab measures.
- ``native``: the builder of the C loops (built at run time, called through ctypes).
- ``kv_bytes``: the KV cache's byte formula every lab prices a cache with, and what fits beside the weights.
- ``cache_formats``: the quantized cache formats (``CacheFormat``) and the bytes each stores, which the
  quantized-cache lab stores keys and values in and the serving lab's admission prices blocks in.
- ``published``: published configurations of real decoders (``published/models.toml``), for the KV-cache
  page's table and the accelerator arithmetic.
- ``accelerator``: that arithmetic: a published model's decode step priced on a datasheet's machine, and its
  memory filled with long sequences (the decode and serving pages, no GPU run).
- ``quality``: per-position next-token scores against a reference pass (NLL, KL, top-1), by which the
  quantization lab judges its cache formats and the decode lab its int8 weights.
- ``generations``: where two generations of one prompt first part.
- ``texts`` and ``hardware``: long real texts for quality figures, and datasheet figures.

What more than one lab uses lives here, never in one lab's figures module: the torch-free modules above are
imported by the labs' mechanisms and by their figures alike.

Every lab's decoder takes its attention from here, and the toy block its token-id check and offset rule, which
the Llama shares; the KV-cache, decode, quantization and serving labs run the Llama. Each
lab's fingerprint holds the files of this package its benchmark imports (labkit.closure), so editing one marks
exactly those labs' records stale.
"""

# Torch-free on purpose, like the labs' own package roots: import what you use from its module
# (llm_models.attention, llm_models.llama.model, ...).

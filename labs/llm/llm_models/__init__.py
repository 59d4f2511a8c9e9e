"""The models several labs run, below the labs: nothing here imports a lab.

- ``attention``: causal attention over a cached prefix and a chunk of new positions (fused, one-query and
  written-out forms), the mask aligned to absolute positions.
- ``inputs``: what every decoder does with its input before any layer: check the token ids and number the new
  positions after the cached prefix (the offset rule).
- ``llama``: the Llama-family decoder that runs the trained SmolLM2-135M-Instruct, its config, weights loading
  and their cache, its per-layer KV cache, greedy generation, the chat front end, and a tiny random Llama for
  quick runs (``llama.tiny``).
- ``kv_bytes``: the KV cache's byte formula every lab prices a cache with, and what fits beside the weights.
- ``cache_formats``: the quantized cache formats (``CacheFormat``) and the bytes each stores, which the
  quantized-cache lab stores keys and values in and the serving lab's admission prices blocks in.
- ``published``: published configurations of real decoders (``published/models.toml``), for the KV-cache
  page's table and the accelerator arithmetic.
- ``generations``: where two generations of one prompt first part.
- ``texts`` and ``hardware``: long real texts for quality figures, and datasheet figures.

What more than one lab uses lives here, never in one lab's figures module: the torch-free modules above are
imported by the labs' mechanisms and by their figures alike.

Every lab's decoder takes its attention from here, and the KV-cache lab's toy block its token-id check and
offset rule, which the Llama shares; the KV-cache, decode, quantization and serving labs run the Llama. Each
lab's fingerprint holds the files of this package its benchmark imports (labkit.closure), so editing one marks
exactly those labs' records stale.
"""

# Torch-free on purpose, like the labs' own package roots: import what you use from its module
# (llm_models.attention, llm_models.llama.model, ...).

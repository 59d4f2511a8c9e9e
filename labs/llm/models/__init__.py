"""The models several labs run, below the labs: nothing here imports a lab.

- ``attention``: causal attention over a cached prefix and a chunk of new positions (fused, one-query and
  written-out forms), the mask aligned to absolute positions.
- ``inputs``: what every decoder does with its input before any layer: check the token ids and number the new
  positions after the cached prefix (the offset rule).
- ``llama``: the Llama-family decoder that runs the trained SmolLM2-135M-Instruct, its config, weights loading
  and their cache, its per-layer KV cache, greedy generation, the chat front end, and a tiny random Llama for
  quick runs (``llama.tiny``).

Every lab's decoder takes its attention from here, and the KV-cache lab's toy block its token-id check and
offset rule, which the Llama shares; the KV-cache, decode, quantization and serving labs run the Llama. Each
lab's ``lab.toml`` names the files of this package its benchmark runs, so editing one marks exactly those labs'
records stale.
"""

# Torch-free on purpose, like the labs' own package roots: import what you use from its module
# (llm_models.attention, llm_models.llama.model, ...).

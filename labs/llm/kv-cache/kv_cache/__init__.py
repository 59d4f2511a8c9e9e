"""The KV-cache lab: the toy decoder block (llm_models.toy) through its full-prefix and its cached path, compared
step by step and timed, the same cache on the trained Llama, and the page's formats and figures."""

# Torch-free on purpose: the site build imports this lab's figures module, which must not pull in torch;
# import what you use from its module (kv_cache.decode, kv_cache.memory, ...).

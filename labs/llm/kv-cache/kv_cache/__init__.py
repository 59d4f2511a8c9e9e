"""One random-weight decoder block with a full-prefix path and an incremental KV-cached path."""

# Torch-free on purpose: the site build imports this lab's figures module, which must not pull in torch;
# import what you use from its module (kv_cache.model, kv_cache.memory, ...).

"""A streaming completion server over the paged block pool below the labs (llm_models.paged.pool, which the
storage lab pages into too): continuous batching, admission by KV bytes or by request count, and cancellation
that frees a request's blocks."""

# Torch-free on purpose: the site build imports this lab's figures module, which must not pull in torch;
# import what you use from its module (llm_models.serving.engine, kv_serving.server, ...).

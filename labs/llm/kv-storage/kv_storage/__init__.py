"""Key/value storage beyond concatenation: preallocated buffers and a paged block pool.

The decoder block is the toy block below the labs (llm_models.toy), the one the
KV-cache lab explains, reused as is (not a copy): both stores implement its
``KVStore`` protocol, so ``DecoderBlock.forward`` writes into them in place. The
paged store takes its block pool from there too (llm_models.paged.pool).
"""

# Torch-free on purpose: the site build imports this lab's figures module, which must not pull in torch;
# import what you use from its module (kv_storage.preallocated, kv_storage.paged, ...).

"""The largest prefill the server multiplies by its kernel table's pick (torch-free: the serving page's kernel
view names it). llm_models.serving.kernels.Weight.prefill does the rest by a BLAS kernel."""

from __future__ import annotations

# NOTE: oneDNN's per-shape primitive cache. oneDNN's packed linear (torch.ops.mkldnn._linear_pointwise, the
# ``onednn`` kernel) builds a primitive for every shape it multiplies, so for every number of rows, and keeps it:
# ideep in a per-thread cache (LRU_CACHE_CAPACITY, 1024 entries by default), oneDNN in its own primitive cache
# (ONEDNN_PRIMITIVE_CACHE_CAPACITY, 1024), never returned to the system. A decode batch has at most as many rows as
# requests running at once, but a packed prefill's rows are the sum of its prompts' lengths, nearly always a count
# never seen: 1,000 new counts over the trained model's four layer shapes kept 2.3 GB on the 2-core AMD EPYC. torch
# has no setter for either capacity (both are read at oneDNN's first use), and smaller caches would rebuild the
# decode batches' primitives as well. So a prefill of more rows than this multiplies by a BLAS kernel (``out_in`` or
# ``in_out``: MKL keeps nothing per shape), one of at most this many by the table's kernel: at most this many row
# counts, the ones decode batches of up to 32 requests build anyway (about 70 MB over the four layer shapes).
# Measured there, one thread, a trained-model prefill of one prompt took the same time as before up to 48 rows, 6%
# less at 128 and 256 rows, 9 to 13% less at 512 and 1,024; a bound of 8 cost 8 to 17% at 12 to 24 rows.
PREFILL_PACKED_ROWS = 32

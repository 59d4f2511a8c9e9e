"""The serving core below the labs: what turns one decoder into a server many clients share.

Ordered bottom-up:

- ``sizes`` and ``pool``: block counts and bytes, and ``LayeredPool``, one block table per request over every
  layer's paged cache (over ``llm_models.paged.pool``'s ``BlockPool``);
- ``model`` and ``llama``: the toy and the trained decoder run over that pool (packed prefills, one batched decode
  step); ``kernels`` and ``kernel_rows``: the kernel table a served step picks its matrix products from;
- ``dtypes``: the dtypes the server runs in and the tolerances each is checked within;
- ``request`` and ``text``: a request's state and the events its client is sent, and the text stream that turns
  ids into text;
- ``admission`` and ``prefill_bound``: which requests may start (by KV bytes or by count) and how long a new one
  would wait for its first token;
- ``prefix``: automatic prefix caching (block hashes, the hash and radix indexes, the caching pool);
- ``scheduler`` and ``engine``: the continuous-batching loop and the configuration that builds it.

The HTTP server over this core, and the figures and views that explain it, live in the serving lab (kv_serving);
the prefix lab measures the same core with its caching on.
"""

# Torch-free on purpose, like llm_models itself: import what you use from its module.

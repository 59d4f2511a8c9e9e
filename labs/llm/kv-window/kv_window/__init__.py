"""When tokens leave the cache: a KV cache whose slots carry their own position, sequence id and valid flag,
the masks built from that metadata, and the policies that decide what stays (a ring buffer, sinks + window,
score-based eviction, packed sequences), each proven against recomputation."""

# Torch-free on purpose: the site build imports this lab's figures module, which must not pull in torch;
# import what you use from its module (kv_window.stores, kv_window.decoder, kv_window.figures, ...).

"""Quantized KV caches behind one interface: the bytes they store, the formulas that count them, the error they add."""

# Torch-free on purpose: the site build imports this lab's figures module, which must not pull in torch;
# import what you use from its module (kv_quant.cache, kv_quant.attention, kv_quant.figures, ...).

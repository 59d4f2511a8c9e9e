"""A GPT-2-size decoder with random weights: its decode step against the memory floor and transformers."""

# Torch-free on purpose: the site build imports this lab's figures module, which must not pull in torch;
# import what you use from its module (decode_bandwidth.model, decode_bandwidth.figures.formulas, ...).

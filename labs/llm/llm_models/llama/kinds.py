"""The matrices a Llama layer multiplies by, as it holds them (``llm_models.llama.model.fuse``: q, k and v stacked
into one, gate and up into another), and the output head: the kinds every kernel table times and chooses a kernel
for (the decode lab's fast twin, the server's ``llm_models.serving.kernels``). Torch-free, so figures and views
name them without importing the model."""

LAYER_KINDS = ("qkv", "o", "gate_up", "down")  # one layer's four products, in the order a step makes them
MATRIX_KINDS = (*LAYER_KINDS, "head")  # and the output head, the tied embedding

# How a server's decode step runs (llm_models.serving.llama): the decode lab's one-call C step, or the decoder's
# layer in torch, one operation at a time (no C compiler, a bfloat16 pool, a shape the C loop does not take)
ONE_CALL, IN_TORCH = "one call", "torch"
STEP_WAYS = (ONE_CALL, IN_TORCH)

WEIGHTS = ("float32", "int8")  # what the one-call step's matrices may be (llm_models.llama.native_step)

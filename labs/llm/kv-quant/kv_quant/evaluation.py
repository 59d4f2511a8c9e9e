"""What the trained model's quality is measured over: the long text, the cache formats evaluated on it, and the
format the others are compared with.

Torch-free, and the one home of each: the benchmark measures with them (kv_quant.trained runs the passes), and
the record's figures, views and tests import them from here.
"""

from __future__ import annotations

from llm_models.texts import PYTHON_REFERENCE

TEXT = PYTHON_REFERENCE  # the evaluation text: written by others, kept with its digest (llm_models.texts)
# The formats measured on the trained model over the long text, the reference first: the benchmark's budget (five
# minutes on two cores) holds about ten passes of SMOLLM2 over TEXT at 2,048 positions, so the family members the
# rest of the page covers (bfloat16, int8, kivi-4b, fp8 per head) are measured on random data only.
TRAINED_LABELS = ("float32", "int4-g32", "kivi-2b-g32-r128", "q8_0", "q4_0", "q4_0-keys", "q4_0-values",
                  "fp8-tensor-none", "fp8-tensor-amax")  # in the order of the benchmark's formats
SPLIT = ("q4_0",)  # the families measured on the trained model with keys only and values only too
REFERENCE = "float32"

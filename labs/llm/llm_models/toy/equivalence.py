"""The tolerance within which the toy block's cached and full-prefix float32 logits must agree: used by the labs'
tests and benchmarks that compare the two paths, or a store against concatenation."""

ATOL = 1e-5
RTOL = 1e-5

"""Kernels that multiply rows by a weight matrix, below the labs: the decode lab times them at batch 1, the serving
lab picks among the float32 ones per matrix kind and number of rows.

- ``matvec``: the kernel table (``KERNELS``: BLAS in both layouts, oneDNN's packed copy, inductor's row dot, and
  three int8 weight-only products) and which of them run here.
- ``timing``: how a kernel is timed, the one way for every table (``measure``: kind -> rows -> kernel -> ns).
- ``choice``: the one rule a kernel is chosen by (the least time, the first listed on a tie), torch-free.
- ``row_dot``: one row times an (out, in) matrix as the reduction inductor compiles into one loop per row, and
  ``compile_static``.
- ``quantize``: int8 weight-only codes with one float32 scale per row, and the float matrix they stand for.
- ``int8_loop``: the int8 weight-only product written in C (``int8_rows.c``), built at run time (llm_models.native).
"""

# Torch-free on purpose, like llm_models itself: import what you use from its module (llm_models.kernels.matvec, ...).

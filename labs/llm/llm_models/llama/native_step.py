"""One decode step of the Llama decoder at batch 1 in a single C call (``step.c``), over float32 or int8 weights.

``NativeStep`` holds the decoder's own stacked matrices (float32, no copy) or their int8 codes and row scales
(``llm_models.kernels.quantize``, the codes every int8 path reads), and steps one token over the decoder's per-layer
``LayerCache`` stores, so the decoder can prefill a cache this step then decodes. Python computes the token's
embedding row and its rotary angles (``rotary_angles``, the decoder's own), the C loop everything else.

Why: the eager step spends a third of its time outside its weight products, in a few hundred small operations each
dispatched through Python and PyTorch (the decode lab's profile); written out in one loop nest they cost next to
nothing, so what is left is the bytes of the weights and the cache. The build is llm_models.native's (once per
process, ``-march=native``); the thread count is torch's at the time of the step.
"""

from __future__ import annotations

import ctypes
import functools
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from llm_models import native
from llm_models.kernels.quantize import quantize_rows
from llm_models.native import Build

from .cache import LayerCache
from .kinds import LAYER_KINDS
from .model import LlamaDecoder, rotary_angles

SOURCES = (Path(__file__).with_name("step.c"), Path(__file__).with_name("attend_rows.c"))  # the step, its attention
WEIGHTS = ("float32", "int8")  # what the step's matrices may be


class StepShape(ctypes.Structure):
    """The C loop's ``StepShape``: the config's numbers and the weight format."""

    _fields_ = [("layers", ctypes.c_long), ("width", ctypes.c_long), ("heads", ctypes.c_long),
                ("kv_heads", ctypes.c_long), ("head_dim", ctypes.c_long), ("hidden", ctypes.c_long),
                ("vocab", ctypes.c_long), ("eps", ctypes.c_float), ("int8", ctypes.c_int)]


@functools.cache
def build(plain: bool = False) -> Build:
    """The loop, built once per process (llm_models.native), its argument types declared; ``plain`` builds it
    without the vector paths (llm_models.native.PLAIN), which a test holds to the same logits."""
    built = native.build(SOURCES, native.PLAIN if plain else ())
    if built.library is not None:
        built.library.llama_step.restype = None
        built.library.llama_step.argtypes = ([ctypes.POINTER(StepShape)] + [ctypes.c_void_p] * 5
                                             + [ctypes.c_long] * 2 + [ctypes.c_void_p] * 6 + [ctypes.c_int])
    return built


def unavailable() -> str | None:
    """None, or why the C step cannot run here."""
    return build().reason


BLOCK_ROWS, BLOCK_COLUMNS = 4, 8  # step.c's block: four rows, read 8 columns at a time


def pack(matrix: Tensor) -> Tensor:
    """An (out, in) matrix in step.c's layout: rows padded with zeros to whole blocks of BLOCK_ROWS, and within
    a block, for each run of BLOCK_COLUMNS columns, the block's rows one after another (a copy, any dtype)."""
    rows, cols = matrix.shape
    padded = -rows % BLOCK_ROWS
    if padded:
        matrix = torch.cat([matrix, matrix.new_zeros(padded, cols)])
    blocks = matrix.view(-1, BLOCK_ROWS, cols // BLOCK_COLUMNS, BLOCK_COLUMNS)  # (blocks, 4, runs, 8)
    return blocks.permute(0, 2, 1, 3).contiguous()  # (blocks, runs, 4, 8)


def unpack(packed: Tensor, rows: int) -> Tensor:
    """The (rows, in) matrix ``pack`` was given, back (for tests)."""
    blocks, runs = packed.shape[:2]
    return packed.permute(0, 2, 1, 3).reshape(blocks * BLOCK_ROWS, runs * BLOCK_COLUMNS)[:rows]


def pointers(tensors: list[Tensor]) -> ctypes.Array:
    """A C array of the tensors' data pointers (each must stay alive while it is used)."""
    return (ctypes.c_void_p * len(tensors))(*(tensor.data_ptr() for tensor in tensors))


class NativeStep:
    """One-token steps of ``model`` (float32, batch 1) with its matrices as ``weights`` (float32 or int8)."""

    def __init__(self, model: LlamaDecoder, weights: str = "float32", plain: bool = False) -> None:
        config = model.config
        if weights not in WEIGHTS:
            raise ValueError(f"NativeStep reads weights as one of {list(WEIGHTS)}, got {weights!r}")
        if config.dtype != torch.float32 or model.device.type != "cpu":
            raise ValueError(f"NativeStep steps a float32 model on the CPU, the model is {config.dtype} on "
                             f"{model.device}")
        widths = {"width": config.width, "hidden": config.hidden, "heads x head_dim": config.heads * config.head_dim}
        uneven = {name: value for name, value in widths.items() if value % BLOCK_COLUMNS}
        if config.heads % config.kv_heads or config.head_dim % 2 or uneven:
            raise ValueError(f"NativeStep needs heads ({config.heads}) a multiple of kv_heads ({config.kv_heads}), "
                             f"an even head_dim ({config.head_dim}) and every product's input a multiple of "
                             f"{BLOCK_COLUMNS} wide, got {uneven or 'those'}")
        self.model, self.weights, self.config, self.plain = model, weights, config, plain
        matrices = [getattr(layer, kind) for layer in model.layers for kind in LAYER_KINDS]
        matrices.append(model.head)
        scales: list[Tensor] = []
        if weights == "int8":
            quantized = [quantize_rows(matrix) for matrix in matrices]
            matrices = [codes for codes, _ in quantized]
            scales = [F.pad(scale, (0, -len(scale) % BLOCK_ROWS), value=1.0) for _, scale in quantized]
            # the embedding the int8 model stands for: the head's codes when tied, else its own
            self.embedding = (quantized[-1] if config.tie_embeddings else quantize_rows(model.embedding))
        matrices = [pack(matrix) for matrix in matrices]  # a copy in step.c's layout
        norms = [norm.contiguous() for layer in model.layers for norm in (layer.attention_norm, layer.mlp_norm)]
        norms.append(model.norm_final.contiguous())
        self._held = (matrices, scales, norms)  # the C arrays below point into these
        self._matrices, self._norms = pointers(matrices), pointers(norms)
        self._scales = pointers(scales) if scales else None
        self.shape = StepShape(config.layers, config.width, config.heads, config.kv_heads, config.head_dim,
                               config.hidden, config.vocab_size, config.rms_norm_eps, int(weights == "int8"))
        q_width = config.heads * config.head_dim
        self._scratch = torch.empty(2 * config.width + 2 * q_width + 2 * config.kv_width + 2 * config.hidden)

    def embed(self, token: Tensor) -> Tensor:
        """The token's embedding row (C,) float32: dequantized from its codes in int8."""
        if self.weights == "int8":
            codes, scale = self.embedding
            return codes[token].float() * scale[token]
        return self.model.embedding[token].clone()

    def buffers(self, cache: list[LayerCache]) -> tuple[ctypes.Array, ctypes.Array, Tensor]:
        """The cache's key and value pointer arrays and a scores scratch for its capacity. Made again every step
        (some microseconds against milliseconds): kept across steps, keyed by address, they would outlive a cache
        whose memory is then reused by another of a larger capacity, and the loop would write past the scratch."""
        return (pointers([store.keys for store in cache]), pointers([store.values for store in cache]),
                torch.empty(self.config.heads * cache[0].capacity))

    def check(self, token: Tensor, cache: list[LayerCache]) -> int:
        """The cache's length after checking that one token fits (ValueError naming what does not)."""
        config = self.config
        if token.shape != (1, 1) or token.dtype != torch.long:
            raise ValueError(f"NativeStep steps one token id (1, 1) long, got {tuple(token.shape)} {token.dtype}")
        if not 0 <= int(token) < config.vocab_size:
            raise ValueError(f"NativeStep: token id {int(token)} is outside the vocabulary of {config.vocab_size}")
        if len(cache) != config.layers:
            raise ValueError(f"NativeStep needs a cache of {config.layers} layers, got {len(cache)}")
        lengths = {store.length for store in cache}
        length = lengths.pop()
        expected = (1, config.kv_heads, cache[0].capacity, config.head_dim)
        for index, store in enumerate(cache):
            for name, buffer in (("keys", store.keys), ("values", store.values)):
                if (tuple(buffer.shape) != expected or buffer.dtype != torch.float32 or not buffer.is_contiguous()
                        or buffer.device.type != "cpu"):
                    raise ValueError(f"NativeStep: layer {index}'s {name} are {tuple(buffer.shape)} {buffer.dtype} on "
                                     f"{buffer.device}, not contiguous float32 {expected} on the CPU")
        if lengths or length >= cache[0].capacity:
            raise ValueError(f"NativeStep steps one token into a cache with room and one length, got lengths "
                             f"{sorted({store.length for store in cache})} of {cache[0].capacity} positions")
        return length

    def step(self, token: Tensor, cache: list[LayerCache]) -> Tensor:
        """Logits (1, 1, V) of one token (1, 1) after the ``cache``'s positions; writes its keys and values."""
        length = self.check(token, cache)
        library = build(self.plain).require("the C decode step")
        cos, sin = rotary_angles(torch.tensor([length]), self.model.inverse_frequencies, torch.float32)  # (1, D)
        x = self.embed(token[0, 0]).contiguous()
        keys, values, scores = self.buffers(cache)
        logits = torch.empty(1, 1, self.config.vocab_size)
        library.llama_step(ctypes.byref(self.shape), self._matrices, self._scales, self._norms, keys, values,
                           cache[0].capacity, length, cos.data_ptr(), sin.data_ptr(), x.data_ptr(),
                           self._scratch.data_ptr(), scores.data_ptr(), logits.data_ptr(), torch.get_num_threads())
        for store in cache:
            store.length = length + 1
        return logits

    def warm(self, capacity: int = 2) -> float:
        """Build the loop (once per process) and run one step; the seconds it took."""
        started = time.perf_counter()
        cache = self.model.new_cache(1, capacity)
        with torch.inference_mode():
            self.step(torch.zeros(1, 1, dtype=torch.long), cache)
        return time.perf_counter() - started

"""One decode step of the Llama decoder in a single C call (``step.c``), over float32 or int8 weights.

``NativeStep`` holds the decoder's stacked matrices packed for the loop (float32) or their int8 codes and row scales
(``llm_models.kernels.quantize``, the codes every int8 path reads), and steps tokens over either cache the project
keeps: ``step``, one token over the decoder's per-layer ``LayerCache`` stores (the decode lab's step, after the
decoder's own prefill), and ``step_paged``, a batch of requests each at its own position over the server's block
pool, read through each request's block table (the server's step). Both are the same C function; Python computes
the tokens' embedding rows and rotary angles (``rotary_angles``, the decoder's own), the C loop everything else.
Each row of a batch is computed exactly as it would be alone (the weights are read once for all rows, but each
row's sums run in the same order), so a batched request's logits equal its solo run's to the bit.

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

from llm_models import native, paged
from llm_models.gathered import gathered_empty
from llm_models.kernels.quantize import quantize_rows
from llm_models.native import Build

from .cache import LayerCache
from .kinds import LAYER_KINDS, WEIGHTS
from .model import LlamaDecoder, rotary_angles

ATTENTION = Path(__file__).with_name("attend_rows.c")  # the step's attention loop, also built alone (attention "c")
SOURCES = (Path(__file__).with_name("step.c"), ATTENTION)


class CacheView(ctypes.Structure):
    """step.c's ``CacheView``: each layer's first key and value element, the block tables (or none), and the
    strides, in elements, from a block and from a head to the next."""

    _fields_ = [("keys", ctypes.c_void_p), ("values", ctypes.c_void_p), ("tables", ctypes.c_void_p),
                ("width", ctypes.c_long), ("block_size", ctypes.c_long), ("block_stride", ctypes.c_long),
                ("head_stride", ctypes.c_long)]


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
        built.library.llama_step.argtypes = ([ctypes.POINTER(StepShape)] + [ctypes.c_void_p] * 3
                                             + [ctypes.POINTER(CacheView), ctypes.c_long] + [ctypes.c_void_p] * 7
                                             + [ctypes.c_int])
    return built


def unavailable() -> str | None:
    """None, or why the C step cannot run here."""
    return build().reason


@functools.cache
def build_attention() -> Build:
    """The step's attention loop alone (``ATTENTION``: one token over a contiguous cache), built once per process,
    its argument types declared: the decode lab's attention "c" calls it, and ``make venv`` builds it ahead."""
    built = native.build((ATTENTION,))
    if built.library is not None:
        built.library.attend_rows.restype = None
        built.library.attend_rows.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_long] * 5 + [ctypes.c_int]
    return built


BLOCK_ROWS, BLOCK_COLUMNS = 4, 8  # step.c's block: four rows, read 8 columns at a time


def packed_shape(rows: int, cols: int) -> tuple[int, int, int, int]:
    """The shape ``pack`` gives an (rows, cols) matrix: (blocks, runs, BLOCK_ROWS, BLOCK_COLUMNS)."""
    return -(-rows // BLOCK_ROWS), cols // BLOCK_COLUMNS, BLOCK_ROWS, BLOCK_COLUMNS


def pack(matrix: Tensor, out: Tensor | None = None) -> Tensor:
    """An (out, in) matrix in step.c's layout: rows padded with zeros to whole blocks of BLOCK_ROWS, and within
    a block, for each run of BLOCK_COLUMNS columns, the block's rows one after another (a copy, any dtype),
    written into ``out`` (of ``packed_shape``) where given."""
    rows, cols = matrix.shape
    padded = -rows % BLOCK_ROWS
    if padded:
        matrix = torch.cat([matrix, matrix.new_zeros(padded, cols)])
    blocks = matrix.view(-1, BLOCK_ROWS, cols // BLOCK_COLUMNS, BLOCK_COLUMNS)  # (blocks, 4, runs, 8)
    if out is None:
        return blocks.permute(0, 2, 1, 3).contiguous()  # (blocks, runs, 4, 8)
    return out.copy_(blocks.permute(0, 2, 1, 3))


def unpack(packed: Tensor, rows: int) -> Tensor:
    """The (rows, in) matrix ``pack`` was given, back (for tests)."""
    blocks, runs = packed.shape[:2]
    return packed.permute(0, 2, 1, 3).reshape(blocks * BLOCK_ROWS, runs * BLOCK_COLUMNS)[:rows]


def pointers(tensors: list[Tensor]) -> ctypes.Array:
    """A C array of the tensors' data pointers (each must stay alive while it is used)."""
    return (ctypes.c_void_p * len(tensors))(*(tensor.data_ptr() for tensor in tensors))


def refusal(model: LlamaDecoder, weights: str) -> str | None:
    """Why ``NativeStep(model, weights)`` cannot be made, or None: checked without packing anything."""
    config = model.config
    if weights not in WEIGHTS:
        return f"NativeStep reads weights as one of {list(WEIGHTS)}, got {weights!r}"
    if config.dtype != torch.float32 or model.device.type != "cpu":
        return f"NativeStep steps a float32 model on the CPU, the model is {config.dtype} on {model.device}"
    widths = {"width": config.width, "hidden": config.hidden, "heads x head_dim": config.heads * config.head_dim}
    uneven = {name: value for name, value in widths.items() if value % BLOCK_COLUMNS}
    if config.heads % config.kv_heads or config.head_dim % 2 or uneven:
        return (f"NativeStep needs heads ({config.heads}) a multiple of kv_heads ({config.kv_heads}), an even "
                f"head_dim ({config.head_dim}) and every product's input a multiple of {BLOCK_COLUMNS} wide, got "
                f"{uneven or 'those'}")
    return None


class NativeStep:
    """Decode steps of ``model`` (float32) with its matrices as ``weights`` (float32 or int8): one token over the
    decoder's contiguous cache (``step``) or a batch over a block pool (``step_paged``)."""

    def __init__(self, model: LlamaDecoder, weights: str = "float32", plain: bool = False) -> None:
        config = model.config
        reason = refusal(model, weights)
        if reason is not None:
            raise ValueError(reason)
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
        norms = [norm for layer in model.layers for norm in (layer.attention_norm, layer.mlp_norm)]
        norms.append(model.norm_final)
        # every matrix (in step.c's layout), scale and norm the loop reads, in one buffer; each matrix packed
        # straight into its place there, so the packed weights exist once, never twice (540 MB in float32)
        every = gathered_empty([(packed_shape(*matrix.shape), matrix.dtype) for matrix in matrices]
                               + [(tuple(tensor.shape), tensor.dtype) for tensor in scales + norms])
        for place, matrix in zip(every, matrices):
            pack(matrix, out=place)
        for place, tensor in zip(every[len(matrices):], scales + norms):
            place.copy_(tensor)
        matrices, scales, norms = (every[:len(matrices)], every[len(matrices):len(matrices) + len(scales)],
                                   every[len(matrices) + len(scales):])
        self._held = (matrices, scales, norms)  # the C arrays below point into these
        self._matrices, self._norms = pointers(matrices), pointers(norms)
        self._scales = pointers(scales) if scales else None
        self.shape = StepShape(config.layers, config.width, config.heads, config.kv_heads, config.head_dim,
                               config.hidden, config.vocab_size, config.rms_norm_eps, int(weights == "int8"))
        # step.c's scratch per row: normed and added (C each), q/k/v, the attended heads, gate and up
        self._row_scratch = (2 * config.width + (config.heads + 2 * config.kv_heads) * config.head_dim
                             + config.heads * config.head_dim + 2 * config.hidden)

    def embed(self, tokens: Tensor) -> Tensor:
        """The tokens' (B,) embedding rows (B, C) float32: dequantized from their codes in int8."""
        if self.weights == "int8":
            codes, scale = self.embedding
            return codes[tokens].float() * scale[tokens, None]
        return self.model.embedding[tokens].contiguous()

    def check(self, token: Tensor, cache: list[LayerCache]) -> int:
        """The cache's length after checking that one token fits (ValueError naming what does not)."""
        config = self.config
        if token.shape != (1, 1) or token.dtype != torch.long:
            raise ValueError(f"NativeStep steps one token id (1, 1) long, got {tuple(token.shape)} {token.dtype}")
        if len(cache) != config.layers:
            raise ValueError(f"NativeStep needs a cache of {config.layers} layers, got {len(cache)}")
        lengths = sorted({store.length for store in cache})
        expected = (1, config.kv_heads, cache[0].capacity, config.head_dim)
        for index, store in enumerate(cache):
            for name, buffer in (("keys", store.keys), ("values", store.values)):
                if (tuple(buffer.shape) != expected or buffer.dtype != torch.float32 or not buffer.is_contiguous()
                        or buffer.device.type != "cpu"):
                    raise ValueError(f"NativeStep: layer {index}'s {name} are {tuple(buffer.shape)} {buffer.dtype} on "
                                     f"{buffer.device}, not contiguous float32 {expected} on the CPU")
        if len(lengths) != 1 or lengths[0] >= cache[0].capacity:
            raise ValueError(f"NativeStep steps one token into a cache with room and one length, got lengths "
                             f"{lengths} of {cache[0].capacity} positions")
        return lengths[0]

    def step(self, token: Tensor, cache: list[LayerCache]) -> Tensor:
        """Logits (1, 1, V) of one token (1, 1) after the ``cache``'s positions; writes its keys and values."""
        length = self.check(token, cache)
        config, capacity = self.config, cache[0].capacity
        keys, values = pointers([store.keys for store in cache]), pointers([store.values for store in cache])
        # each layer's store is one block of `capacity` positions: no tables
        view = CacheView(ctypes.addressof(keys), ctypes.addressof(values), None, 1, capacity, 0,
                         capacity * config.head_dim)
        logits = self._run(token[0], torch.tensor([length]), view, (keys, values))
        for store in cache:
            store.length = length + 1
        return logits[None]  # (1, 1, V)

    def step_paged(self, tokens: list[int], positions: list[int], tables: list[list[int]], keys: Tensor,
                   values: Tensor) -> Tensor:
        """Logits (B, V): token b at ``positions[b]`` of the request whose blocks are ``tables[b]``, each attending
        over its own positions 0 .. positions[b]. ``keys`` and ``values``: the server's pool storage
        (blocks, layers x Hkv, S, D) float32 (``llm_models.serving.pool.LayeredPool``), layer l's heads at
        l * Hkv .. (l + 1) * Hkv - 1; each row's new key and value are written into its block."""
        config = self.config
        expected = (config.layers * config.kv_heads, config.head_dim)
        if (keys.dim() != 4 or (keys.shape[1], keys.shape[3]) != expected or keys.dtype != torch.float32
                or not keys.is_contiguous() or values.shape != keys.shape or values.dtype != keys.dtype
                or not values.is_contiguous() or keys.device.type != "cpu"):
            raise ValueError(f"NativeStep.step_paged reads a contiguous float32 pool (blocks, {expected[0]}, S, "
                             f"{expected[1]}) on the CPU, got keys {tuple(keys.shape)} {keys.dtype} and values "
                             f"{tuple(values.shape)} {values.dtype}")
        if not len(tokens) == len(positions) == len(tables) > 0:
            raise ValueError(f"NativeStep.step_paged needs one token, position and table per request, got "
                             f"{len(tokens)}, {len(positions)} and {len(tables)}")
        blocks, size = keys.shape[0], keys.shape[2]
        needed = [p // size + 1 for p in positions]  # blocks holding positions 0 .. p
        short = [b for b, (count, table) in enumerate(zip(needed, tables)) if count > len(table) or positions[b] < 0]
        if short:
            b = short[0]
            raise ValueError(f"NativeStep.step_paged: request {b} at position {positions[b]} needs "
                             f"{needed[b]} blocks of {size}, its table has {len(tables[b])}")
        width = max(needed)
        index = torch.tensor([table[:count] + [table[0]] * (width - count) for table, count in zip(tables, needed)])
        lengths = torch.tensor(positions) + 1
        paged.check_tables(len(tokens), index, lengths, blocks, size)
        split = (blocks, config.layers, config.kv_heads, size, config.head_dim)  # each layer's heads side by side
        key_rows, value_rows = (pointers(list(store.view(split).unbind(1))) for store in (keys, values))
        view = CacheView(ctypes.addressof(key_rows), ctypes.addressof(value_rows), index.data_ptr(), width, size,
                         keys.stride(0), size * config.head_dim)
        return self._run(torch.tensor(tokens), lengths - 1, view, (key_rows, value_rows, index))

    def _run(self, tokens: Tensor, positions: Tensor, view: CacheView, held: tuple) -> Tensor:
        """The C step for tokens (B,) at positions (B,) over ``view`` (whose arrays ``held`` keeps alive while
        the loop reads them): logits (B, V). The scratch is made for this batch and longest position every call
        (microseconds against milliseconds), never kept for a cache that may be freed or outgrown."""
        config = self.config
        bad = [int(t) for t in tokens if not 0 <= int(t) < config.vocab_size]
        if bad:
            raise ValueError(f"NativeStep: token ids {bad[:5]} lie outside the vocabulary of {config.vocab_size}")
        library = build(self.plain).require("the C decode step")
        batch = len(tokens)
        cos, sin = (angles.contiguous() for angles in rotary_angles(positions, self.model.inverse_frequencies,
                                                                     torch.float32))  # (B, D), held past the call
        x = self.embed(tokens)  # (B, C)
        positions = positions.to(torch.int64).contiguous()
        scratch = torch.empty(batch * self._row_scratch)
        scores = torch.empty(batch * config.heads * (int(positions.max()) + 1))
        logits = torch.empty(batch, config.vocab_size)
        library.llama_step(ctypes.byref(self.shape), self._matrices, self._scales, self._norms, ctypes.byref(view),
                           batch, positions.data_ptr(), cos.data_ptr(), sin.data_ptr(),
                           x.data_ptr(), scratch.data_ptr(), scores.data_ptr(), logits.data_ptr(),
                           torch.get_num_threads())
        del held
        return logits

    def warm(self, capacity: int = 2) -> float:
        """Build the loop (once per process) and run one step; the seconds it took."""
        started = time.perf_counter()
        cache = self.model.new_cache(1, capacity)
        with torch.inference_mode():
            self.step(torch.zeros(1, 1, dtype=torch.long), cache)
        return time.perf_counter() - started

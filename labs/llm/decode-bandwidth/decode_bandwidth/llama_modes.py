"""The trained Llama's modes in the decode benchmark: what each times, the weights and kernels it may take, the
tolerance its step must meet, and how the int8 model's quality is scored.

Torch-free, and the one home of each: the timed module (decode_bandwidth.llama), the fast twin and the benchmark
take them from here, and so do the record's figures, views and tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from labkit.summary import median
from llm_models.kernels.choice import fastest

# The trained model beside the grid: the project's Llama-family decoder (llm_models.llama) on SmolLM2-135M-Instruct,
# against transformers' LlamaForCausalLM on the same tensors, at batch 1 in float32. ``tiny`` is a seeded random
# Llama of llm_models.llama.tiny, for the quick run and the tests.
LLAMA_PRESETS = {"smollm2": "SmolLM2-135M-Instruct, trained, dequantized from its packaged GGUF file to float32",
                 "tiny": "a tiny random Llama (llm_models.llama.tiny.TINY), for smoke runs"}
# Our decoder's preallocated cache, transformers' DynamicCache, then the fast twin (decode_bandwidth.fast_llama) of
# our decoder: fused matrices through the kernel measured fastest per kind, eager and with its layers compiled; then
# the whole step in one C call (llm_models.llama.native_step) over float32 weights and over int8 weight-only codes;
# and the step the server runs (llm_models.serving.llama): one request's token over a paged block pool, through the
# serving core's own kernel table, timed in the same rounds so that the serving page's step stands beside this
# lab's as a paired ratio.
LLAMA_SERVED = "served"
LLAMA_MODES = ["ours-prealloc", "hf-dynamic", "ours-fused", "ours-fused-compiled", "ours-native", "ours-int8",
               LLAMA_SERVED]
# Each fast twin's mode: the weights its kernels read (llm_models.kernels.matvec formats) and whether its layers are
# compiled.
LLAMA_FAST = {"ours-fused": ("float32", False), "ours-fused-compiled": ("float32", True)}
# Each one-call step's mode: the weights it reads (llm_models.llama.native_step.WEIGHTS).
LLAMA_NATIVE = {"ours-native": "float32", "ours-int8": "int8"}
LLAMA_REFERENCE = "ours-prealloc"  # the step the float32 fast modes must equal (it equals transformers')
# The int8 mode must equal ours-prealloc's step on the int8 round trip of the weights (each matrix dequantized):
# the float model its codes stand for. How far that model is from the float32 one is its quality, measured apart.
LLAMA_INT8 = "ours-int8"
LLAMA_WEIGHTS = {mode: LLAMA_NATIVE.get(mode) or LLAMA_FAST.get(mode, ("float32", False))[0]
                 for mode in LLAMA_MODES}  # what each mode reads
# The lab's own float32 modes, among which "best" is chosen: not transformers', not the server's.
LLAMA_OURS = tuple(mode for mode in LLAMA_MODES
                   if mode not in ("hf-dynamic", LLAMA_SERVED) and LLAMA_WEIGHTS[mode] == "float32")
LLAMA_BASELINE = "hf-dynamic"
LLAMA_DTYPE = "float32"
LLAMA_BATCH = 1
# Paired rounds per (threads, context) group: 11, odd so the median is one round's ratio, and enough that the middle
# half of the per-round ratios (the noise a 'faster' must clear) is read over 5 rounds, not 2. Each round costs one
# step of every mode and one pass of the floor's read kernel: about 0.4 s at 1,024 positions on a 2-core machine.
LLAMA_ROUNDS = 11
# A group whose floor reads ran more than LLAMA_SLOWED slower (median against the fastest read at its thread count
# anywhere in the section) had something else using the memory while it ran: a pure read slows more under a
# neighbour than a step, so its ratios price the neighbour. Such a group is measured again, the most slowed first,
# up to LLAMA_REMEASURE times in a section (about 7 s each at one thread); the attempt whose reads ran fastest is the
# one the page reads, and every attempt stays in the record. On a quiet 2-core Xeon the groups' medians sat 2-6%
# under the fastest read; a run disturbed for some seconds read 12% and 3.2x slower in two groups.
LLAMA_SLOWED = 0.10
LLAMA_REMEASURE = 3
# float32 through 30 layers: the two step logits differ only in summation order; the KV-cache lab's parity tests
# on the same weights use the same bounds (logits reach about 40).
LLAMA_ATOL = 1e-3
LLAMA_RTOL = 1e-4
# The fast modes reduce each dot product in another order (fused matrices, other kernels, inductor's loops, the C
# step's four-row blocks), so
# their logits move further from ours-prealloc's than transformers' do: up to a few thousandths on SmolLM2's
# logits (which reach about 40) in a float32 step of 30 layers. They are held to 1e-2 absolute (a quarter of a
# thousandth of the largest logit) and the same relative bound; the record keeps each difference and whether the
# most likely token agreed.
LLAMA_FAST_ATOL = 1e-2
LLAMA_FAST_RTOL = 1e-4
# The modes held to that bound against ours-prealloc (or, for int8, ours on the int8 round trip): the fast twins,
# the one-call steps and the served step, whose fused matrices and kernels reorder the same sums.
LLAMA_CHECKED = (*LLAMA_FAST, *LLAMA_NATIVE, LLAMA_SERVED)
# The candidate kernels per weight format (llm_models.kernels.matvec.KERNELS, where each is described).
# int8-compiled (inductor's loop) is tested but not a candidate: its cold compile per matrix shape costs more of the
# benchmark's five minutes than a kernel that loses could repay.
KERNEL_CANDIDATES = {"float32": ("out_in", "in_out", "onednn", "compiled"), "int8": ("int8-c", "int8pack")}
# The int8 model's quality against float32, measured as the quantized-cache lab measures a cache format
# (llm_models.quality): KL divergence and top-1 agreement at every position of the first QUALITY_POSITIONS tokens of
# llm_models.texts' long text, and where greedy decoding of one prompt first departs.
QUALITY_POSITIONS = 512
QUALITY_PROMPT = "Explain in two sentences why a language model keeps a cache of keys and values."
QUALITY_NEW_TOKENS = 48
KERNEL_PASSES = 3  # passes per kernel over every matrix of a kind; the best is kept
# How the fast modes attend over the cache (decode_bandwidth.attention): "products", two batched matrix products
# around a masked softmax (torch's BLAS), or "c", this lab's loop that reads each stored key and value row once.
ATTENTION = ("products", "c")
# The two ways differ only in summation order: on seeded random queries, keys and values (entries ~ N(0, 1)) their
# outputs, averages of value rows, agree to a few units in the seventh digit; 1e-5 leaves room for long contexts
# and still fails a loop that reads one position too many or too few (tested).
ATTENTION_ATOL = 1e-5
ATTENTION_PASSES = 7  # passes per way and context over every layer's cache, the ways alternating; each is kept


def kernel_set(weights: str, compiled: bool) -> str:
    """Which of the kernel table's choices a fast mode takes: the fastest per kind among its weight format's
    candidates, and for compiled layers among those a torch.compile region can trace."""
    return f"{weights}-compiled" if compiled else weights


# The kernel table's choices: the fast twins' two (float32, eager and compiled) and the fastest int8 kernel per kind,
# which no timed mode takes (ours-int8 is the one-call step) but which sets torch's own int8 product beside the C
# loop for every matrix kind, and which the int8 twin (tested, not timed) runs on.
KERNEL_CHOICES = (("float32", False), ("float32", True), ("int8", False))
KERNEL_SETS = tuple(sorted(kernel_set(weights, compiled) for weights, compiled in KERNEL_CHOICES))


def set_candidates(weights: str, compiled: bool, measured: Sequence[str], traceable: Mapping[str, bool]) -> list[str]:
    """The measured kernels a fast mode may take: its weight format's candidates, and for compiled layers only
    those a region can trace (the benchmark chooses among them, the record check repeats the choice)."""
    return [name for name in KERNEL_CANDIDATES[weights] if name in measured and (traceable[name] or not compiled)]


def quality_positions(max_positions: int) -> int:
    """The positions the int8 quality is scored over: QUALITY_POSITIONS, fewer only where the model holds fewer
    (each scored position needs its next token)."""
    return min(QUALITY_POSITIONS, max_positions - 1)

def floor_slowdown(rates: Sequence[float], fastest_read: float) -> float:
    """How far below ``fastest_read`` (bytes per second) the median of a group's round read ``rates`` lies, as a share
    of it: 0 for a group whose reads ran at the fastest seen."""
    return 1 - median(rates) / fastest_read


def fastest_reads(groups: Iterable[tuple[int, Sequence[Sequence[float]]]]) -> dict[int, float]:
    """The fastest round read rate at each thread count over every attempt of every group; ``groups`` gives each
    group's thread count and its attempts' round read rates."""
    fastest: dict[int, float] = {}
    for threads, tries in groups:
        fastest[threads] = max([fastest.get(threads, 0.0), *(rate for rates in tries for rate in rates)])
    return fastest


def most_slowed(attempts: Mapping[Any, Sequence[Sequence[float]]], threads: Mapping[Any, int]) -> Any | None:
    """The group to measure again: the one whose kept attempt (``kept_attempt``) lies furthest below the fastest
    round read at its thread count over every attempt, where that is more than LLAMA_SLOWED; None where none is.
    ``attempts`` maps a group's key to its attempts' round read rates, ``threads`` a key to its thread count."""
    fastest = fastest_reads((threads[key], tries) for key, tries in attempts.items())
    slowed = {key: floor_slowdown(tries[kept_attempt(tries)], fastest[threads[key]]) for key, tries in attempts.items()}
    worst = max(slowed, key=lambda key: slowed[key], default=None)
    return worst if worst is not None and slowed[worst] > LLAMA_SLOWED else None


def kept_attempt(tries: Sequence[Sequence[float]]) -> int:
    """Which of a group's attempts (each its round read rates) the page reads: the one whose reads' median ran
    fastest, the first on a tie."""
    return max(range(len(tries)), key=lambda index: (median(tries[index]), -index))


def fastest_kernel(row: Mapping[str, Any], names: Sequence[str] | None = None) -> str:
    """The kernel with the least time per matrix in a measured row of the kernel table (the first on a tie),
    among ``names`` where given (one weight format's candidates)."""
    return fastest({name: kernel["ns"] for name, kernel in row["kernels"].items()}, names)


def fastest_attention(rows: Sequence[Mapping[str, Any]]) -> str:
    """The way of attending with the least summed median pass over the measured contexts (products on a tie)."""
    def total(way: str) -> float:
        return sum(median(row["durations_ns"][way]) for row in rows)
    return min(rows[0]["durations_ns"], key=lambda way: (total(way), way != "products"))

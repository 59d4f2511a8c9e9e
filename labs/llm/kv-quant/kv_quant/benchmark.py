"""Quantized KV caches measured: bytes stored, the error chain, quality on a trained model, time and memory.

    labs/.venv/bin/python labs/llm/kv-quant/benchmark.py --output results/quant-results.json

Per format: the bytes its stored tensors hold as the context grows (SmolLM2-135M's layer shape, random
entries) and the error chain on the first lab's decoder block with random weights. On SmolLM2-135M-Instruct:
each position's next-token loss, KL divergence and top-1 agreement against the float32 cache over a long text
nobody here wrote (llm_models.texts, its digest in the record; one chunked pass per format, see
kv_quant.trained), greedy tokens from a chat prompt, and the decode step's time with its dequantization
timed apart. Then the peak of attention's
temporaries with the cache dequantized all at once against block by block, and transformers' QuantizedCache
(quanto, HQQ) on the same data where it is installed. Written atomically at the end.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import time
from collections.abc import Sequence
from typing import Any

import torch

from labkit import bench, harness
from labkit.manifest import lab_for
from llm_models.cache_formats import FP8_SMALLEST_NORMAL, CacheFormat, format_of
from llm_models.toy.config import ModelConfig
from llm_models.toy.model import DecoderBlock

from .attention import blockwise_attention, dequantized_attention, peak_bytes
from .cache import make_cache
from .entries import random_entries
from .errors import error_chain
from .evaluation import REFERENCE, TEXT, TRAINED_LABELS
from .figures import BUDGET_BYTES, SERVING, WALL_TIME_LIMIT_S, derive

LAB, ROOT = lab_for(__file__)
FORMATS = (
    CacheFormat("float32"), CacheFormat("bfloat16"), CacheFormat("int8"), CacheFormat("int4", group_size=32),
    CacheFormat("kivi", bits=2, group_size=32, residual=128), CacheFormat("kivi", bits=4, group_size=32, residual=128),
    CacheFormat("q8_0"), CacheFormat("q4_0"),
    CacheFormat("q8_0", sides="keys"), CacheFormat("q8_0", sides="values"),
    CacheFormat("q4_0", sides="keys"), CacheFormat("q4_0", sides="values"),
    CacheFormat("fp8", scale="tensor", calibration="none"), CacheFormat("fp8", scale="head", calibration="none"),
    CacheFormat("fp8", scale="tensor", calibration="amax"), CacheFormat("fp8", scale="head", calibration="amax"),
)
LAYER = {"layers": 30, "kv_heads": 3, "heads": 9, "head_dim": 64}  # SmolLM2-135M's cache shape, per layer
# Quality at 2,048 positions of the long text, read at three context lengths (the first L positions of the same
# pass): KIVI's residual alone at 128, then ever more of its tokens quantized. Most of a format's pass is the
# model's matrices over every position (twice the positions, about twice the time), the rest the dequantized
# prefix each chunk attends to: 4,096 positions took 212 s of the benchmark's five minutes on a 2-core AMD EPYC,
# and the seven benchmarks must fit 20 minutes together. The record's wall_time_s says whether it fit; --contexts
# sets another length.
DEFAULTS = {"lengths": [16, 64, 128, 160, 256, 1024, 4096], "contexts": [128, 1024, 2048], "new_tokens": 32,
            "memory_tokens": 4096, "repeats": 7, "quality_threads": 2}
QUICK = {"lengths": [16, 160], "contexts": [32, 64], "new_tokens": 3, "memory_tokens": 64, "repeats": 1}
PROMPT = "Explain in two sentences why a language model keeps a cache of keys and values."
TOY = {"length": 320, "prefix": 192}  # the error chain's decoded positions: 128 one-token steps after a prefill
TRANSFORMERS_TOKENS = 320  # a multiple of quanto's group of 64 once multiplied by the head count


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.parser(__doc__)
    add = parser.add_argument
    add("--lengths", type=int, nargs="+", default=DEFAULTS["lengths"], help="cache lengths for the byte count (default: %(default)s)")
    add("--contexts", type=int, nargs="+", default=DEFAULTS["contexts"],
        help="context lengths for perplexity, KL and top-1, multiples of 32; the longest is how many positions of "
             "the text are evaluated (default: %(default)s)")
    add("--quality-threads", type=int, default=DEFAULTS["quality_threads"],
        help="PyTorch threads for the quality pass, which times nothing (default: %(default)s; the timed decode "
             "steps use --threads)")
    add("--new-tokens", type=int, default=DEFAULTS["new_tokens"], help="greedy tokens per format (default: %(default)s)")
    add("--memory-tokens", type=int, default=DEFAULTS["memory_tokens"], help="cache length of the attention peak (default: %(default)s)")
    parser.set_defaults(repeats=DEFAULTS["repeats"])
    bounds = {"lengths": (1, 8192), "contexts": (32, 8192), "new_tokens": (1, 256), "memory_tokens": (64, 16384),
              "quality_threads": (1, 256)}
    args = harness.parse(parser, argv, QUICK, bounds)
    if args.contexts != sorted(set(args.contexts)) or any(c % 32 for c in args.contexts):
        parser.error(f"--contexts must be strictly ascending multiples of 32, got {args.contexts}")
    return args


# --- bytes and the error chain, random data ------------------------------------------------------------

def byte_counts(fmt: CacheFormat, lengths: list[int], seed: int) -> list[dict[str, int]]:
    """Stored bytes of one layer's cache at each length, entries appended 16 positions at a time."""
    keys, values = random_entries(1, LAYER["kv_heads"], lengths[-1], LAYER["head_dim"], seed)
    cache = make_cache(fmt, 1, LAYER["kv_heads"], LAYER["head_dim"])
    counts, start = [], 0
    for length in lengths:
        while start < length:
            end = min(start + 16, length)
            cache.append(keys[:, :, start:end], values[:, :, start:end])
            start = end
        counts.append({"tokens": length, "stored_bytes": cache.stored_bytes()})
    return counts


def toy_config(seed: int) -> ModelConfig:
    return ModelConfig(vocab_size=256, width=256, heads=4, kv_heads=2, max_positions=TOY["length"], seed=seed)


def formats_section(args: argparse.Namespace) -> dict[str, Any]:
    model = DecoderBlock(toy_config(args.seed))
    ids = harness.token_ids(256, 1, TOY["length"], args.seed)
    section = {}
    for fmt in FORMATS:
        bench.progress(f"bytes and error chain: {fmt.label}")
        section[fmt.label] = {"format": fmt.as_record(), "bytes": byte_counts(fmt, args.lengths, args.seed),
                              "error_chain": error_chain(fmt, model, ids, TOY["prefix"]).as_record()}
    return section


# --- attention's temporaries ------------------------------------------------------------------------------

def attention_memory(args: argparse.Namespace) -> dict[str, Any]:
    """Peak bytes of the tensors one decode query's attention creates, the cache dequantized all at once
    against block by block, at ``--memory-tokens`` cached positions."""
    tokens, block = args.memory_tokens, 64
    keys, values = random_entries(1, LAYER["kv_heads"], tokens, LAYER["head_dim"], args.seed)
    query = torch.randn(1, LAYER["heads"], 1, LAYER["head_dim"], generator=torch.Generator().manual_seed(args.seed))
    rows = {}
    for fmt in FORMATS:
        cache = make_cache(fmt, 1, LAYER["kv_heads"], LAYER["head_dim"])
        cache.append(keys, values)
        whole, all_at_once = peak_bytes(dequantized_attention, query, cache, tokens - 1)
        blocked, blockwise = peak_bytes(blockwise_attention, query, cache, tokens - 1, block)
        rows[fmt.label] = {"cache_bytes": cache.stored_bytes(),
                           "all_at_once": {"peak_bytes": all_at_once.peak, "largest_bytes": all_at_once.largest},
                           "blockwise": {"peak_bytes": blockwise.peak, "largest_bytes": blockwise.largest},
                           "max_abs_diff": float((whole - blocked).abs().max())}
    return {"tokens": tokens, "block_tokens": block, "formats": rows,
            "method": "kv_quant.attention.AllocationTracker: bytes of every new storage an operator returns, "
                      "while a tensor still refers to it; one decode query, the cache built beforehand"}


# --- the trained model ------------------------------------------------------------------------------------

def trained_section(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    from llm_models.llama.generate import smollm2
    from llm_models.llama.weights import GGUF_NAME, trained
    from llm_models.quality import CHUNK

    from .trained import KIVI_CHUNK, evaluate, greedy, magnitudes, step_timing

    chat = smollm2(torch.float32)
    model = chat.model
    ids = chat.encode(TEXT.read())  # the text is read only after its SHA-256 checks
    evaluated = args.contexts[-1]
    if len(ids) < evaluated + args.repeats + 2:
        raise ValueError(f"{TEXT.name} holds {len(ids)} tokens; --contexts up to {evaluated} and "
                         f"{args.repeats} timed steps need {evaluated + args.repeats + 2}")
    text = torch.tensor([ids[: evaluated + args.repeats + 2]])
    formats = [format_of(label) for label in TRAINED_LABELS]
    torch.set_num_threads(args.quality_threads)  # nothing in the quality pass is timed
    scores, caches = evaluate(model, text, formats, evaluated, bench.progress)
    entry_range = magnitudes(caches[REFERENCE], FP8_SMALLEST_NORMAL)  # before the timed steps extend the cache
    prompt = chat.chat_ids([{"role": "user", "content": PROMPT}])
    per_format: dict[str, dict[str, Any]] = {}
    for fmt in formats:
        bench.progress(f"trained model: {fmt.label}, greedy answer and timed decode steps")
        torch.set_num_threads(args.quality_threads)
        greedy_ids = greedy(model, prompt, fmt, args.new_tokens)
        torch.set_num_threads(args.threads)
        per_format[fmt.label] = {"greedy_ids": greedy_ids,
                                 "timing": step_timing(model, text, caches[fmt.label], args.repeats)}
    reference_text = chat.decode(per_format[REFERENCE]["greedy_ids"])
    section = {"model": "SmolLM2-135M-Instruct", "weights": GGUF_NAME, "weights_sha256": trained().digest,
               "dtype": "float32", "layers": model.config.layers, "kv_heads": model.config.kv_heads,
               "head_dim": model.config.head_dim,
               "text": {"name": TEXT.name, "sha256": TEXT.sha256, "source": TEXT.source, "url": TEXT.url,
                        "tokens": len(ids), "evaluated": evaluated},
               "contexts": args.contexts, "chunk": CHUNK, "kivi_chunk": KIVI_CHUNK,
               "quality_threads": args.quality_threads, "prompt": PROMPT, "prompt_tokens": len(prompt),
               "new_tokens": args.new_tokens, "reference_text": reference_text,
               "magnitudes": {"smallest_normal": FP8_SMALLEST_NORMAL, **entry_range},
               "method": (f"one pass over the first {evaluated + 1} tokens of the text per format, every format in "
                          f"step: chunks of {CHUNK} tokens per call ({KIVI_CHUNK} for KIVI, its group size) into "
                          f"each format's cache, every stored position dequantized for attention; per position the "
                          f"next token's loss, KL(float32 || format) and whether the most likely token is "
                          f"float32's; the figures at context L over the first L positions"),
               "positions": {label: found.as_record() for label, found in scores.items()},
               "timing": {"context": evaluated, "repeats": args.repeats,
                          "method": "one decode step after the text's pass, time.perf_counter_ns; then every "
                                    "layer's cache dequantized as the step did (keys_values), timed alone"}}
    return section, per_format


# --- transformers' QuantizedCache -------------------------------------------------------------------------

def installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def transformers_section(args: argparse.Namespace) -> dict[str, Any]:
    """Where a registry backend is installed: its layer's bytes and errors on our data beside our nearest
    format, the key scale tensor's shape, and which key elements share a group with keys[0, 0, 0, 0]."""
    from transformers.cache_utils import HQQQuantizedLayer, QuantoQuantizedLayer

    from .transformers_cache import TransformersStore, group_members, keys_values, stored_bytes, stored_tensors

    versions = {name: installed(name) for name in ("transformers", "optimum-quanto", "hqq")}
    backends = []
    if versions["optimum-quanto"]:
        backends += [("quanto-4b-axis0", lambda: QuantoQuantizedLayer(nbits=4, axis_key=0, axis_value=0, q_group_size=64, residual_length=128), "int4-g64"),
                     ("quanto-4b-axis-1", lambda: QuantoQuantizedLayer(nbits=4, axis_key=-1, axis_value=0, q_group_size=64, residual_length=128), "kivi-4b-g64-r128"),
                     ("quanto-2b-axis-1", lambda: QuantoQuantizedLayer(nbits=2, axis_key=-1, axis_value=0, q_group_size=64, residual_length=128), "kivi-2b-g64-r128")]
    if versions["hqq"]:
        backends += [("hqq-4b-axis0", lambda: HQQQuantizedLayer(nbits=4, axis_key=0, axis_value=0, q_group_size=64, residual_length=128), "kivi-4b-g64-r128"),
                     ("hqq-4b-axis1", lambda: HQQQuantizedLayer(nbits=4, axis_key=1, axis_value=1, q_group_size=64, residual_length=128), "int4-g64")]
    tokens, kv_heads, head_dim = TRANSFORMERS_TOKENS, LAYER["kv_heads"], LAYER["head_dim"]
    keys, values = random_entries(1, kv_heads, tokens, head_dim, args.seed)
    model = DecoderBlock(toy_config(args.seed))
    ids = harness.token_ids(256, 1, TOY["length"], args.seed)
    rows = {}
    for label, make_layer, ours_label in backends:
        bench.progress(f"transformers' QuantizedCache: {label}")
        layer = make_layer()
        layer.update(keys.clone(), values.clone())
        theirs_k, theirs_v = keys_values(layer)
        ours = make_cache(format_of(ours_label), 1, kv_heads, head_dim)
        ours.append(keys, values)
        ours_k, ours_v = ours.keys_values()
        members = group_members(make_layer, keys, values, (0, 0, 0, 0)).nonzero().tolist()
        key_scale = next(t for name, t in stored_tensors(layer).items() if name == "keys.scale")
        chain = error_chain(None, model, ids, TOY["prefix"], store=TransformersStore(make_layer()))
        rows[label] = {"tokens": tokens, "stored_bytes": stored_bytes(layer),
                       "keys_max_abs_error": float((theirs_k - keys).abs().max()),
                       "values_max_abs_error": float((theirs_v - values).abs().max()),
                       "key_scale_shape": list(key_scale.shape),
                       "group": {"tokens": len({(h, t) for _, h, t, _ in members} | {(0, 0)}),
                                 "channels": len({d for *_, d in members} | {0}),
                                 "heads": len({h for _, h, _, _ in members} | {0})},
                       "error_chain": chain.as_record(),
                       "ours": {"label": ours_label, "stored_bytes": ours.stored_bytes(),
                                "keys_max_abs_error": float((ours_k - keys).abs().max()),
                                "values_max_abs_error": float((ours_v - values).abs().max())}}
    return {"versions": versions, "tokens": tokens, "group_size": 64, "residual_length": 128, "backends": rows}


# --- the record -------------------------------------------------------------------------------------------

def sections(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    harness.seed_and_threads(args)
    with torch.inference_mode():
        formats = formats_section(args)
        memory = attention_memory(args)
    trained, per_format = trained_section(args)
    for label, values in per_format.items():
        formats[label]["trained"] = values
    with torch.inference_mode():
        comparison = transformers_section(args)
    return {
        "config": {"seed": args.seed, "threads": args.threads, "quality_threads": args.quality_threads,
                   "repeats": args.repeats, "quick": bool(args.quick),
                   "lengths": args.lengths, "layer": LAYER, "toy_model": toy_config(args.seed).as_record(),
                   "toy": TOY, "budget_bytes": BUDGET_BYTES, "serving": SERVING,
                   "formats": [fmt.label for fmt in FORMATS], "trained_formats": list(TRAINED_LABELS)},
        "formats": formats,
        "trained": trained,
        "attention_memory": memory,
        "transformers": comparison,
        "wall_time_s": time.perf_counter() - started,  # every section, the weights' loading included
    }


def summary(record: dict[str, Any]) -> list[str]:
    longest = str(record["trained"]["contexts"][-1])
    lines = [f"whole run {record['wall_time_s']:.0f} s, {'within' if record['wall_time_met'] else 'over'} the "
             f"{WALL_TIME_LIMIT_S:.0f} s limit"]
    for label, entry in record["formats"].items():
        line = f"{label}: {entry['bytes_per_token']:.1f} B/token/layer, {entry['effective_bits']:.2f} bits"
        if "trained" in entry:
            q = entry["trained"]["quality"][longest]
            line += (f"; ppl {q['perplexity']['estimate']:.3f}, KL {q['kl']['estimate']:.2e}, "
                     f"top-1 {q['top1_agreement']['estimate']:.3f}, departs at {entry['trained']['departs_at']}")
        lines.append(line)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, validate against the schema, then replace the record in one rename."""
    args = parse_args(argv)
    return harness.run(LAB, ROOT, args, argv, lambda: sections(args), summary, derive)

"""The prefix-caching record's derived figures and invariants (torch-free: the site build imports this module).

Per run: the share of prompt tokens found cached, the prompt tokens prefilled, time to first token (median and 99th
percentile of its requests), output tokens per second over the run, evictions and the blocks the cache held at most.
Per workload: each cached run's median TTFT over the uncached run's at the same pool, whether every request generated
what it generated uncached, whether the two indexes found the same tokens, and the hits the prefix rule predicts
(each request finds the longest run of full blocks it shares from position 0 with an earlier request); per pool, the
TTFT verdicts of every cached run that did the same work (same_work); the uncached run's prefill seconds against the
span its requests were sent over (queue); per index, what the cache-aware order did to the requests that found only
the shared head (order_price). Across workloads: where the two indexes evicted or found differently under eviction.
"""

from __future__ import annotations

from typing import Any

from labkit.figures import Figures, refuse
from labkit.summary import halves_below, paired, percentile
from llm_models.cache_formats import CacheFormat, block_bytes
from llm_models.hardware import H100_SXM
from llm_models.kv_bytes import BYTES_PER_ELEMENT
from llm_models.published import model

from .side_channel_figures import check_side_channel, side_channel_figures
from .workloads import common_prefix, next_prompt

# A run's TTFT is "lower" than another's only where the middle halves of their requests' TTFTs do not overlap:
# one run per setting, so the requests' own spread is the noise a difference must clear.
ORDERS = ("fcfs", "longest-prefix")
CACHINGS = ("off", "hash", "radix")
POOLS = ("holds", "evicts")
# Where at least this share of the uncached run's prefill was still to do when its last request arrived, the page
# says "much of" the cut in time to first token is the queue clearing (else "part of").
QUEUE_MOSTLY = 0.5


def run_key(caching: str, order: str, pool: str) -> str:
    return f"{caching}-{order}-{pool}"


def ttfts(run: dict[str, Any]) -> list[float]:
    return [r["ttft_s"] for r in run["requests"]]


def request_key(request: dict[str, Any]) -> tuple[int, int]:
    """What names a request across runs of one workload: its session and turn (the same prompt, sent at the same
    moment of the workload)."""
    return request["session"], request["turn"]


def by_request(run: dict[str, Any], field: str) -> dict[tuple[int, int], Any]:
    """One field of every request of ``run``, keyed by request_key."""
    return {request_key(r): r[field] for r in run["requests"]}


def prompts_sent(workload: dict[str, Any], run: dict[str, Any]) -> dict[tuple[int, int], list[int]]:
    """Every request's prompt, rebuilt from the workload's sessions and the replies of this run (a later turn
    resends the history with the reply it got): keyed by (session, turn)."""
    replies = by_request(run, "output")
    built = {}
    for index, session in enumerate(workload["sessions"]):
        prompt = list(session["prompt"])
        for turn in range(1 + len(session["follow_ups"])):
            if turn:
                prompt = next_prompt(prompt, replies[(index, turn - 1)], session["follow_ups"][turn - 1],
                                     workload["end_of_turn"])
            built[(index, turn)] = prompt
    return built


def predicted_hits(workload: dict[str, Any], run: dict[str, Any], block_size: int, whole_blocks: bool = True) -> int:
    """Prompt tokens the prefix rule finds cached if nothing is evicted and every earlier request's blocks are in
    the cache when a request arrives (an upper bound: requests prefilled in one batch do not see each other's
    blocks, so a run may find fewer): per request, in the order sent, its longest common prefix with what an earlier
    request stored (its prompt and all but its last generated token), in whole blocks, at most all but its last
    prompt token."""
    prompts = prompts_sent(workload, run)
    found, stored = 0, []
    for r in sorted(run["requests"], key=lambda r: r["sent_s"]):
        prompt = prompts[request_key(r)]
        shared = max((common_prefix(prompt, earlier) for earlier in stored), default=0)
        usable = min(shared, len(prompt) - 1)
        found += usable // block_size * block_size if whole_blocks else usable  # a tree of single tokens: all of it
        stored.append(prompt + r["output"][:-1])
    return found


def run_figures(run: dict[str, Any]) -> dict[str, Any]:
    requests = run["requests"]
    prompt = sum(r["prompt_tokens"] for r in requests)
    cached = sum(r["cached_tokens"] for r in requests)
    outputs = sum(len(r["output"]) for r in requests)
    span = max(r["end_s"] for r in requests) - min(r["sent_s"] for r in requests)
    times = ttfts(run)
    prefix = run["prefix"] or {}
    return {"hit_rate": cached / prompt, "prompt_tokens": prompt, "cached_tokens": cached,
            "prefilled_tokens": prompt - cached, "ttft_p50_s": percentile(times, 0.5),
            "ttft_p99_s": percentile(times, 0.99), "output_tokens_per_s": outputs / span,
            "evictions": prefix.get("evictions", 0), "cached_blocks_peak": prefix.get("cached_blocks_peak", 0)}


# The page's accelerator arithmetic: a long production system prompt on a model people serve, at an H100's dense peak.
ACCELERATOR_MODEL, SYSTEM_TOKENS = "Llama-3-8B", 2000
KV_BITS = 16  # the accelerator's cache in 16-bit floats (bfloat16 or float16), as served


def accelerator() -> dict[str, Any]:
    """Arithmetic, not a measurement: the KV bytes a SYSTEM_TOKENS-token prompt holds on ACCELERATOR_MODEL and the
    prefill work (2 x parameters per token, attention left out) one cache hit on it saves, at the H100's peak."""
    m = model(ACCELERATOR_MODEL)
    element = KV_BITS // 8
    per_position = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * element
    flops = 2 * m["parameters"] * SYSTEM_TOKENS
    return {"model": ACCELERATOR_MODEL, "config_url": m["config"], "layers": m["layers"], "kv_heads": m["kv_heads"],
            "head_dim": m["head_dim"], "element_bytes": element, "parameters": m["parameters"],
            "system_tokens": SYSTEM_TOKENS, "kv_bytes_per_position": per_position,
            "kv_bytes": per_position * SYSTEM_TOKENS, "prefill_flops": flops, "device": H100_SXM.name,
            "device_url": H100_SXM.source, "prefill_s_at_peak": flops / H100_SXM.bf16_flops_per_s}


def block_cost(record: dict[str, Any]) -> dict[str, Any]:
    """What one cached block holds and what computing it again costs: its bytes from the KV formula (every layer's
    keys and values for block_size positions), and block_size tokens at the prefill rate of the uncached
    shared-system run (its prefill seconds over its prefilled tokens); the shared system prompt in whole blocks."""
    config, shape = record["config"], record["model"]
    size, element = config["block_size"], BYTES_PER_ELEMENT[shape["dtype"]]
    server = record["workloads"]["shared_system"]["runs"][run_key("off", "fcfs", "holds")]["server"]
    shared = common_prefix(*(session["prompt"] for session in record["workloads"]["shared_system"]["sessions"]))
    per_token = server["prefill_seconds"] / server["prefill_tokens"]
    one = block_bytes(CacheFormat(shape["dtype"]), shape["layers"], size, shape["kv_heads"], shape["head_dim"])
    return {"element_bytes": element, "bytes": one, "prefill_s_per_token": per_token, "prefill_s": per_token * size,
            "shared_head_tokens": shared, "shared_head_blocks": shared // size,
            "shared_head_bytes": shared // size * one, "shared_head_prefill_s": shared // size * size * per_token}


def work(run: dict[str, Any]) -> tuple[int, int]:
    """What a run computed: prompt tokens found cached and prompt tokens prefilled, over all its requests."""
    cached = sum(r["cached_tokens"] for r in run["requests"])
    return cached, sum(r["prompt_tokens"] for r in run["requests"]) - cached


def per_request(run: dict[str, Any], off: dict[str, Any]) -> dict[str, float | int]:
    """Each request's time to first token in ``run`` over the same request's (request_key) in the uncached run
    ``off``: their median, middle half and count (labkit.summary.paired, one 'round' per request). Paired by request,
    not by time: the two runs ran one after the other, so what the machine did between them moves every ratio alike;
    the spread is the requests'."""
    before = by_request(off, "ttft_s")
    pairs = [(r["ttft_s"], before[request_key(r)]) for r in run["requests"] if request_key(r) in before]
    return paired([on for on, _ in pairs], [without for _, without in pairs])


def same_work(runs: dict[str, Any], pool: str) -> dict[str, Any]:
    """The cached runs in ``pool`` that did the work the hash chain did first come (the same tokens found, the same
    prefilled): how many, and in how many the middle half of the requests' TTFTs lay wholly below the uncached
    run's, overlapped it, or lay wholly above (halves_below); their medians' range beside the uncached median. A
    verdict that held in one of them only is one run's."""
    off = runs[run_key("off", "fcfs", pool)]
    done = work(runs[run_key("hash", "fcfs", pool)])
    alike = [runs[run_key(caching, order, pool)] for caching in ("hash", "radix") for order in ORDERS
             if work(runs[run_key(caching, order, pool)]) == done]
    verdicts = [halves_below(ttfts(run), ttfts(off)) for run in alike]
    medians = [percentile(ttfts(run), 0.5) for run in alike]
    return {"runs": len(alike), "below": verdicts.count(True), "overlap": verdicts.count(None),
            "above": verdicts.count(False), "ttft_p50_min_s": min(medians), "ttft_p50_max_s": max(medians),
            "off_ttft_p50_s": percentile(ttfts(off), 0.5)}


def queue(runs: dict[str, Any]) -> dict[str, Any]:
    """How much prefill the uncached run (first come, the pool that holds everything) needed in all against the span
    over which its requests were sent, and the same for the hash chain's run: the server's own prefill seconds
    (time the worker spent in prefills, no request advancing meanwhile). One worker cannot prefill before the first
    request arrives, so when the last one arrives at least the prefill seconds less the span are still to do: work
    requests wait behind. Where the record times each request's admission (``waited_s``), the medians of its wait
    and of the rest of its time to first token (its own prefill, and the first token) for both runs."""
    off, cached = runs[run_key("off", "fcfs", "holds")], runs[run_key("hash", "fcfs", "holds")]
    sent = [r["sent_s"] for r in off["requests"]]
    span, prefill = max(sent) - min(sent), off["server"]["prefill_seconds"]
    left = max(0.0, prefill - span)  # one worker: by the last arrival it can have prefilled for the span at most
    found = {"requests": len(sent), "arrival_span_s": span, "off_prefill_s": prefill,
             "off_prefilled_tokens": work(off)[1], "cached_prefill_s": cached["server"]["prefill_seconds"],
             "cached_prefilled_tokens": work(cached)[1], "off_prefill_left_at_last_arrival_min_s": left,
             "off_prefill_left_share_min": left / prefill if prefill else 0.0}
    if all("waited_s" in r for run in (off, cached) for r in run["requests"]):  # records that time the admission
        for name, entry in (("off", off), ("cached", cached)):
            waits = [r["waited_s"] for r in entry["requests"]]
            after = [r["ttft_s"] - r["waited_s"] for r in entry["requests"]]
            found[f"{name}_waited_p50_s"] = percentile(waits, 0.5)
            found[f"{name}_after_admission_p50_s"] = percentile(after, 0.5)
        # where most of the cut in the median came: the wait's fall against the rest's
        found["cut_mostly_in_queue"] = (found["off_waited_p50_s"] - found["cached_waited_p50_s"]
                                        > found["off_after_admission_p50_s"] - found["cached_after_admission_p50_s"])
    return found


def order_price(fcfs: dict[str, Any], ranked: dict[str, Any], head: int) -> dict[str, Any]:
    """What the cache-aware order did to the requests it ranks last, against first come (same cache, same pool):
    the requests that found no more than the head every prompt shares under longest prefix first (``head_only``),
    and the others (``more``). Per group: how many, their TTFTs' median under each order, and whether the middle
    half under longest prefix first lay wholly below first come's (True), above (False) or overlapped (None; also
    where a group is empty); of the head-only requests, the one whose TTFT rose most, its TTFT under each order
    (None where none rose)."""
    before = by_request(fcfs, "ttft_s")
    groups: dict[str, tuple[list[float], list[float]]] = {"head_only": ([], []), "more": ([], [])}
    for r in ranked["requests"]:
        first, then = groups["head_only" if r["cached_tokens"] <= head else "more"]
        first.append(before[request_key(r)])
        then.append(r["ttft_s"])
    price: dict[str, Any] = {}
    for name, (first, then) in groups.items():
        price[f"{name}_requests"] = len(then)
        for order, times in (("fcfs", first), ("lpf", then)):
            price[f"{name}_{order}_p50_s"] = percentile(times, 0.5) if times else None
        price[f"{name}_lower"] = halves_below(then, first) if then else None
    rises = [(later - earlier, earlier, later) for earlier, later in zip(*groups["head_only"]) if later > earlier]
    _, price["head_only_most_delayed_fcfs_s"], price["head_only_most_delayed_lpf_s"] = max(rises, default=(0, None, None))
    return price


def order_groups(workload: dict[str, Any], run: dict[str, Any]) -> dict[str, Any] | None:
    """Few-shot only: the tokens found cached by requests whose examples are in the shared order (the first of them,
    which found nothing to share, apart) and by those in an order of their own (None for a workload whose sessions
    carry no order)."""
    if not all("canonical" in s["note"] for s in workload["sessions"]):
        return None
    found: dict[bool, list[int]] = {True: [], False: []}
    for r in sorted(run["requests"], key=lambda r: r["sent_s"]):
        found[bool(workload["sessions"][r["session"]]["note"]["canonical"])].append(r["cached_tokens"])
    shared, own = found[True], found[False]
    return {"shared_order_requests": len(shared), "shared_order_first": shared[0],
            "shared_order_later_min": min(shared[1:]), "shared_order_later_max": max(shared[1:]),
            "own_order_requests": len(own), "own_order_min": min(own), "own_order_max": max(own)}


def check_invariants(record: dict[str, Any], source: str) -> None:
    check_side_channel(record, source)
    for name, workload in record["workloads"].items():
        for key, run in workload["runs"].items():
            where = ("workloads", name, "runs", key)
            prompts = prompts_sent(workload, run)
            for number, r in enumerate(run["requests"]):
                if len(prompts[request_key(r)]) != r["prompt_tokens"]:
                    refuse(source, (*where, "requests", number, "prompt_tokens"),
                           f"is {r['prompt_tokens']}, but the workload and the replies rebuild a prompt of "
                           f"{len(prompts[request_key(r)])} tokens")
            prefilled = sum(r["prompt_tokens"] - r["cached_tokens"] for r in run["requests"])
            if run["server"]["prefill_tokens"] != prefilled:
                refuse(source, (*where, "server", "prefill_tokens"),
                       f"is {run['server']['prefill_tokens']}, but its requests prefilled {prefilled} tokens")
            if run["server"]["num_used_blocks"] != 0:
                refuse(source, (*where, "server", "num_used_blocks"), "blocks were still in use after the run")
            if (run["caching"] == "off") != (run["prefix"] is None):
                refuse(source, (*where, "prefix"), "prefix metrics must be present exactly when caching is on")


def derive(record: dict[str, Any]) -> Figures:
    figures = Figures()
    block = record["config"]["block_size"]
    evicting: list[dict[str, Any]] = []  # each workload and order in the pool that forces eviction, both indexes
    for name, workload in record["workloads"].items():
        runs = workload["runs"]
        for key, run in runs.items():
            figures.add_each(("workloads", name, "runs", key, "figures"), run_figures(run),
                             "its requests and its prefix metrics")
        off = runs[run_key("off", "fcfs", "holds")]
        first = [len(s["prompt"]) for s in workload["sessions"]]
        head = common_prefix(*(s["prompt"] for s in workload["sessions"]))
        summary: dict[str, Any] = {
            "shared_head_tokens": head, "shared_head_whole_block_tokens": head // block * block,
            "predicted_hit_rate": predicted_hits(workload, off, block) / sum(r["prompt_tokens"] for r in off["requests"]),
            "predicted_token_hit_rate": (predicted_hits(workload, off, block, whole_blocks=False)
                                         / sum(r["prompt_tokens"] for r in off["requests"])),
            "requests": len(off["requests"]), "first_prompt_tokens_min": min(first),
            "first_prompt_tokens_max": max(first)}
        groups = order_groups(workload, runs[run_key("hash", "fcfs", "holds")])
        if groups is not None:
            summary["order_groups"] = groups
        differ = []
        for pool in POOLS:
            off = runs[run_key("off", "fcfs", pool)]
            outputs = by_request(off, "output")
            for caching in ("hash", "radix"):
                for order in ORDERS:
                    run = runs[run_key(caching, order, pool)]
                    key = run_key(caching, order, pool)
                    summary[f"{key}_ttft_p50_over_off"] = (percentile(ttfts(run), 0.5) / percentile(ttfts(off), 0.5))
                    summary[f"{key}_ttft_over_off_per_request"] = per_request(run, off)
                    summary[f"{key}_ttft_lower"] = halves_below(ttfts(run), ttfts(off))
                    summary[f"{key}_outputs_equal"] = all(outputs.get(request_key(r)) == r["output"]
                                                         for r in run["requests"])
            for caching in ("hash", "radix"):  # the cache-aware order against first come, same cache and pool
                fcfs, lpm = (runs[run_key(caching, order, pool)] for order in ORDERS)
                summary[f"{caching}-{pool}_longest_prefix_ttft_lower"] = halves_below(ttfts(lpm), ttfts(fcfs))
            for order in ORDERS:
                hits = [sum(r["cached_tokens"] for r in runs[run_key(c, order, pool)]["requests"])
                        for c in ("hash", "radix")]
                summary[f"indexes_agree_{order}_{pool}"] = hits[0] == hits[1]
                if hits[0] != hits[1]:
                    differ.append({"order": order, "pool": pool, "hash_hit_tokens": hits[0], "radix_hit_tokens": hits[1]})
                if pool == "evicts":
                    evicted = [(runs[run_key(c, order, pool)]["prefix"] or {}).get("evictions", 0)
                               for c in ("hash", "radix")]
                    evicting.append({"workload": name, "order": order, "hash_evictions": evicted[0],
                                     "radix_evictions": evicted[1], "hash_hit_tokens": hits[0],
                                     "radix_hit_tokens": hits[1]})
            summary[f"same_work_{pool}"] = same_work(runs, pool)
        summary["indexes_differ"] = differ
        summary["queue"] = queue(runs)
        for caching in ("hash", "radix"):
            summary[f"{caching}_order_price"] = order_price(
                runs[run_key(caching, "fcfs", "evicts")], runs[run_key(caching, "longest-prefix", "evicts")],
                summary["shared_head_whole_block_tokens"])
        figures.add_each(("workloads", name, "figures"), summary, "its runs")
    parted = [e for e in evicting
              if (e["hash_evictions"], e["hash_hit_tokens"]) != (e["radix_evictions"], e["radix_hit_tokens"])]
    figures.add_each(("indexes",), {"evicting_settings": len(evicting), "evicting_parted": parted},
                     "the runs in the pool that forces eviction")
    figures.add_each(("block",), block_cost(record), "the model's shape and the uncached shared-system run")
    figures.add_each(("accelerator",), accelerator(), "the published model configuration and the datasheet")
    side_channel_figures(record, figures)
    return figures

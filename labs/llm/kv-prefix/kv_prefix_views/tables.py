"""The workloads, the warm-against-cold check, each workload's runs, the two indexes and the two orders."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kv_prefix.figures import QUEUE_MOSTLY, run_key
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_percent, join, plural

from .common import CACHING, NAMES, ORDER, POOL, one_time, run, summary, times

SHORT_ORDER = {"fcfs": "fcfs", "longest-prefix": "lpf"}  # the runs tables' narrow first column


def workloads_view(record: dict[str, Any]) -> Block:
    rows = []
    for name, workload in record["workloads"].items():
        s = summary(record, name)
        rows.append((NAMES[name], f"{len(workload['sessions'])} sessions, {s['requests']} requests",
                     f"{s['first_prompt_tokens_min']:,}–{s['first_prompt_tokens_max']:,}",
                     f"{workload['pools']['holds']:,}", f"{workload['pools']['evicts']:,}"))
    config = record["config"]
    return Block(tables=[Table(["workload", "traffic", "first prompt, tokens", "pool that holds it, blocks",
                                "pool that forces eviction, blocks"], rows,
                               caption=f"A block holds {config['block_size']} positions of every layer's keys and "
                                       f"values. Sessions start {one_time(config['gap_s'])} apart; a chat's next "
                                       f"turn is sent when its reply ends; every reply stops at the end of its turn "
                                       f"or after {config['max_tokens']} tokens.")])


def block_cost_view(record: dict[str, Any]) -> Block:
    """A block's bytes from the KV formula, and what computing it again costs at the uncached run's prefill rate."""
    b, model, size = record["block"], record["model"], record["config"]["block_size"]
    return Block(paragraphs=[
        f"Here one block holds 2 (keys and values) × {model['layers']} layers × {model['kv_heads']} key/value heads × "
        f"{model['head_dim']} × {b['element_bytes']} bytes ({model['dtype']}) × {size} positions = {b['bytes']:,} "
        f"bytes. The shared system prompt's common {b['shared_head_tokens']:,} tokens fill {b['shared_head_blocks']} "
        f"whole blocks, {b['shared_head_bytes'] / 1e6:.1f} MB, which the uncached run prefilled at "
        f"{b['prefill_s_per_token'] * 1e3:.2f} ms a token: about {one_time(b['shared_head_prefill_s'])} of "
        f"prefill that every hit on them saves. An evicted block that a later prompt asks for again costs its own "
        f"prefill, about {one_time(b['prefill_s'])}, and that of every block after it in the prefix: a lookup "
        f"stops at the first miss."])


def equivalence_view(record: dict[str, Any]) -> Block:
    """Warm against cold under each index, said once where both indexes gave the same comparison."""
    checked = record["equivalence"]

    def said(c: dict[str, Any]) -> str:
        return (f"the request found {c['cached_tokens']} of its {c['prompt_tokens']} prompt tokens cached, and over "
                f"{c['steps']} rows of logits (its first token's and each decode step's) the largest |warm − cold| "
                f"was {c['max_abs_difference']:.1e}, where the tolerance allows {c['allowed_there']:.1e}")

    if checked["hash"] == checked["radix"]:
        parts = f"under either index (the same blocks, the same numbers), {said(checked['hash'])}"
    else:
        parts = "; ".join(f"under the {CACHING[index]}, {said(checked[index])}" for index in ("hash", "radix"))
    tolerance = checked["tolerance"]
    return Block(paragraphs=[f"On the trained model in float32, {parts} (atol {tolerance['atol']:g} + rtol "
                             f"{tolerance['rtol']:g} × |cold|, the serving lab's trained float32 tolerance). Both "
                             "sides multiply by one kernel at every row count, so that the comparison is about what "
                             "the cache holds: two kernels round float32 sums differently, and a warm prefill's few "
                             "rows and a cold one's many may otherwise take different ones. The benchmark times "
                             "nothing unless this holds."])


def runs_view(workload: str, legend: bool = False) -> Callable[[dict[str, Any]], Block]:
    """A workload's runs, one per row; ``legend``: the caption explains the columns (the page's first runs table)."""
    def view(record: dict[str, Any]) -> Block:
        entries = list(record["workloads"][workload]["runs"].values())
        # every time in the table in one unit and precision: the medians, then the 99th percentiles
        shown = times([e["figures"]["ttft_p50_s"] for e in entries] + [e["figures"]["ttft_p99_s"] for e in entries])
        medians, slowest = shown[:len(entries)], shown[len(entries):]
        rows = []
        for entry, median, p99 in zip(entries, medians, slowest):
            f = entry["figures"]
            setting = "off" if entry["caching"] == "off" else f"{entry['caching']}, {SHORT_ORDER[entry['order']]}"
            rows.append((setting, entry["pool"], format_percent(f["hit_rate"]), f"{f['prefilled_tokens']:,}",
                         median, p99, over_off(record, workload, entry),
                         f"{f['output_tokens_per_s']:.1f}", f"{entry['server']['peak_running']:,}",
                         f"{f['evictions']:,}", f"{f['cached_blocks_peak']:,}"))
        return Block(tables=[Table(
            ["cache", "pool", "hits", "prefilled", "p50", "p99", "÷ off", "tok/s", "running", "evicted", "cached"],
            rows,
            caption=f"{NAMES[workload].capitalize()}: one run per row, {summary(record, workload)['requests']} "
                    f"requests each." + (LEGEND if legend else " The columns are those of the shared-system table."))])
    return view


def over_off(record: dict[str, Any], workload: str, entry: dict[str, Any]) -> str:
    """A cached run's per-request time to first token over the uncached run's in the same pool: the median ratio
    and its middle half ('—' for the uncached run itself)."""
    if entry["caching"] == "off":
        return "—"
    key = run_key(entry["caching"], entry["order"], entry["pool"])
    ratio = summary(record, workload)[f"{key}_ttft_over_off_per_request"]
    return f"{ratio['median']:.2f} ({ratio['low']:.2f}–{ratio['high']:.2f})"


LEGEND = (" Cache: off, the hash chain or the radix tree, first come (fcfs) or longest cached "
          "prefix first (lpf). Pool: holds the working set, or evicts. Hits: share of prompt tokens found "
          "cached; prefilled: prompt tokens computed. p50, p99: time to first token (the p99 of so few "
          "requests is their slowest one or close to it). ÷ off: each request's time to first token over the same "
          "request's in the uncached run of that pool, the median ratio and the middle half of them. Tok/s: every request's generated tokens over the "
          "run's span, which includes the sessions' fixed start times. Running: requests at once, at most (a "
          "small pool also runs fewer). Evicted, cached: blocks evicted, and cached at most.")


def indexes_view(record: dict[str, Any]) -> Block:
    """Where the hash chain and the radix tree found the same cached tokens, and where (and by how much) they did not;
    then, in the pool that forces eviction, whether they evicted as many blocks and found as many tokens."""
    differ = [f"{NAMES[name]}, {ORDER[e['order']]}, in the pool that {POOL[e['pool']]}: the hash chain found "
              f"{e['hash_hit_tokens']:,} cached tokens, the tree {e['radix_hit_tokens']:,}"
              for name in record["workloads"] for e in summary(record, name)["indexes_differ"]]
    with_room = all(value for name in record["workloads"] for key, value in summary(record, name).items()
                    if key.startswith("indexes_agree_") and key.endswith("_holds"))
    said = ("Wherever the pool held every block, the two indexes found exactly the same cached tokens: both match "
            "whole blocks from position 0." if with_room else
            "The two indexes found different cached tokens even where the pool held every block (listed below).")
    said += (f" They parted in: {'; '.join(differ)}." if differ
             else " They found the same tokens in every run here, evicting or not.")
    return Block(paragraphs=[said, evictions_said(record)])


def evictions_said(record: dict[str, Any]) -> str:
    """Whether the two ways of choosing a victim parted in this record's evicting runs, and where."""
    indexes = record["indexes"]
    settings = plural(indexes["evicting_settings"], "setting")
    if not indexes["evicting_parted"]:
        return (f"Under eviction they coincided here: in each of the {settings} of workload and order run in the "
                f"pool that forces eviction, the hash chain and the tree evicted the same number of blocks and found "
                f"as many tokens cached. The record counts the blocks, not which ones.")
    parted = [f"{NAMES[e['workload']]}, {ORDER[e['order']]}: {e['hash_evictions']:,} blocks evicted and "
              f"{e['hash_hit_tokens']:,} tokens found by the hash chain, {e['radix_evictions']:,} and "
              f"{e['radix_hit_tokens']:,} by the tree" for e in indexes["evicting_parted"]]
    return (f"Under eviction they parted in {plural(len(parted), 'setting')} of the {settings} run in the pool that "
            f"forces eviction: {join(parted)}.")


def span(low: int, high: int) -> str:
    """'240' or '32–48' tokens."""
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def few_shot_view(record: dict[str, Any]) -> Block:
    groups = summary(record, "few_shot")["order_groups"]
    whole = summary(record, "few_shot")["shared_head_whole_block_tokens"]
    head = (f", the whole blocks of the {summary(record, 'few_shot')['shared_head_tokens']}-token head every request "
            f"shares" if groups["own_order_min"] == groups["own_order_max"] == whole else "")
    predicted = summary(record, "few_shot")["predicted_hit_rate"]
    measured = run(record, "few_shot", "hash")["figures"]["hit_rate"]
    return Block(paragraphs=[
        f"{groups['shared_order_requests']} of the requests list the examples in one order, "
        f"{groups['own_order_requests']} each in an order of its own. With every block kept (hash chain, first come), "
        f"the first request in the shared order found {groups['shared_order_first']:,} tokens cached and the later "
        f"ones {span(groups['shared_order_later_min'], groups['shared_order_later_max'])} each; a request in its own "
        f"order found {span(groups['own_order_min'], groups['own_order_max'])}{head}. The examples are the same; a "
        f"prefix cache matches tokens from position 0, so a reordered list shares only the head in front of it. The "
        f"prefix rule (each request finds its longest common prefix with an earlier one, in whole blocks, if every "
        f"earlier request's blocks are cached by then) gives at most {format_percent(predicted)}; the run found "
        f"{format_percent(measured)}."])


def order_view(record: dict[str, Any]) -> Block:
    """Longest prefix first against first come, in the pool that forces eviction: hit rates, and TTFT worded by
    whether the runs' middle halves part."""
    pairs = [(name, caching, *(run(record, name, caching, order, "evicts")["figures"]
                               for order in ("fcfs", "longest-prefix")))
             for name in record["workloads"] for caching in ("hash", "radix")]
    shown = iter(times([f[key] for _, _, *both in pairs for key in ("ttft_p50_s", "ttft_p99_s") for f in both]))
    rows = []
    for name, caching, fcfs, lpm in pairs:
        lower = summary(record, name)[f"{caching}-evicts_longest_prefix_ttft_lower"]
        verdict = {True: "lower in this run", False: "higher in this run", None: "within the spread"}[lower]
        p50 = f"{next(shown)} → {next(shown)} ({verdict})"
        p99 = f"{next(shown)} → {next(shown)}"
        rows.append((NAMES[name], CACHING[caching],
                     f"{format_percent(fcfs['hit_rate'])} → {format_percent(lpm['hit_rate'])}", p50, p99))
    return Block(tables=[Table(["workload", "cache", "hit rate", "TTFT p50", "TTFT p99"], rows,
                               caption="First come → longest cached prefix first, in the pool that forces eviction, "
                                       "one run each. 'Lower' or 'higher' only where the middle halves of the two "
                                       "runs' TTFTs do not overlap, and then of this run only.")])


def order_price_view(record: dict[str, Any]) -> Block:
    """The price beside the gain: under each index, the TTFTs of the requests that found no more than the head
    every prompt shares (the ones the cache-aware order ranks last) and of the others, first come → longest prefix
    first, in the pool that forces eviction; a verdict only where the groups' middle halves part. Where no request
    found more than the head, the order had nothing to rank but arrival: a difference there is the runs' own."""
    verdicts = {True: "lower in this run", False: "higher in this run", None: "within the spread"}
    groups = [(name, caching, summary(record, name)[f"{caching}_order_price"])
              for name in record["workloads"] for caching in ("hash", "radix")]
    keys = ["head_only_fcfs_p50_s", "head_only_lpf_p50_s", "head_only_most_delayed_fcfs_s",
            "head_only_most_delayed_lpf_s", "more_fcfs_p50_s", "more_lpf_p50_s"]
    shown = iter(times([price[key] for _, _, price in groups for key in keys if price[key] is not None]))
    rows, unranked = [], []
    for name, caching, price in groups:
        cells = {key: next(shown) for key in keys if price[key] is not None}
        head = (f"{cells['head_only_fcfs_p50_s']} → {cells['head_only_lpf_p50_s']} "
                f"({verdicts[price['head_only_lower']]})" if price["head_only_requests"] else "none")
        delayed = (f"{cells['head_only_most_delayed_fcfs_s']} → {cells['head_only_most_delayed_lpf_s']}"
                   if price["head_only_most_delayed_lpf_s"] is not None else "none waited longer")
        more = (f"{cells['more_fcfs_p50_s']} → {cells['more_lpf_p50_s']} ({verdicts[price['more_lower']]})"
                if price["more_requests"] else "none: the order had nothing to rank")
        rows.append((NAMES[name], CACHING[caching], f"{price['head_only_requests']}", head, delayed,
                     f"{price['more_requests']}", more))
        if not price["more_requests"] and price["head_only_lower"] is not None:
            unranked.append(f"{NAMES[name]}, {CACHING[caching]}")
    notes = ([f"Where no request found more than the head ({join(unranked)}), longest prefix first could rank by "
              f"arrival only, as first come does: that difference is the two runs' own variation."] if unranked else [])
    return Block(tables=[Table(
        ["workload", "cache", "found only the head", "their TTFT p50", "most delayed of them", "found more",
         "their TTFT p50"],
        rows, caption="First come → longest cached prefix first, in the pool that forces eviction. Found only the head: "
                      "requests that found no more than the head every prompt shares (in whole blocks), which the order "
                      "ranks last. 'Lower' or 'higher' only where a group's middle halves part. Most delayed: the request "
                      "whose time to first token rose most, with no verdict (one request has no spread).")], notes=notes)


def queue_view(record: dict[str, Any]) -> Block:
    """How much prefill the uncached shared-system run needed in all against the span its requests were sent
    over, beside the cached run's, and how much of it was at least still to do when the last request arrived: the
    queue the cut in time to first token partly clears, which the record cannot split from one request's own
    prefill."""
    q = summary(record, "shared_system")["queue"]
    spent, cached, spread, left = times([q["off_prefill_s"], q["cached_prefill_s"], q["arrival_span_s"],
                                         q["off_prefill_left_at_last_arrival_min_s"]])
    said = (f"Without the cache the server spent {spent} prefilling {q['off_prefilled_tokens']:,} prompt tokens for "
            f"{q['requests']} requests sent within {spread}; with the hash chain it prefilled "
            f"{q['cached_prefilled_tokens']:,} tokens in {cached}.")
    split = "off_waited_p50_s" in q
    if q["off_prefill_left_at_last_arrival_min_s"] > 0 and split:
        said += (f" One worker prefills, so when the last request arrived at least {left} of the uncached prefill "
                 f"was still to do.")
    elif q["off_prefill_left_at_last_arrival_min_s"] > 0:
        share = "much" if q["off_prefill_left_share_min"] >= QUEUE_MOSTLY else "part"
        said += (f" One worker prefills, so when the last request arrived at least {left} of the uncached prefill "
                 f"was still to do: requests waited behind each other's prefills, and {share} of the cut in time to "
                 f"first token is that queue clearing, not the cache shortening one request's own prefill.")
    else:
        said += (" Uncached, the prefill fitted within the span the requests arrived over, so the queue need not "
                 "have grown.")
    if split:
        waited, after, cached_waited, cached_after = times([
            q["off_waited_p50_s"], q["off_after_admission_p50_s"], q["cached_waited_p50_s"],
            q["cached_after_admission_p50_s"]])
        where = ("before admission, in the queue" if q["cut_mostly_in_queue"] else
                 "after admission, in the request's own prefill and the prefills it shares a call with")
        said += (f" Split at admission (medians, which need not add up to the median time to first token): "
                 f"uncached, a request waited {waited} in the queue, then {after} to its first token; with the cache, "
                 f"{cached_waited}, then {cached_after}. Most of the cut in the median came {where}.")
    else:
        said += (" Each request's time to first token holds its wait and its own prefill together; this record does "
                 "not time them apart, so it cannot say how the cut splits between the two.")
    return Block(paragraphs=[said])


def unshared_view(record: dict[str, Any]) -> Block:
    """What blocks nobody shares cost the ones that are shared, in the pool that forces eviction (few-shot, hash
    chain): the hit rate and evictions first come against with room for everything, and under the cache-aware
    order."""
    holds, evicts, ranked = (run(record, "few_shot", "hash", order, pool)["figures"] for order, pool in
                             (("fcfs", "holds"), ("fcfs", "evicts"), ("longest-prefix", "evicts")))
    return Block(paragraphs=[
        f"Blocks that no later request shares still take room. In the pool that forces eviction, the few-shot "
        f"requests found {format_percent(evicts['hit_rate'])} of their prompt tokens cached first come "
        f"({evicts['evictions']:,} blocks evicted), against {format_percent(holds['hit_rate'])} with room for "
        f"everything. Admitting the longest cached prefix first, the same small pool found "
        f"{format_percent(ranked['hit_rate'])} ({ranked['evictions']:,} evicted)."])


def partial_view(record: dict[str, Any]) -> Block:
    """What matching single tokens would add over whole blocks: the prefix rule's hit rate both ways, per workload."""
    parts = [f"{NAMES[name]} {format_percent(summary(record, name)['predicted_hit_rate'])} in whole blocks against "
             f"{format_percent(summary(record, name)['predicted_token_hit_rate'])} token by token"
             for name in record["workloads"]]
    return Block(paragraphs=[f"By the prefix rule on this page's workloads: {'; '.join(parts)}. The difference is "
                             f"each shared prefix's last partial block, at most {record['config']['block_size'] - 1} "
                             f"tokens a request."])

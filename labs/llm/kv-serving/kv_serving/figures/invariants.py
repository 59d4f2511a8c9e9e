"""What the serving record's raw data must satisfy before any figure is derived from them.

Each is a relation between independent measurements (a server's counters against what its clients
received, a peak against its /metrics samples) or the bounds a figure the record cannot recompute exactly
must lie within (a peak between two samples, percentiles of gaps the record does not store). Deriving
these would overwrite a measurement, so they are checked, never filled; each refusal names its JSON path.
"""

from __future__ import annotations

from typing import Any

from kv_serving.client_stats import OUTCOMES
from labkit.figures import refuse
from labkit.records import JsonPath
from llm_models.serving.dtypes import (
    TOLERANCES,
    TRAINED_TOLERANCES,
    difference_bound,
    faster_dtype,
    probe_medians,
    row_scaled,
    tie_bound,
)
from llm_models.serving.sizes import (
    blocks_for,
    budget_blocks,  # the byte server's budget, as the benchmark sized it
)

from .formulas import runs, trained_runs

SLACK_S = 1e-6  # latencies are sums of perf_counter differences: allow their rounding
MEMORY_FAILURE = "out of KV memory"  # how the scheduler words a failure for memory (scheduler._admit)
POLICIES = ["kv_budget_bytes", "count_safe", "count_average"]  # the admission experiment's servers, in order
DISCONNECTS = [True, False]  # the cancellation experiment's servers: disconnects honoured, then ignored


def check_invariants(record: dict[str, Any], source: str) -> None:
    names = [p["name"] for p in record["admission"]["policies"]]
    if names != POLICIES:
        refuse(source, ("admission", "policies"), f"are {names}, but this lab measures {POLICIES}")
    honour = [m["honor_disconnect"] for m in record["cancellation"]["modes"]]
    if honour != DISCONNECTS:
        refuse(source, ("cancellation", "modes"), f"honour disconnects {honour}, but this lab measures {DISCONNECTS}")
    check_config_and_gate(record, source)
    check_pools(record, source)
    for path, run in runs(record):
        check_client_side(run, path, source)
        check_server_side(run, path, source)
    check_admission(record, source)
    check_cancellation(record, source)
    check_trained(record, source)
    check_memory(record, source)
    serial, highest = record["rates"]["serial"], max(p["rate"] for p in record["rates"]["points"])
    if serial["rate"] != highest:
        refuse(source, ("rates", "serial", "rate"), f"is {serial['rate']}, but the serial run is made at the "
               f"sweep's highest rate, {highest}")
    if serial["server"]["peak_running"] > 1:
        refuse(source, ("rates", "serial", "server", "peak_running"), f"is {serial['server']['peak_running']}, but "
               f"the serial server admits one request at a time (--max-running 1)")


def check_dtype(record: dict[str, Any], source: str) -> None:
    """The model ran in the dtype the choice names, was gated with that dtype's tolerance, and an automatic
    choice took the dtype whose weight multiplies were faster."""
    dtype, choice = record["config"]["model"]["dtype"], record["config"]["benchmark"]["dtype_choice"]
    if choice["chosen"] != dtype:
        refuse(source, ("config", "benchmark", "dtype_choice", "chosen"), f"is {choice['chosen']!r}, but the model "
               f"ran in {dtype!r} ($.config.model.dtype)")
    if record["tolerance"] != TOLERANCES[dtype]:
        refuse(source, ("tolerance",), f"is {record['tolerance']}, but the gate's tolerance in {dtype} is {TOLERANCES[dtype]}")
    if choice["how"].startswith("auto"):
        medians, faster = probe_medians(choice["probes"]), faster_dtype(choice["probes"])
        if sorted(medians) != sorted(TOLERANCES) or faster != dtype:
            refuse(source, ("config", "benchmark", "dtype_choice", "chosen"), f"is {dtype!r}, but the probes' medians "
                   f"{ {name: round(value) for name, value in medians.items()} } make {faster!r} the faster")


def check_config_and_gate(record: dict[str, Any], source: str) -> None:
    check_dtype(record, source)
    config = record["config"]["benchmark"]
    budget = budget_blocks(config["num_blocks"], config["byte_budget_share"])  # raw data only: the share, the pool
    if not budget < config["num_blocks"]:
        refuse(source, ("config", "benchmark", "byte_budget_blocks"), f"= {budget} (num_blocks x byte_budget_share) "
               f"is not below the pool's {config['num_blocks']} blocks: the allocator alone would keep reservations "
               f"within such a budget")
    tolerance, gate = record["tolerance"], record["equivalence"]
    if gate["within_tolerance"] is not True:
        refuse(source, ("equivalence", "within_tolerance"), f"is {gate['within_tolerance']!r}: a run whose "
               f"equivalence gate failed measures nothing")
    bound = tie_bound(tolerance, gate["max_abs_reference"])
    for index, tie in enumerate(gate["ties"]):
        if tie["margin"] > bound:
            refuse(source, ("equivalence", "ties", index, "margin"), f"= {tie['margin']} is beyond the {bound} by "
                   f"which rounding within the tolerance can part two greedy choices")
    if gate["max_abs_diff"] > difference_bound(tolerance, gate["max_abs_reference"]):
        refuse(source, ("equivalence", "max_abs_diff"), f"= {gate['max_abs_diff']} exceeds atol + rtol x max |reference|")
    for index, row in enumerate(record["step_times"]):
        for path, timings in ((("step_times", index), row), (("step_times", index, "weights"), row["weights"])):
            if len(timings["durations_ns"]) != config["repeats"]:
                refuse(source, (*path, "durations_ns"), f"holds {len(timings['durations_ns'])} timings, config says "
                       f"repeats = {config['repeats']}")


def check_pools(record: dict[str, Any], source: str) -> None:
    """Every server reports the pool the config says it was started with."""
    config = record["config"]["benchmark"]
    if record["admission"]["pool_blocks"] != config["num_blocks"]:
        refuse(source, ("admission", "pool_blocks"), f"is {record['admission']['pool_blocks']}, but "
               f"$.config.benchmark.num_blocks is {config['num_blocks']}")
    for path, run in runs(record):
        if path[0] == "trained":
            key = "admission_blocks" if path[1] == "admission" else "sweep_blocks"
            if run["server"]["num_blocks"] != record["trained"][key]:
                refuse(source, (*path, "server", "num_blocks"), f"is {run['server']['num_blocks']}, but the server "
                       f"was started with $.trained.{key} = {record['trained'][key]}")
            continue
        key = "sweep_blocks" if path[0] == "rates" else "num_blocks"
        if run["server"]["num_blocks"] != config[key]:
            refuse(source, (*path, "server", "num_blocks"), f"is {run['server']['num_blocks']}, but the server was "
                   f"started with $.config.benchmark.{key} = {config[key]}")


def check_client_side(run: dict[str, Any], path: JsonPath, source: str) -> None:
    for index, r in enumerate(run["requests"]):
        stopped = r.get("finish_reason") == "stop"  # a text model's end of turn or stop string, before max_tokens
        if r["outcome"] == "completed" and (r["tokens"] > r["max_tokens"] or not stopped and r["tokens"] != r["max_tokens"]):
            refuse(source, (*path, "requests", index, "tokens"), f"is {r['tokens']}, but a completed request runs "
                   f"to its max_tokens {r['max_tokens']}")
        if r["ttft_s"] is not None and r["e2e_s"] is not None and r["ttft_s"] > r["e2e_s"] + SLACK_S:
            refuse(source, (*path, "requests", index, "ttft_s"), f"= {r['ttft_s']} is after the request's end "
                   f"({r['e2e_s']})")
    check_gaps(run["summary"]["itl_s"], [r for r in run["requests"] if r["outcome"] == "completed"],
               (*path, "summary", "itl_s"), source)


def check_gaps(itl: dict[str, float] | None, done: list[dict[str, Any]], path: JsonPath, source: str) -> None:
    """The gaps themselves are not stored (thousands per run); what the requests' rows imply about them is
    checked: their number, the order of the percentiles, and their sum, which cannot exceed the time from
    each completed request's first token to its end."""
    gaps = sum(r["tokens"] - 1 for r in done if r["tokens"] > 0)
    if (itl or {"count": 0})["count"] != gaps:
        refuse(source, (*path, "count"), f"should be {gaps}: one gap per token after the first, completed requests")
    if itl is None:
        return
    if not itl["p50"] <= itl["p90"] <= itl["p99"]:
        refuse(source, (*path, "p90"), f"percentiles out of order: p50 {itl['p50']}, p90 {itl['p90']}, p99 {itl['p99']}")
    span = sum(r["e2e_s"] - r["ttft_s"] for r in done if r["ttft_s"] is not None and r["e2e_s"] is not None)
    if itl["mean"] * itl["count"] > span + SLACK_S * max(1, len(done)):
        refuse(source, (*path, "mean"), f"= {itl['mean']} makes the {itl['count']} gaps sum to "
               f"{itl['mean'] * itl['count']:.6g} s, more than the {span:.6g} s between the completed requests' first "
               f"tokens and ends")
    if itl["count"] > 1 and itl["p50"] > 2 * itl["mean"] + SLACK_S:  # at least half the gaps are >= p50
        refuse(source, (*path, "p50"), f"= {itl['p50']} is more than twice the mean {itl['mean']}: half the gaps "
               f"cannot exceed it")


def check_server_side(run: dict[str, Any], path: JsonPath, source: str) -> None:
    server, requests = run["server"], run["requests"]
    clients = {outcome: sum(r["outcome"] == outcome for r in requests) for outcome in OUTCOMES}  # from the rows:
    # a hand-edited summary is refused by the derived figures, at its own path
    p = (*path, "server")
    for name in ("peak_used_blocks", "budget_blocks"):
        if not server[name] <= server["num_blocks"]:
            refuse(source, (*p, name), f"= {server[name]} exceeds the pool's {server['num_blocks']}")
    samples = run["occupancy"]
    for index, (before, after) in enumerate(zip(samples, samples[1:])):
        if after["t_s"] < before["t_s"]:
            refuse(source, (*path, "occupancy", index + 1, "t_s"), f"= {after['t_s']} is before the previous sample "
                   f"({before['t_s']})")
    for field, peak in (("used_blocks", "peak_used_blocks"), ("running", "peak_running")):
        highest = max(s[field] for s in samples)
        if highest > server[peak]:
            refuse(source, (*p, peak), f"is {server[peak]}, but a /metrics sample of this run saw {highest}")
    budgets = {s["budget_blocks"] for s in samples}
    if budgets != {server["budget_blocks"]}:
        refuse(source, (*path, "occupancy"), f"samples report budgets {sorted(budgets)}, the server "
               f"{server['budget_blocks']}")
    steps, rows = server["decode_steps"], server["decode_rows"]
    # a reply ended by the model's end-of-turn token does not list that token (finish_reason "stop": the loads set no
    # stop strings), though the server generated it
    generated = [r["tokens"] + (r.get("finish_reason") == "stop") for r in requests]
    received = sum(generated)
    memory = sum(r["outcome"] == "failed" and MEMORY_FAILURE in (r["error"] or "") for r in requests)
    counted = [("failed_for_memory", memory, "the failed requests' errors")]
    if clients["left"] == 0 and clients["failed"] == memory:
        # nobody left and no connection failed: the server's counts are exactly what the clients saw
        counted += [("tokens_generated", received, "the tokens its clients received (and each end-of-turn token)"),
                    ("completed", clients["completed"], "its clients' completed requests"),
                    ("prefills", sum(n > 0 for n in generated), "its clients' first tokens"),
                    ("decode_rows", sum(n - 1 for n in generated if n > 0), "its clients' tokens after the first")]
        if server["cancelled"] or server["decode_rows_after_disconnect"] or server["tokens_after_disconnect"]:
            refuse(source, (*p, "cancelled"), "or another count of work for departed clients is not 0 in a run "
                   "where no client left")
    # every computed row is either streamed or dropped; rows for departed clients are streamed only if ignored
    counted += [("rows_dropped", rows + server["prefills"] - server["tokens_generated"],
                 "decode_rows + prefills - tokens_generated"),
                ("tokens_after_disconnect", server["decode_rows_after_disconnect"]
                 + server["prefills_after_disconnect"] - server["rows_dropped"],
                 "decode_rows_after_disconnect + prefills_after_disconnect - rows_dropped")]
    for name, count, how in counted:
        if server[name] != count:
            refuse(source, (*p, name), f"is {server[name]}, but {how} give {count}")
    if rows < steps:
        refuse(source, (*p, "decode_rows"), f"= {rows} is below decode_steps {steps}: every step decodes at least "
               f"one request")
    if rows > steps * server["peak_running"]:
        refuse(source, (*p, "decode_rows"), f"= {rows} exceeds {steps} steps x the {server['peak_running']} requests "
               f"that ever ran at once")
    longest = max((r["tokens"] - 1 for r in requests), default=0)
    if steps < longest:
        refuse(source, (*p, "decode_steps"), f"= {steps}, but a client received {longest + 1} tokens, one per step "
               f"after the first")
    departed = server["decode_rows_after_disconnect"]
    if not min(departed, 1) <= server["decode_steps_with_departed"] <= min(departed, steps):
        refuse(source, (*p, "decode_steps_with_departed"), f"= {server['decode_steps_with_departed']} is impossible "
               f"with {departed} such rows in {steps} steps")
    streamed = server["tokens_generated"] - server["tokens_after_disconnect"]  # to clients still there
    if received > streamed:
        refuse(source, (*p, "tokens_generated"), f"= {server['tokens_generated']} minus "
               f"{server['tokens_after_disconnect']} streamed after disconnects is less than the {received} tokens "
               f"clients received")


def check_trained(record: dict[str, Any], source: str) -> None:
    """The trained runs: the served prompts are the planned ones (the server's token counts equal the plan's), the
    serial run ran one at a time at the sweep's highest rate, and the gate held."""
    trained = record["trained"]
    for path, run in trained_runs(record):
        for index, r in enumerate(run["requests"]):
            if r["outcome"] == "completed" and r["prompt_tokens"] != trained["prompt_tokens"][r["index"]]:
                refuse(source, (*path, "requests", index, "prompt_tokens"), f"is {r['prompt_tokens']}, but prompt "
                       f"{r['index']} is {trained['prompt_tokens'][r['index']]} tokens ($.trained.prompt_tokens)")
    names = [p["name"] for p in trained["admission"]["policies"]]
    if names not in (POLICIES, POLICIES[:2]):  # two where the safe and the mean count are one (trained_load.plan)
        refuse(source, ("trained", "admission", "policies"), f"are {names}, but this lab measures {POLICIES}, or "
               f"{POLICIES[:2]} where the two counts are equal")
    serial, highest = trained["serial"], max(p["rate"] for p in trained["points"])
    if serial["rate"] != highest or serial["server"]["peak_running"] > 1:
        refuse(source, ("trained", "serial"), f"ran at {serial['rate']}/s with {serial['server']['peak_running']} "
               f"at once, but the serial run is one at a time at the sweep's highest rate, {highest}")
    gate, tolerance = trained["equivalence"], trained["tolerance"]
    if gate["within_tolerance"] is not True or tolerance != TRAINED_TOLERANCES[trained["model"]["dtype"]]:
        refuse(source, ("trained", "equivalence"), "did not hold within the tolerance of the trained model's dtype")
    if row_scaled(tolerance) and gate.get("max_row_steps", float("inf")) > tolerance["row_steps"]:
        refuse(source, ("trained", "equivalence", "max_row_steps"), f"= {gate.get('max_row_steps')}, but a gate by "
               f"bfloat16 steps at each row's scale holds only within {tolerance['row_steps']} of them")
    bound = tie_bound(tolerance, gate["max_abs_reference"])
    for index, tie in enumerate(gate["ties"]):
        if tie["margin"] > bound:
            refuse(source, ("trained", "equivalence", "ties", index, "margin"), f"= {tie['margin']} is beyond {bound}")
    check_client_steps(trained, source)
    check_batching_rounds(trained, source)
    check_chunked_prefill(trained, source)


def check_batching_rounds(trained: dict[str, Any], source: str) -> None:
    """Batched against one at a time: each side holds one burst per round, and no burst wrote more tokens than its
    requests may (requests x max_tokens)."""
    rounds = trained.get("batching_rounds")
    if rounds is None:
        return
    most = rounds["requests"] * rounds["max_tokens"]
    for side in ("batched", "serial"):
        for name in ("seconds", "tokens"):
            if len(rounds[side][name]) != rounds["rounds"]:
                refuse(source, ("trained", "batching_rounds", side, name), f"holds {len(rounds[side][name])} rounds, "
                       f"but the record ran {rounds['rounds']}")
        for index, tokens in enumerate(rounds[side]["tokens"]):
            if not 1 <= tokens <= most:
                refuse(source, ("trained", "batching_rounds", side, "tokens", index), f"is {tokens}, but a burst of "
                       f"{rounds['requests']} requests of at most {rounds['max_tokens']} tokens writes 1 to {most}")


SENT_SLACK_S = 1e-3  # the client's clock is read once per event: sub-millisecond rounding, not a late send


def check_chunked_prefill(trained: dict[str, Any], source: str) -> None:
    """Chunked prefill against whole: each round runs both servers, in the order the rounds rotate, each with the
    streams then the long prompt, every request completed with one gap fewer than its tokens."""
    section = trained.get("chunked_prefill")
    if section is None:
        return
    servers, count = ["whole", "chunked"], section["streams"] + 1
    for number, round_ in enumerate(section["rounds"]):
        at = ("trained", "chunked_prefill", "rounds", number)
        expected = [*servers[number % 2:], *servers[:number % 2]]
        if round_["order"] != expected:
            refuse(source, (*at, "order"), f"is {round_['order']}, but round {number} runs {expected}")
        for name in servers:
            run = round_["runs"][name]
            if len(run) != count:
                refuse(source, (*at, "runs", name), f"holds {len(run)} requests, but a run sends "
                       f"{section['streams']} streams and the long prompt")
            for index, request in enumerate(run):
                if request["outcome"] != "completed" or request["ttft_s"] is None:
                    refuse(source, (*at, "runs", name, index, "outcome"), f"is {request['outcome']!r} "
                           f"({request.get('error')}): every request of the comparison must complete")
                if len(request["itl_s"]) != request["tokens"] - 1:
                    refuse(source, (*at, "runs", name, index, "itl_s"), f"holds {len(request['itl_s'])} gaps for "
                           f"{request['tokens']} tokens")
            if any(len(run[index]["itl_s"]) == 0 for index in range(section["streams"])):
                refuse(source, (*at, "runs", name), "holds a stream of one token: it has no gap between tokens")
            last_first = max(r["sent_s"] + r["ttft_s"] for r in run[:section["streams"]])
            if run[-1]["sent_s"] < last_first + section["long_after_s"] - SENT_SLACK_S:
                refuse(source, (*at, "runs", name, section["streams"], "sent_s"),
                       f"is {run[-1]['sent_s']:.3f} s, but the long prompt is sent {section['long_after_s']:g} s after "
                       f"the last stream's first token, at {last_first:.3f} s")


def check_client_steps(trained: dict[str, Any], source: str) -> None:
    """What a client sees per token: every round holds tokens - 1 in-process steps, at most tokens - 1 client gaps
    (a reply may end early) and one time to first token, and each weight format's rows cover the solo steps'
    contexts."""
    client = trained.get("client_steps")
    if client is None:
        return
    contexts = list(dict.fromkeys(step["context"] for step in trained["solo_steps"]))
    for weights in client["server"]:
        found = [row["context"] for row in client["rows"] if row["weights"] == weights]
        if found != contexts:
            refuse(source, ("trained", "client_steps", "rows"), f"cover contexts {found} with {weights} weights, but "
                   f"the solo steps time {contexts}")
    strays = sorted({row["weights"] for row in client["rows"]} - set(client["server"]))
    if strays:
        refuse(source, ("trained", "client_steps", "rows"), f"hold {strays[0]} weights, which no server streamed")
    steps = client["tokens"] - 1
    for index, row in enumerate(client["rows"]):
        where = ("trained", "client_steps", "rows", index)
        for name in ("in_process_ns", "client_gaps_ns", "client_ttft_ns"):
            if len(row[name]) != client["rounds"]:
                refuse(source, (*where, name), f"holds {len(row[name])} rounds, but the record ran {client['rounds']}")
        if row["prompt_tokens"] != row["context"] - 1:
            refuse(source, (*where, "prompt_tokens"), f"is {row['prompt_tokens']}, but a prompt of context - 1 = "
                   f"{row['context'] - 1} tokens leaves the first decode step at the context")
        for round_index, durations in enumerate(row["in_process_ns"]):
            if len(durations) != steps:
                refuse(source, (*where, "in_process_ns", round_index), f"holds {len(durations)} steps, but each round "
                       f"times tokens - 1 = {steps}")
        for round_index, gaps in enumerate(row["client_gaps_ns"]):
            if not 2 <= len(gaps) <= steps:
                refuse(source, (*where, "client_gaps_ns", round_index), f"holds {len(gaps)} gaps, but a reply of at "
                       f"most {client['tokens']} tokens has 2 to {steps}")


def check_memory(record: dict[str, Any], source: str) -> None:
    """The memory section (where the record has one): one resident reading per prompt, every one positive, every
    length distinct and apart from the warm-up prompt's (each new to the process), the packed kernel's lengths first,
    a window after the settling prompts, and the run's own thread count and block size."""
    section = record.get("memory")
    if section is None:
        return
    lengths, rss, path = section["lengths"], section["rss_bytes"], ("memory",)
    if len(rss) != len(lengths):
        refuse(source, (*path, "rss_bytes"), f"holds {len(rss)} readings for {len(lengths)} prompts: one after each")
    low = [i for i, value in enumerate([section["rss_before_bytes"], *rss]) if value <= 0]
    if low:
        where = (*path, "rss_before_bytes") if low[0] == 0 else (*path, "rss_bytes", low[0] - 1)
        refuse(source, where, "is not positive: a running process holds some memory")
    seen = sorted({n for n in lengths if lengths.count(n) > 1})
    if seen or min(lengths) < 1:
        refuse(source, (*path, "lengths"), f"repeat {seen} or hold a prompt of no token: every prompt is a new, "
               f"non-empty length")
    if section["warmup_length"] in lengths:
        refuse(source, (*path, "warmup_length"), f"= {section['warmup_length']} is among the lengths: the warm-up "
               f"prompt's length is not one of the new ones")
    packed = [n <= section["packed_rows"] for n in lengths]
    if packed != sorted(packed, reverse=True):
        refuse(source, (*path, "lengths"), f"are not the prompts of at most {section['packed_rows']} rows first, then "
               f"the longer ones")
    if len(lengths) <= sum(packed) + section["settle"]:
        refuse(source, (*path, "settle"), f"= {section['settle']} leaves no prompt of more than "
               f"{section['packed_rows']} rows after the settling ones: the window is empty")
    config = record["config"]["benchmark"]
    for name in ("threads", "block_size"):
        if section[name] != config[name]:
            refuse(source, (*path, name), f"is {section[name]}, but the run's $.config.benchmark.{name} is {config[name]}")


def check_cancellation(record: dict[str, Any], source: str) -> None:
    for index, run in enumerate(record["cancellation"]["modes"]):
        s, p = run["server"], ("cancellation", "modes", index, "server")
        if run["honor_disconnect"]:
            if s["tokens_after_disconnect"]:
                refuse(source, (*p, "tokens_after_disconnect"), f"= {s['tokens_after_disconnect']}, but an honoured "
                       f"disconnect drops every row computed after it")
            if s["rows_dropped"] > s["cancelled"]:
                refuse(source, (*p, "rows_dropped"), f"= {s['rows_dropped']} exceeds the {s['cancelled']} cancelled "
                       f"requests: at most the step under way is lost for each")
        elif s["rows_dropped"] or s["cancelled"]:
            refuse(source, (*p, "rows_dropped"), "is not 0 (or cancelled is not), but this server ignores disconnects")


def check_admission(record: dict[str, Any], source: str) -> None:
    admission, config = record["admission"], record["config"]["benchmark"]
    size = config["block_size"]
    for index, run in enumerate(admission["policies"]):
        rows = sorted(run["requests"], key=lambda r: r["index"])
        need = [blocks_for(r["prompt_tokens"] + r["max_tokens"] - 1, size) for r in rows]
        if need != admission["request_blocks"]:
            refuse(source, ("admission", "policies", index, "requests"), "are not the workload whose block needs "
                   "the record lists")
        # the byte server reports its budget; a count server has none and reports its whole pool
        budget = budget_blocks(config["num_blocks"], config["byte_budget_share"])
        expected = budget if run["name"] == "kv_budget_bytes" else config["num_blocks"]
        if run["server"]["budget_blocks"] != expected:
            refuse(source, ("admission", "policies", index, "server", "budget_blocks"), f"is "
                   f"{run['server']['budget_blocks']}, but a {run['name']} server reports {expected}")

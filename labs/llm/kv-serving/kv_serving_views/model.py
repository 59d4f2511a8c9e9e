"""The article's model and pool sections: what one decode step costs here, the pool's bytes, the equivalence gate."""

from __future__ import annotations

from typing import Any

from llm_models.serving.dtypes import CHOSEN_BY_SUPPLIED_PROBES
from site_hooks.blocks import Block
from site_hooks.formatting import join, plural

MIB = 2**20


def model_cost_view(record: dict[str, Any]) -> Block:
    """What one request's decode step costs on the machine that made the record: the work a batch can share."""
    rows, config = record["step_times"], record["config"]["benchmark"]
    one = min(rows, key=lambda r: r["batch"])
    model, cpu = record["config"]["model"], record["environment"]["cpu"]
    cores = cpu["logical_cores"]
    paragraphs = [
        f"The record was made on {cpu['model']} with {plural(cores, 'logical core') if cores else 'an unknown number of cores'}. "
        f"There, one decode step for "
        f"{'a single request' if one['batch'] == 1 else plural(one['batch'], 'request')} through the "
        f"{config['layers']} layers of width {model['width']} in {model['dtype']} took {one['median_ns'] / 1e6:.2f} ms (median of "
        f"{len(one['durations_ns'])} steps, {one['min_ns'] / 1e6:.2f} to {one['max_ns'] / 1e6:.2f} ms), timed "
        f"in-process with {plural(config['threads'], 'torch thread')}; the step-time "
        f"table further down gives larger batches.", dtype_sentence(record)]
    return Block(css="lab-config", paragraphs=paragraphs)


def dtype_sentence(record: dict[str, Any]) -> str:
    """Why the model ran in the dtype it did: the probe of one step's weight multiplies in each dtype."""
    choice = record["config"]["benchmark"]["dtype_choice"]
    medians = {name: probe["median_ns"] / 1e6 for name, probe in choice["probes"].items()}
    chosen = choice["chosen"]
    if len(medians) < 2:
        return f"The model ran in {chosen}, as the benchmark was told ({choice['how']})."
    if choice["how"] == CHOSEN_BY_SUPPLIED_PROBES:  # a test's record: no probe was timed
        return (f"It ran in {chosen}, the faster of two probe timings handed to the benchmark by its caller, not "
                f"measured on this CPU. The equivalence gate below uses that dtype's tolerance.")
    other = next(name for name in medians if name != chosen)
    return (f"It ran in {chosen} because, at a batch of {choice['batch']}, one step's weight multiplies took "
            f"{medians[chosen]:.1f} ms in {chosen} against {medians[other]:.1f} ms in {other} on this CPU; the "
            f"benchmark times both and keeps the faster, so a CPU without native bfloat16 arithmetic stays in "
            f"float32. The equivalence gate below uses that dtype's tolerance.{trained_dtype_clause(record)}")


def trained_dtype_clause(record: dict[str, Any]) -> str:
    """Where the trained model ran in another dtype than the one the probe chose for the random model, why."""
    chosen, trained = record["config"]["benchmark"]["dtype_choice"]["chosen"], record.get("trained", {}).get("model")
    if trained is None or trained["dtype"] == chosen:
        return ""
    return (f" The trained model stays in {trained['dtype']}: the one-call C step its decode steps take reads "
            f"{trained['dtype']} or int8 weights.")


def pool_view(record: dict[str, Any]) -> Block:
    """The pool's bytes from the config, then the equivalence gate's verdict."""
    model, config = record["config"]["model"], record["config"]["benchmark"]
    paragraphs = [
        f"One token's keys and values take 2 × {config['layers']} layers × {model['kv_heads']} key/value heads × "
        f"{model['head_dim']} features × {model['bytes_per_element']} bytes = {config['kv_bytes_per_token']:,} bytes, "
        f"so a block of {config['block_size']} positions is {config['block_bytes']:,} bytes and the pool of "
        f"{config['num_blocks']} blocks is {config['pool_bytes']:,} bytes ({config['pool_bytes'] / MIB:.2f} MiB).",
    ]
    gate = record["equivalence"]
    ties = gate["ties"]
    choices = ("every greedy choice was the same" if not ties else
               f"alone would have chosen another token at {plural(len(ties), 'step')}, each a tie the rounding "
               f"explains (logits {join([format(tie['margin'], '.3g') for tie in ties])} apart)")
    paragraphs.append(
        f"Before any load, prompts of {', '.join(map(str, gate['prompt_lengths']))} tokens were decoded for "
        f"{gate['steps']} greedy steps all together in one batch, then each alone fed the same tokens: the logits "
        f"differed by at most {gate['max_abs_diff']:.2e}, {'within' if gate['within_tolerance'] else 'beyond'} "
        f"atol = {record['tolerance']['atol']:g}, rtol = {record['tolerance']['rtol']:g}, and {choices}.")
    return Block(css="lab-config", paragraphs=paragraphs)

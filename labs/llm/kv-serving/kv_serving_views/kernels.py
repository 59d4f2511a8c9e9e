"""Which kernel multiplies each of the trained model's matrices on the machine that made the record: the table the
server timed when it arranged the weights (llm_models.serving.kernels), per matrix kind, at one row and at several."""

from __future__ import annotations

from typing import Any

from llm_models.llama.kinds import ONE_CALL
from llm_models.serving.kernel_rows import PREFILL_PACKED_ROWS
from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_ms, join, plural

from .common import thread_counts

KIND_NAMES = {"qkv": "q, k and v (fused)", "o": "attention output", "gate_up": "gate and up (fused)",
              "down": "down", "head": "output head (tied embedding)"}


def kernels_view(record: dict[str, Any]) -> Block:
    tables = record["trained"]["kernels"]
    first = tables[0]
    counts = sorted({row["rows"] for table in tables for row in table["rows"]})
    how = {"timed": "timed on this run's machine", "supplied": "supplied by the caller, not measured (a test run)"}
    threads = thread_counts([table["threads"] for table in tables])
    one_call = record["trained"]["decode_way"] == ONE_CALL
    rows_of = ("A short prefill multiplies a few rows by each weight matrix (a one-token prompt one row)" if one_call
               else "A decode step alone multiplies one row by each weight matrix, a batch or a packed prefill several")
    return Block(paragraphs=[
        f"{rows_of}, and "
        "which kernel streams a matrix fastest depends on the CPU, its BLAS, the matrix's shape and the number of "
        "rows. So the server times the decode lab's kernels over every matrix of each kind when it arranges the "
        f"weights, at {join([str(count) for count in counts])} rows (more than one standing for any batch), and "
        "multiplies by the one with the least time: out_in is F.linear over the (out, in) matrix, in_out addmm over "
        f"an (in, out) copy, onednn oneDNN's packed copy. Here, at {threads}, best of "
        f"{plural(first['passes'], 'pass', 'passes')} over every matrix of the kind, "
        f"{join(list(dict.fromkeys(how.get(table['timings'], table['timings']) for table in tables)))}; ms per "
        "matrix:"],
        tables=[kernel_table(table) for table in tables],
        notes=[*([f"In this run the decode steps took none of these: they ran the decode lab's one-call step, which "
                  "reads every matrix in its own packed order, batch or not; the table chose the kernels of the "
                  f"prefills of up to {PREFILL_PACKED_ROWS} rows."] if one_call else []),
               f"Every trained server of this run chose by the {first['threads']}-thread table above, timed in "
               "process before they started, so all of them multiply alike. A server started by hand times its own "
               "table when it starts (the kernels entry of its /metrics); two such servers may pick differently "
               "where two kernels take about the same time.",
               f"A prefill of more than {PREFILL_PACKED_ROWS} rows (prompts packed together) multiplies by out_in "
               "or in_out whatever the table chose: oneDNN keeps a compiled primitive for every number of rows it "
               "has multiplied, never freed, and prompts of ever-new lengths would grow the server's memory by "
               "megabytes each."])


def kernel_table(table: dict[str, Any]) -> Table:
    names = list(dict.fromkeys(name for row in table["rows"] for name in row["ns"]))  # in the order timed
    chosen = table["chosen"]
    rows = []
    for row in table["rows"]:
        out, inner = row["shape_out_in"]
        rows.append((KIND_NAMES.get(row["kind"], row["kind"]), f"{out:,} × {inner:,}", f"{row['rows']}",
                     *(format_ms(row["ns"][name]) if name in row["ns"] else "–" for name in names),
                     chosen[row["kind"]][str(row["rows"])]))
    return Table(["Matrix", "Shape (out × in)", "Rows", *names, "Chosen"], rows,
                 caption=f"{plural(table['threads'], 'thread')}, {table['dtype']}")

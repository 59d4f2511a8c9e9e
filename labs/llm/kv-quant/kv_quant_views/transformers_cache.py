"""transformers' QuantizedCache beside this lab's formats: bytes, errors, and the axis its groups run along,
read from which elements share a scale (the record's probe) and the key scale tensor's shape."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_number, format_sci


def transformers_view(record: dict[str, Any]) -> Block:
    section = record["transformers"]
    backends = section["backends"]
    if not backends:
        return Block(paragraphs=[
            "Neither optimum-quanto nor hqq was installed when this record was made, so transformers' "
            "QuantizedCache was not compared."])
    rows = []
    for label, row in backends.items():
        ours = row["ours"]
        group = row["group"]
        members = f"{group['tokens']} token(s) × {group['channels']} channel(s)" + (
            f", across {group['heads']} heads" if group["heads"] > 1 else "")
        rows.append([label, row["axis"], members, "×".join(str(n) for n in row["key_scale_shape"]),
                     format_number(row["stored_bytes"]), format_sci(row["keys_max_abs_error"]),
                     f"{ours['label']}: {format_number(ours['stored_bytes'])} B, {format_sci(ours['keys_max_abs_error'])}"])
    versions = section["versions"]
    defaults = {label.split("-")[0]: row["axis"] for label, row in backends.items() if label.endswith("axis0")}
    paragraphs = []
    if len(defaults) == 2 and len(set(defaults.values())) == 2:
        paragraphs.append("The default axis 0 means different things: keys " + " and ".join(
            f"{axis} in {backend}" for backend, axis in defaults.items()) + ".")
    elif defaults:
        paragraphs.append("The default axis 0 groups keys " + " and ".join(
            f"{axis} in {backend}" for backend, axis in defaults.items()) + ".")
    return Block(paragraphs=paragraphs, tables=[Table(
        ["layer", "keys grouped", "one group holds", "key scale shape", "bytes", "key error", "ours (bytes, key error)"],
        rows, lead=f"transformers {versions['transformers']} on {section['tokens']} random tokens of one SmolLM2 "
                   f"layer, groups of {section['group_size']}, residual {section['residual_length']}.")],
        notes=["The axis is read from the data: an element made huge moves exactly the elements that share its "
               "scale. transformers fills its residual only after the prompt and empties it at every flush, so "
               "its bytes here have no exact recent tokens; KIVI keeps at least its residual of recent tokens "
               "exact, which is why our counterpart stores more."])

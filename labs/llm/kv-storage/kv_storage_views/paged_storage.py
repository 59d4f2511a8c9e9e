"""The page's "Paged storage in numbers": block size against wasted slots and table entries, and prefix sharing."""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import Block, Table
from site_hooks.formatting import format_number


def paging_view(record: dict[str, Any]) -> Block:
    paging = record["paging"]
    table = Table(
        headings=["Block size (positions)", "Blocks in use", "Slots allocated", "Slots wasted", "Wasted share",
                  "Block-table entries"],
        rows=[(row["block_size"], format_number(row["blocks_in_use"]), format_number(row["allocated_slots"]),
               format_number(row["wasted_slots"]), f"{row['waste_share']:.1%}", format_number(row["table_entries"]))
              for row in paging["rows"]],
    )
    return Block(tables=[table], notes=paging_sentences(paging))


def paging_sentences(paging: dict[str, Any]) -> list[str]:
    first, last = paging["rows"][0], paging["rows"][-1]
    return [
        f"{paging['requests']} requests with lengths drawn uniformly from {paging['length_range'][0]} to "
        f"{paging['length_range'][1]} positions use {paging['used_slots']:,} slots in all.",
        f"With blocks of {first['block_size']}, {first['wasted_slots']:,} slots ({first['waste_share']:.1%}) are "
        f"allocated but unused and the block tables hold {first['table_entries']:,} entries; with blocks of "
        f"{last['block_size']}, {last['wasted_slots']:,} slots ({last['waste_share']:.1%}) are wasted and the "
        f"tables hold {last['table_entries']:,} entries.",
    ]


def sharing_view(record: dict[str, Any]) -> Block:
    sharing = record["sharing"]
    without, shared = sharing["without"], sharing["with"]
    table = Table(
        headings=["", "Blocks", "Bytes"],
        rows=[(f"{sharing['requests']} separate copies of the prompt", without["blocks"],
               format_number(without["bytes"])),
              (f"prompt shared: {shared['shared_blocks']} of its {shared['prompt_blocks']} blocks still shared by "
               f"all, {shared['copied_blocks']} copies made on write", shared["blocks"], format_number(shared["bytes"]))],
    )
    return Block(tables=[table], notes=[sharing_sentence(sharing)])


def sharing_sentence(sharing: dict[str, Any]) -> str:
    saved = sharing["saved_bytes"]
    copies = (
        f"The prompt's last block was partly filled, so {sharing['with']['copied_blocks']} of the requests "
        f"copied it before their first write."
        if sharing["prompt_last_block_positions"] else
        "The prompt filled its last block exactly, so no block had to be copied."
    )
    return (
        f"{sharing['requests']} requests that share a {sharing['prompt']}-token prompt and then decode "
        f"{sharing['tokens']} tokens each took {sharing['without']['blocks']} blocks of {sharing['block_size']} "
        f"positions when each kept its own copy, and {sharing['with']['blocks']} when they shared the prompt's "
        f"blocks: {saved:,} bytes ({sharing['saved_share']:.0%}) saved. {copies}"
    )

"""The quantized-cache lab's views, one module per section of its page (docs/llm/kv-quant.md). Torch-free: the
record holds raw measurements only; views read the figures kv_quant.figures derives from it when the build reads it.

- pictures.py: KIVI's key layout and one q4_0 block, drawn from kv_quant.figures
- bytes.py: bytes per token as the context grows, effective bits, what a budget holds, serving capacity
- names.py: how to read a format's name, spelled out from its fields
- quality.py: the error chain, the trained model's perplexity, KL and top-1 with their intervals, keys against
  values, greedy departures, fp8's scale
- cost.py: the decode step with its dequantization apart, attention's peak all at once or block by block
- transformers_cache.py: transformers' QuantizedCache beside ours, and its axis
- results.py: the key results, the takeaways worded from the record and the check-yourself answers
- reproduce.py: the record's settings for the Reproduce appendix
"""

from __future__ import annotations

from typing import Any

from site_hooks.blocks import View

from .bytes import bytes_chart_view, fits_view, formats_table_view, serving_view
from .cost import memory_view, timing_view
from .names import names_view
from .pictures import kivi_view, q4_block_view
from .quality import (
    chain_view,
    fp8_view,
    greedy_view,
    hidden_view,
    quality_chart_view,
    sides_view,
    trained_table_view,
)
from .reproduce import config_view
from .results import (
    answer_bits_view,
    answer_kivi_view,
    answer_perplexity_view,
    key_results_view,
    takeaway_chain_view,
    takeaway_cost_view,
    takeaway_fp8_view,
    takeaway_quality_view,
)
from .transformers_cache import transformers_view

__all__ = ["VIEWS", "headline"]


def headline(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Ratios within one run: float32's bytes per token over q4_0's, and q4_0's all-at-once attention peak
    over its blockwise one."""
    return [("float32 ÷ q4_0, stored bytes per token", record["formats"]["q4_0"]["smaller_than_float32"]),
            ("all at once ÷ block by block, q4_0 attention peak",
             record["attention_memory"]["formats"]["q4_0"]["peak_ratio"])]


VIEWS: dict[str, View] = {"key-results": key_results_view, "kivi-layout": kivi_view, "q4-block": q4_block_view,
         "bytes-chart": bytes_chart_view, "formats": formats_table_view, "fits": fits_view, "serving": serving_view,
         "chain": chain_view, "trained": trained_table_view, "quality-chart": quality_chart_view,
         "hidden": hidden_view, "greedy": greedy_view, "fp8": fp8_view, "timing": timing_view,
         "memory": memory_view, "transformers": transformers_view, "answer-bits": answer_bits_view,
         "answer-perplexity": answer_perplexity_view, "answer-kivi": answer_kivi_view,
         "names": names_view, "sides": sides_view,
         "takeaway-quality": takeaway_quality_view, "takeaway-fp8": takeaway_fp8_view,
         "takeaway-chain": takeaway_chain_view, "takeaway-cost": takeaway_cost_view,
         # in place of the shared config table, which reads a timing sweep's config (reproduce.py)
         "config": config_view}

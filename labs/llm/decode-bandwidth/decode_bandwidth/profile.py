"""Where a decode step's time goes: torch.profiler self time per kind of operation, beside the bytes it reads.

Matrix multiplies are told apart by the weight's (in, out) shape, which the
configuration fixes; transformers' Conv1D layers and its tied head produce
the same shapes, so one classification serves both models.
"""

from __future__ import annotations

import resource
from collections.abc import Callable

from torch.profiler import ProfilerActivity, profile

from labkit.summary import median

from . import traffic
from .config import DecoderConfig
from .traffic import KINDS


def minor_faults() -> int:
    """Minor page faults of this process so far: first touches of freshly mapped memory (Linux, macOS)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def matrix_kinds(config: DecoderConfig) -> dict[tuple[int, int], str]:
    width, kv_width, hidden = config.width, config.kv_width, config.hidden
    return {(width, width + 2 * kv_width): "qkv", (width, width): "attention out", (width, hidden): "mlp fc",
            (hidden, width): "mlp proj", (width, config.vocab_size): "output head"}


def kind_bytes(config: DecoderConfig, batch: int, context: int) -> dict[str, int]:
    """The bytes each kind must read per step (decode_bandwidth.traffic.kind_bytes)."""
    return traffic.kind_bytes(config.as_record(), config.bytes_per_element, batch, context)


def classify(name: str, shapes: list[list[int]], kinds: dict[tuple[int, int], str]) -> str:
    matrices = [shape for shape in shapes if len(shape) == 2]  # addmm: (bias, x, W, beta, alpha); mm: (x, W)
    if name in ("aten::addmm", "aten::mm") and matrices:
        return kinds.get((matrices[-1][0], matrices[-1][1]), "other")
    if "scaled_dot_product" in name or name in ("aten::bmm", "aten::baddbmm", "aten::_softmax"):
        return "attention"
    if name in ("aten::copy_", "aten::cat", "aten::index_copy_", "aten::clone"):
        return "cache writes and copies"
    return "other"


def profile_step(step: Callable[[], None], reset: Callable[[], None], config: DecoderConfig, steps: int,
                 device_type: str = "cpu") -> dict[str, object]:
    """Profile ``steps`` single steps; per kind the median over them of its self time (the record's
    ``derive`` adds the bytes each kind must read, their floor and the total).

    Each step gets its own profile, and the median per kind keeps one step disturbed by something else
    on the machine from moving the table. ``reset`` (the cache rewind) runs outside the profile, as it
    runs outside the clock in the timed cells.
    """
    kinds = matrix_kinds(config)
    # On a GPU the kernels' own time is what matters, not the host time spent launching them.
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    field = "self_device_time_total" if device_type == "cuda" else "self_cpu_time_total"
    step()  # warm: first calls pay one-time costs the steady state does not
    reset()
    per_step: dict[str, list[float]] = {kind: [] for kind in KINDS}
    faults = []
    for _ in range(steps):
        with profile(activities=activities, record_shapes=True) as prof:
            before = minor_faults()
            step()
            faults.append(minor_faults() - before)
        reset()
        self_ns = dict.fromkeys(KINDS, 0.0)
        for event in prof.key_averages(group_by_input_shape=True):
            kind = classify(event.key, [list(s) for s in event.input_shapes], kinds)
            self_ns[kind] += getattr(event, field) * 1e3  # microseconds -> ns
        for kind in KINDS:
            per_step[kind].append(self_ns[kind])
    rows = [{"kind": kind, "ns_per_step": median(per_step[kind])} for kind in KINDS]
    return {"steps": steps, "rows": rows, "minor_faults": faults}

"""A step chart as inline SVG: a quantity sampled over time (blocks in use, say), one line per run, with
horizontal limits (a pool, a budget) drawn dashed. Beside site_hooks.chart, whose palette it shares."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .chart import nice_step, style
from .templating import render

WIDTH, HEIGHT = 720, 360
MARGIN = {"left": 70, "right": 24, "top": 64, "bottom": 56}

Samples = Sequence[tuple[float, float]]  # (time, value), in time order


def timeline(lines: Sequence[tuple[str, Samples]], limits: Sequence[tuple[float, str]], title: str,
             description: str, x_label: str, y_label: str) -> str:
    """Each line holds its value until its next sample; the first limit is drawn finely dashed, the rest
    coarsely. The y axis reaches just above the highest limit."""
    if not lines or not limits:
        raise ValueError(f"timeline needs lines and limits, got {len(lines)} and {len(limits)}")
    margin = {**MARGIN, "top": 28 + 18 * len(lines)}  # one legend row per line above the plot
    plot_w, plot_h = WIDTH - margin["left"] - margin["right"], HEIGHT - MARGIN["top"] - MARGIN["bottom"]
    top = max(limit for limit, _ in limits)
    t_max = max(t for _, samples in lines for t, _ in samples) or 1.0
    x_step, y_step = nice_step(t_max / 6), nice_step(top / 5)
    x_max, y_max = x_step * math.ceil(t_max / x_step), y_step * math.ceil(top * 1.05 / y_step)

    def px(t: float) -> float:
        return round(margin["left"] + plot_w * t / x_max, 1)

    def py(v: float) -> float:
        return round(margin["top"] + plot_h * (1 - v / y_max), 1)

    def ticks(step: float, end: float) -> list[float]:
        return [step * k for k in range(int(round(end / step)) + 1)]

    series = []
    for index, (label, samples) in enumerate(lines):
        points = []
        for (t, value), (t_next, _) in zip(samples, [*samples[1:], *samples[-1:]]):  # a value holds until the next
            points += [(px(t), py(value)), (px(t_next), py(value))]
        series.append({"label": label, "style": style(index), "points": points})
    return render("timeline.svg.j2", width=WIDTH, height=margin["top"] + plot_h + margin["bottom"], margin=margin,
                  plot_w=plot_w, plot_h=plot_h, title=title, description=description, x_label=x_label,
                  y_label=y_label, x_ticks=[(px(t), f"{t:g}") for t in ticks(x_step, x_max)],
                  y_ticks=[(py(v), f"{v:g}") for v in ticks(y_step, y_max)],
                  limits=[{"y": py(limit), "label": label, "dash": "3 3" if index == 0 else "8 4"}
                          for index, (limit, label) in enumerate(limits)],
                  series=series)

"""A line chart as inline SVG, drawn at build time from a record: median time against prefix length."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .templating import render

WIDTH, HEIGHT = 720, 400
MARGIN = {"left": 78, "right": 24, "top": 44, "bottom": 64}
# Distinguishable in light and dark schemes, and by shape and dash for colour-blind readers; series
# beyond the palette's length reuse its colours with the next marker and dash, so any count can be drawn.
COLOURS = ["#d9480f", "#1971c2", "#2f9e44", "#862e9c", "#0c8599", "#c2255c", "#5c940d", "#f08c00"]
MARKERS = ["circle", "square", "diamond", "triangle"]
DASHES = ["", "6 4", "2 3", "10 3 2 3", "1 2"]


def style(index: int) -> dict[str, str]:
    return {"colour": COLOURS[index % len(COLOURS)], "marker": MARKERS[index % len(MARKERS)],
            "dash": DASHES[index % len(DASHES)]}


def series_style(series: Series, index: int) -> dict[str, str]:
    if series.colour_of is None:
        return style(index)
    return style(series.colour_of) | {"dash": "6 4" if series.dashed else ""}


@dataclass(frozen=True)
class Series:
    label: str
    x: list[float]
    y: list[float]  # median
    low: list[float]  # min: drawn as a whisker with high
    high: list[float]
    colour_of: int | None = None  # draw in series i's colour and marker (pairs such as a time and its floor)
    dashed: bool = False  # a dashed line in that colour: the paired series' second line


def log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks covering [low, high] on a log axis."""
    ticks = []
    for exponent in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        for mantissa in (1, 2, 5):
            value = mantissa * 10.0**exponent
            if low <= value <= high:
                ticks.append(value)
    return ticks


def enclosing_ticks(low: float, high: float) -> tuple[float, float]:
    """Widen [low, high] to the nearest 1-2-5 ticks outside it, so both ends of the axis are labelled."""
    below = max(t for t in log_ticks(low / 10, low) if t <= low)
    above = min(t for t in log_ticks(high, high * 10) if t >= high)
    return below, above


def tick_label(value: float) -> str:
    return f"{value:g}"


def line_chart(series: list[Series], title: str, x_label: str, y_label: str, description: str) -> str:
    """Log-log chart; x ticks at the measured x values, y ticks on a 1-2-5 grid."""
    if not series:
        raise ValueError("line_chart needs at least one series, got none")
    xs = sorted({x for s in series for x in s.x})
    entry_w = max(150, 50 + 7 * max(len(s.label) for s in series))  # a legend entry: line sample + label
    per_row = max(1, (WIDTH - MARGIN["left"] - MARGIN["right"]) // entry_w)  # more wrap onto further rows
    rows = -(-len(series) // per_row)
    margin = MARGIN | {"top": MARGIN["top"] + 20 * (rows - 1)}
    legend = [(margin["left"] + 16 + entry_w * (i % per_row), MARGIN["top"] - 22 + 20 * (i // per_row))
              for i in range(len(series))]
    y_low, y_high = enclosing_ticks(min(v for s in series for v in s.low) / 1.1,
                                    max(v for s in series for v in s.high) * 1.1)
    x_low, x_high = xs[0] / 1.15, xs[-1] * 1.15
    height = HEIGHT + margin["top"] - MARGIN["top"]
    plot_w = WIDTH - margin["left"] - margin["right"]
    plot_h = height - margin["top"] - margin["bottom"]

    def px(x: float) -> float:
        return round(margin["left"] + plot_w * math.log(x / x_low) / math.log(x_high / x_low), 1)

    def py(y: float) -> float:
        return round(margin["top"] + plot_h * (1 - math.log(y / y_low) / math.log(y_high / y_low)), 1)

    drawn = [
        {
            "label": s.label,
            "style": series_style(s, i),
            "legend": legend[i],
            "points": [(px(x), py(y)) for x, y in zip(s.x, s.y)],
            "whiskers": [(px(x), py(lo), py(hi)) for x, lo, hi in zip(s.x, s.low, s.high)],
        }
        for i, s in enumerate(series)
    ]
    return render(
        "chart.svg.j2",
        width=WIDTH, height=height, margin=margin, plot_w=plot_w, plot_h=plot_h,
        title=title, x_label=x_label, y_label=y_label, description=description,
        x_ticks=[(px(x), tick_label(x)) for x in xs],
        y_ticks=[(py(y), tick_label(y)) for y in log_ticks(y_low, y_high)],
        series=drawn,
    )


@dataclass(frozen=True)
class BarGroup:
    label: str
    values: list[float]  # one per series, in the order of the series labels


def bar_chart(groups: list[BarGroup], series: list[str], title: str, x_label: str, description: str) -> str:
    """Horizontal grouped bars on a linear axis starting at zero."""
    if not groups or not series:
        raise ValueError(f"bar_chart needs groups and series, got {len(groups)} and {len(series)}")
    bar, gap = 18, 14
    per_row = 3  # legend entries per line, above the plot; more lines push the plot down
    legend_rows = math.ceil(len(series) / per_row)
    left, right, top = 110, 40, 26 + 18 * legend_rows
    height = top + len(groups) * (len(series) * bar + gap) + 56
    plot_w = WIDTH - left - right
    high = max(v for g in groups for v in g.values)
    step = nice_step(high / 5)
    axis_max = step * math.ceil(high / step)

    def px(value: float) -> float:
        return round(left + plot_w * value / axis_max, 1)

    rows = []
    y = top
    for group in groups:
        bars = [{"y": y + i * bar, "width": round(px(v) - left, 1), "value": v, "style": style(i)}
                for i, v in enumerate(group.values)]
        rows.append({"label": group.label, "centre": y + len(series) * bar / 2, "bars": bars})
        y += len(series) * bar + gap
    ticks = [(px(step * i), tick_label(step * i)) for i in range(int(round(axis_max / step)) + 1)]
    return render("bars.svg.j2", width=WIDTH, height=height, left=left, top=top, plot_w=plot_w, bottom=y,
                  bar=bar, rows=rows, ticks=ticks,
                  series=[(s, style(i), left + (i % per_row) * 200, 20 + 18 * (i // per_row)) for i, s in enumerate(series)],
                  title=title, x_label=x_label, description=description)


def nice_step(raw: float) -> float:
    """The 1-2-5 step at or above ``raw``."""
    exponent = math.floor(math.log10(raw))
    for mantissa in (1, 2, 5, 10):
        if mantissa * 10**exponent >= raw:
            return mantissa * 10.0**exponent
    raise AssertionError("unreachable: 10 x 10^e >= raw")

"""The page's concept diagrams, drawn from kv_serving.figures.formulas.replay (the scheduler's rules on plain numbers,
which test_serving_pictures checks against the real Scheduler): one iteration's phases, a few iterations of
continuous batching, and the prefill stall on a timeline with the record's own step and prefill times."""

from __future__ import annotations

from typing import Any

from kv_serving.figures.formulas import (
    REPLAY_BLOCK,
    REPLAY_BUDGET,
    REPLAY_EXAMPLE,
    STALL_EXAMPLE,
    Iteration,
    best_point,
    model_thread,
    replay,
    token_times,
)
from llm_models.serving.sizes import reservation_blocks
from site_hooks.blocks import Block
from site_hooks.diagrams import Canvas, Diagram, legend
from site_hooks.formatting import format_latency, join

SHOWN = 3  # the iteration the phase strip spells out: it admits, prefills, decodes and retires


def example() -> list[Iteration]:
    return replay(REPLAY_EXAMPLE, REPLAY_BUDGET, REPLAY_BLOCK)


def need(name: str) -> int:
    """The blocks one of the example's requests reserves when admitted."""
    job = next(j for j in REPLAY_EXAMPLE if j.name == name)
    return reservation_blocks(job.prompt, job.max_tokens, REPLAY_BLOCK)


def phases(it: Iteration) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(phase, what it does, what it did in iteration ``it``) for the five phases of one pass of the loop."""
    admitted = join(list(it.admitted)) if it.admitted else "nobody"
    freed, before = it.freed_blocks, it.reserved_before
    return [
        ("1 admit", ("queue's head,", "if its blocks fit"),
         (admitted, f"{before} + {it.admitted_blocks} of {REPLAY_BUDGET} blocks")),
        ("2 prefill", ("new prompts,", "packed in one pass"), (admitted, "first token")),
        ("3 decode", ("one step for", "all running"), (join(list(it.decoded)), "together")),
        ("4 stream", ("each new token", "to its client"), (f"{it.streamed} tokens", "")),
        ("5 retire", ("finished or gone:", "blocks back"),
         (join(list(it.finished)), f"{freed} block{'s' if freed != 1 else ''} free") if it.finished else ("nobody", "")),
    ]


def phases_canvas(shown: Iteration) -> Canvas:
    """The five phases as boxes on a loop of two rows, each with what it does and what it did in ``shown``."""
    box, gap, high = 132, 28, 128
    # a loop on two rows: admit -> prefill -> decode, then stream <- retire back under them, and round again
    places = [(0, 0), (1, 0), (2, 0), (2, 1), (1, 1)]
    strip = Canvas(width=3 * box + 2 * gap + 12, height=2 * high + gap + 12, slug="iteration-phases", max_width="34rem",
                   title=f"One pass of the scheduler loop (iteration {SHOWN} of the example below)",
                   description="; ".join(f"{p}: {' '.join(does)}; here {' '.join(did)}" for p, does, did in phases(shown)))
    centres = []
    for index, (phase, does, did) in enumerate(phases(shown)):
        col, row = places[index]
        x, y = 6 + col * (box + gap), 6 + row * (high + gap)
        centres.append((x, y))
        strip.rect(x, y, box, high, "new" if index in (1, 2) else "old", rx=6)
        strip.text(x + box / 2, y + 24, phase, size=15, weight="bold")
        for line, text in enumerate(does):
            strip.text(x + box / 2, y + 48 + line * 17, text, size=13)
        for line, text in enumerate(did):
            strip.text(x + box / 2, y + 94 + line * 17, text, size=13, weight="bold")
    for (x0, y0), (x1, y1) in zip(centres, centres[1:]):
        if y0 == y1 and x1 > x0:
            strip.line(x0 + box + 4, y0 + high / 2, x1 - 4, y1 + high / 2, width=2)
            strip.text(x1 - 8, y0 + high / 2 + 5, "▶", size=12, anchor="end")
        elif y0 == y1:
            strip.line(x1 + box + 4, y0 + high / 2, x0 - 4, y0 + high / 2, width=2)
            strip.text(x1 + box + 8, y0 + high / 2 + 5, "◀", size=12, anchor="start")
        else:
            strip.line(x0 + box / 2, y0 + high + 4, x1 + box / 2, y1 - 4, width=2)
            strip.text(x1 + box / 2, y1 - 2, "▼", size=12)
    (ax, ay), (rx, ry) = centres[0], centres[-1]
    strip.line(rx - 4, ry + high / 2, ax + box / 2, ry + high / 2, width=2, dash="5 4")
    strip.line(ax + box / 2, ry + high / 2, ax + box / 2, ay + high + 4, width=2, dash="5 4")
    strip.text(ax + box / 2, ay + high + 16, "▲", size=12)
    strip.text(ax + box / 2, ry + high / 2 + 20, "next pass", size=13)
    return strip


def iteration_view(record: dict[str, Any]) -> Block:
    """The five phases of one iteration, with what they did in iteration SHOWN of the example."""
    strip = phases_canvas(example()[SHOWN - 1])
    caption = (f"Iteration {SHOWN} of the example below: what each phase does, and (bold) what it did there. Prefill "
               f"and decode (orange) are the model's work; the rest is bookkeeping between steps.")
    return Block(diagrams=[Diagram(strip.svg(), caption)])


def iterations_canvas(its: list[Iteration]) -> Canvas:
    """Requests down, iterations across: each request's state per iteration, the blocks reserved under each."""
    names = [j.name for j in REPLAY_EXAMPLE]
    cell, left, top = 58, 96, 40
    grid = Canvas(width=left + len(its) * cell + 10, height=top + len(names) * 34 + 40 + 2 * 24 + 4,
                  slug="iteration-grid", max_width="36rem",
                  title=f"{len(names)} requests under a {REPLAY_BUDGET}-block budget, iteration by iteration",
                  description="; ".join(
                      f"iteration {it.number}: admitted {join(list(it.admitted)) if it.admitted else 'nobody'}, "
                      f"decoded {join(list(it.decoded))}, {it.reserved_blocks} blocks reserved"
                      f"{f', waiting {join(list(it.waiting))}' if it.waiting else ''}" for it in its))
    for col, it in enumerate(its):
        x = left + col * cell
        grid.text(x + cell / 2, top - 12, f"iter {it.number}", size=12, weight="bold" if it.number == SHOWN else "normal")
        for row, name in enumerate(names):
            y = top + row * 34
            state = ("new", "prefill + step") if name in it.admitted else ("old", "step") if name in it.decoded \
                else ("empty", "waits") if name in it.waiting else ("empty", "")
            grid.rect(x + 2, y, cell - 4, 28, state[0], rx=3)
            done = " ✓" if name in it.finished else ""
            label = f"{state[1]}{done}"
            grid.text(x + cell / 2, y + 18, label if len(label) < 9 else f"P+D{done}", size=11)
        grid.text(x + cell / 2, top + len(names) * 34 + 18, f"{it.reserved_blocks}/{REPLAY_BUDGET}", size=12)
    for row, name in enumerate(names):
        grid.text(left - 8, top + row * 34 + 18, f"{name}: {need(name)} block{'s' if need(name) > 1 else ''}",
                  anchor="end", size=12)
    grid.text(left - 8, top + len(names) * 34 + 18, "reserved", anchor="end", size=12)
    grid.line(left + (SHOWN - 1) * cell, top - 26, left + (SHOWN - 1) * cell, top + len(names) * 34 + 26, dash="4 3")
    grid.line(left + SHOWN * cell, top - 26, left + SHOWN * cell, top + len(names) * 34 + 26, dash="4 3")
    legend(grid, left, top + len(names) * 34 + 40, [("new", "P+D: admitted, prefilled, then decoded in the same pass"),
                                                     ("old", "decoded in the batched step; ✓ finished, blocks freed")])
    return grid


def iterations_view(record: dict[str, Any]) -> Block:
    """The example's iterations as a grid of requests against iterations, with the blocks reserved."""
    its = example()
    waits = sorted({n for it in its for n in it.waiting})
    caption = (f"Block size {REPLAY_BLOCK} positions; a request reserves prompt + max_tokens − 1 positions when admitted. "
               f"{join(waits)} wait{'s' if len(waits) == 1 else ''} at the head of the queue until a retirement frees "
               f"enough blocks; nobody overtakes. Drawn by kv_serving.figures.formulas.replay, which a test checks against the "
               f"real scheduler iteration by iteration.")
    return Block(diagrams=[Diagram(iterations_canvas(its).svg(), caption)])


def stall_times(record: dict[str, Any]) -> tuple[float, float, dict[str, Any]]:
    """The record's mean decode step and mean prefill call (the prompts admitted together, packed into one) at the
    rate of highest throughput: a running stream waits out a whole call."""
    point = best_point(record)
    return point["server"]["mean_step_s"], point["server"]["mean_prefill_call_s"], point


def stall_canvas(spans: list[tuple[str, str, float, float]], description: str, waits: str) -> Canvas:
    """The model thread's spans on a timeline to scale, each stream's tokens under it, and A's wait across the
    newcomer's prefill marked with ``waits``."""
    tokens = token_times(spans)
    end = spans[-1][3]
    left, width = 110, 600
    scale = width / end
    lanes = ["model thread", *[j.name for j in STALL_EXAMPLE]]
    canvas = Canvas(width=left + width + 20, height=60 + len(lanes) * 40 + 50, slug="prefill-stall",
                    title="A new prompt's prefill stalls every running stream", description=description)
    for row, lane in enumerate(lanes):
        y = 40 + row * 40
        canvas.text(left - 10, y + 18, lane if row == 0 else f"stream {lane}", anchor="end", size=12)
        canvas.line(left, y + 28, left + width, y + 28, width=0.5)
    for kind, names, start, stop in spans:
        canvas.rect(left + start * scale, 40, max((stop - start) * scale - 1, 1), 26,
                    "new" if kind == "prefill" else "old", rx=2)
        if kind == "prefill" and (stop - start) * scale > 20:
            canvas.text(left + (start + stop) / 2 * scale, 58, names, size=11)
    for row, lane in enumerate(lanes[1:], start=1):
        for t in tokens[lane]:
            canvas.rect(left + t * scale - 3, 40 + row * 40 + 10, 6, 14, "new", rx=1)
    before, after = stall_wait(spans)
    x0, x1 = left + before * scale, left + after * scale
    canvas.line(x0, 40 + 40 + 32, x1, 40 + 40 + 32, width=1)
    canvas.text((x0 + x1) / 2, 40 + 40 + 47, f"A waits {waits}", size=12)
    legend(canvas, left, 50 + len(lanes) * 40, [("new", "prefill of a new prompt; a token streamed"),
                                                ("old", "one batched decode step")])
    return canvas


def stall_wait(spans: list[tuple[str, str, float, float]]) -> tuple[float, float]:
    """A's last token before the newcomer's prefill and its first after it: the wait the picture marks."""
    tokens = token_times(spans)
    _, _, start, stop = next(span for span in spans if span[0] == "prefill" and span[1] == STALL_EXAMPLE[-1].name)
    return max(t for t in tokens["A"] if t <= start), min(t for t in tokens["A"] if t >= stop)


def stall_view(record: dict[str, Any]) -> Block:
    """Two streams decoding when a third prompt arrives, on the worker thread's timeline, at the record's times."""
    step, prefill, point = stall_times(record)
    stalled = format_latency(point["server"]["stalled_gap_s"])  # a step and a prefill: A's wait in the picture
    spans = model_thread(replay(STALL_EXAMPLE, 100, REPLAY_BLOCK), step, prefill)
    description = (f"Mean decode step {format_latency(step)}, mean prefill call {format_latency(prefill)} "
                   f"(the record's run at {point['rate']:g}/s). " + "; ".join(
                       f"{kind} {names} from {start * 1000:.1f} to {stop * 1000:.1f} ms"
                       for kind, names, start, stop in spans))
    caption = (f"Widths are the record's own means at {point['rate']:g} arrivals per second: a decode step of "
               f"{format_latency(step)} and a prefill call of {format_latency(prefill)} (the prompts admitted together, "
               f"{point['server']['prompts_per_prefill_call']:.1f} on average, packed into one). While {STALL_EXAMPLE[-1].name}'s "
               f"prompt is prefilled, no running stream advances: A's and B's next token comes after {stalled} "
               f"instead of {format_latency(step)}.")
    return Block(diagrams=[Diagram(stall_canvas(spans, description, stalled).svg(), caption)])

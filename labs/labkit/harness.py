"""The one benchmark harness: what every lab's benchmark.py would otherwise repeat.

- ``parser``/``parse``: the common arguments (--output, --repeats, --warmup, --threads, --seed, --quick),
  bounds checked and the output path proven writable before anything is measured;
- ``Progress``: a tqdm bar with elapsed time and an estimate on a terminal, plain progress lines otherwise;
- ``time_rotated``/``timed_entry``: warmup, then repetitions whose mode order rotates;
- ``compare``: the equivalence entry a record stores, refusing to time modes that disagree;
- ``sweep_config``: the config block of a timing sweep; ``run`` (labkit.writing): header, atomic write, summary
  lines.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from . import bench
from .machines import LabelError, check_label, derived_label

if TYPE_CHECKING:
    from torch import Tensor


def output_path(text: str) -> Path:
    """argparse type for --output: a file path in an existing, writable folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give the record's file path, e.g. results/record.json")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file path such as {path / 'record.json'}")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise argparse.ArgumentTypeError(f"{text} exists and is not a regular file (a link, device or pipe); "
                                         f"the record replaces its file, so give a plain file path")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: folder {folder} does not exist (it is not created for you)")
    try:  # a real write, not os.access: that says yes on a read-only file system mounted writable
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as error:
        raise argparse.ArgumentTypeError(f"{text}: cannot write in {folder}: {error.strerror}") from None
    return path


def machine_label(text: str) -> str:
    """argparse type for --machine."""
    try:
        return check_label(text, "--machine")
    except LabelError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# What every benchmark's --help ends with: what becomes of the record, and what the exit status says.
EPILOG = """\
The modes are checked to give the same logits before anything is timed. The record is written atomically
(a temporary file beside it, renamed into place) with the mode a plain write would give; a failed run, Ctrl-C
or SIGTERM leaves the previous record byte-identical and no temporary file, and says so in one line.
Exit status: 0 written; 2 the modes disagree (nothing is timed); 1 any other failure; 130 Ctrl-C; 143 SIGTERM.
A signal during the rename is held until the rename is done, so the line says which happened."""


def parser(doc: str) -> argparse.ArgumentParser:
    """A parser with the arguments every benchmark takes; the lab adds its own."""
    result = argparse.ArgumentParser(description=doc.split("\n\n")[0], epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = result.add_argument
    add("--output", type=output_path, required=True, help="record to write (JSON), in an existing folder")
    add("--repeats", type=int, default=7, help="timed repetitions per mode (default: %(default)s)")
    add("--warmup", type=int, default=1, help="untimed runs per mode first (default: %(default)s)")
    add("--threads", type=int, default=1, help="torch.set_num_threads (default: %(default)s)")
    add("--seed", type=int, default=0, help="model weights and token ids (default: %(default)s)")
    add("--quick", action="store_true", help="smoke test (see below)")
    add("--machine", type=machine_label, default=None,
        help="label of the machine in the record (default: derived from the CPU model and --threads)")
    return result


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None, quick: dict[str, Any],
          bounds: dict[str, tuple[int, int]]) -> argparse.Namespace:
    """Parse, apply --quick's settings, and check every integer against its (low, high) bounds."""
    parser.epilog = ("--quick sets " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in quick.items())
                     + "\n\n" + EPILOG)
    args = parser.parse_args(argv)
    if args.quick:  # what the command line set itself stays as given
        vars(args).update({key: value for key, value in quick.items() if getattr(args, key) == parser.get_default(key)})
    if args.machine is None:  # a record under results/machines/<lab>/ is named for its machine
        in_machines = args.output.resolve().parent.parent.name == "machines"
        try:
            args.machine = check_label(args.output.stem, "--output") if in_machines else derived_label()
        except LabelError as error:
            parser.error(str(error))
    elif args.output.resolve().parent.parent.name == "machines" and args.output.stem != args.machine:
        parser.error(f"--output {args.output} is the record of machine {args.output.stem!r}, not of --machine {args.machine!r}")
    limits = {"repeats": (1, 1000), "warmup": (0, 100), "threads": (1, 256), **bounds}
    for name, (low, high) in limits.items():
        value = getattr(args, name)
        for item in value if isinstance(value, list) else [value]:
            if not low <= item <= high:
                parser.error(f"--{name.replace('_', '-')} must lie in [{low}, {high}], got {item}")
    if hasattr(args, "lengths") and args.lengths != sorted(set(args.lengths)):
        parser.error(f"--lengths must be strictly ascending, got {args.lengths}")
    return args


class Progress:
    """Progress over ``total`` timed units: a bar on a terminal, one 'benchmark:' line per unit otherwise."""

    def __init__(self, total: int) -> None:
        self.bar = tqdm(total=total, file=sys.stderr, unit="run", dynamic_ncols=True, leave=False,
                        bar_format="{desc} {bar} {n_fmt}/{total_fmt} [{elapsed} elapsed, ~{remaining} left]",
                        disable=not sys.stderr.isatty())

    def step(self, message: str) -> None:
        """One unit of the total is about to run."""
        if self.bar.disable:
            bench.progress(message)
        else:
            self.bar.set_description_str(message, refresh=False)
            self.bar.update(1)

    def note(self, message: str) -> None:
        """A line that does not advance the bar."""
        if self.bar.disable:
            bench.progress(message)
        else:
            self.bar.write(bench.stamped(message), file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


def time_rotated(modes: Sequence[str], run: Callable[[str], int], repeats: int, warmup: int,
                 progress: Progress, label: str) -> tuple[list[list[str]], dict[str, list[int]]]:
    """Warm every mode up, then time ``repeats`` rounds; round r starts with mode r mod len(modes)."""
    order, durations, _ = time_rounds(modes, run, repeats, warmup, progress, label)
    return order, durations


def time_rounds(modes: Sequence[str], run: Callable[[str], int], rounds: int, warmup: int, progress: Progress,
                label: str, before_round: Callable[[], Any] | None = None
                ) -> tuple[list[list[str]], dict[str, list[int]], list[Any]]:
    """Paired rounds: warm every mode up, then ``rounds`` rounds, each ``before_round()`` (a floor's read pass, say;
    its results are returned one per round) and then every mode once, round r starting with mode r mod len(modes).
    Whatever the machine does during a round it does to every party of it, so a ratio of two of them in one round
    (labkit.summary.paired) cancels the drift a whole run has."""
    for mode in modes:
        for _ in range(warmup):
            run(mode)
    durations: dict[str, list[int]] = {mode: [] for mode in modes}
    orders, beside = [], []
    for repetition in range(rounds):
        order = bench.run_order(modes, repetition)
        progress.step(f"{label}: repetition {repetition + 1}/{rounds}, {order[0]} first")
        if before_round is not None:
            beside.append(before_round())
        for mode in order:
            durations[mode].append(run(mode))
        orders.append(order)
    return orders, durations, beside


def timed_entry(length: int, steps: int, equivalence: dict[str, Any], modes: Sequence[str],
                run: Callable[[str], int], args: argparse.Namespace, progress: Progress,
                label: str) -> dict[str, Any]:
    """One length of a sweep: its equivalence (already proven) and every mode's timed repetitions."""
    order, durations = time_rotated(modes, run, args.repeats, args.warmup, progress, label)
    return {"length": length, "steps": steps, "equivalence": equivalence, "order": order,
            "modes": {mode: {"durations_ns": durations[mode]} for mode in modes}}


def seed_and_threads(args: argparse.Namespace) -> None:
    """The process-wide settings every timing depends on, from the common arguments."""
    import torch

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)


def token_ids(vocab_size: int, batch: int, length: int, seed: int) -> Tensor:
    """Seeded ids (batch, length), drawn once per length so every mode consumes exactly the same sequence."""
    import torch

    generator = torch.Generator().manual_seed(seed * 1_000_003 + length)
    return torch.randint(0, vocab_size, (batch, length), generator=generator)


def sweep(args: argparse.Namespace, measure: Callable[[int, Progress, str], dict[str, Any]],
          noun: str = "length") -> list[dict[str, Any]]:
    """Every length of --lengths through ``measure(length, progress, label)``: raw durations only, whose
    statistics are derived when the record is read (labkit.summary.sweep_figures)."""
    progress = Progress(total=len(args.lengths) * args.repeats)
    try:
        lengths = [measure(length, progress, f"[{number}/{len(args.lengths)}] {noun} {length}")
                   for number, length in enumerate(args.lengths, start=1)]
    finally:
        progress.close()
    return lengths


def compare(candidate: Tensor, reference: Tensor, atol: float, rtol: float, what: str) -> dict[str, Any]:
    """The equivalence entry for ``candidate`` against ``reference`` logits (..., vocab); raises
    EquivalenceError beyond atol + rtol x |reference|, so disagreeing modes are never timed."""
    import torch  # here: labkit stays importable by the torch-free site build

    difference = float((candidate - reference).abs().max())
    if not torch.allclose(candidate, reference, atol=atol, rtol=rtol):
        raise bench.EquivalenceError(f"{what} by up to {difference:.3g}, beyond atol={atol}, rtol={rtol}")
    return {"max_abs_diff": difference, "max_abs_reference": float(reference.abs().max()),
            "within_tolerance": True,
            "argmax_agrees_every_step": bool((candidate.argmax(-1) == reference.argmax(-1)).all())}


def sweep_config(args: argparse.Namespace, modes: Sequence[str], baseline: str, workload: str, timer: str,
                 **extra: Any) -> dict[str, Any]:
    """The benchmark block of a timing sweep's config: every setting the timings depend on."""
    return {"seed": args.seed, "lengths": args.lengths, "repeats": args.repeats, "warmup": args.warmup,
            "threads": args.threads, **extra, "modes": list(modes), "baseline": baseline,
            "order_policy": bench.ORDER_POLICY, "workload": workload, "timer": timer,
            "quick": bool(args.quick)}  # a smoke test's record must not read as a machine's measurement


def sweep_summary(record: dict[str, Any]) -> list[str]:
    """The closing lines of a sweep: per length, each mode's median per step and the speedups."""
    lines = []
    for entry in record["lengths"]:
        per_step = ", ".join(f"{mode} {values['median_ns'] / entry['steps'] / 1e3:.1f} us"
                             for mode, values in entry["modes"].items())
        speedups = ", ".join(f"{record['config']['benchmark']['baseline']}/{mode} {s['ratio_of_medians']:.2f}x"
                             for mode, s in entry["speedup"].items())
        lines.append(f"length {entry['length']}: median per step {per_step}; {speedups}")
    return lines


# The benchmarks call harness.run; it lives with the record's side (labkit.writing), which no measurement runs.
from .writing import run as run  # noqa: E402

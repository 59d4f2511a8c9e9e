"""Views word figures; they do not compute them. Every number a page shows is derived once, by a lab's figures
module, stored in the record and checked by the build; a view may only convert its unit or place it in a picture.

This test walks the syntax tree of every views module (each lab's views package and the site's shared
renderers) and refuses arithmetic between two values that are not literals or named constants: ``a / b``,
``a - b``, ``sum(...)``, a median. ``x / 1e6`` (a unit), ``n - 1`` (an index) and ``count * BYTES`` (a named
constant) pass. Only the allow-list below may do more, each entry with its reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from labkit.manifest import discover_labs

from conftest import ROOT

ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
# Calls that compute a figure from several values (a sum, a mean, a quantile), whoever wrote them.
AGGREGATES = {"sum", "fsum", "prod", "mean", "fmean", "median", "percentile", "quantile", "quantiles", "stdev"}

# Site modules that render a record (the rest of site_hooks orchestrates, loads or draws primitives).
SITE_VIEWS = ("prose.py", "views.py", "machines_view.py", "reproduce.py", "captions.py", "site_views.py")

# "<path>" or "<path>::<function>" -> why arithmetic there is not a figure of the record.
GEOMETRY = ("diagram geometry: places a drawn example's shapes and labels on a canvas; every figure it states is "
            "read from the record or computed by the lab's figures module")
ALLOWED: dict[str, str] = {
    "labs/llm/kv-cache/kv_cache_views/pictures.py": GEOMETRY,
    "labs/llm/kv-quant/kv_quant_views/pictures.py": GEOMETRY,
    "labs/llm/kv-storage/kv_storage_views/pictures.py": GEOMETRY,
    "labs/llm/decode-bandwidth/decode_bandwidth_views/pictures.py::stacked_bar": "diagram geometry: a bar's segments laid end to end, each as long as the stored bytes it draws",
    "labs/llm/decode-bandwidth/decode_bandwidth_views/pictures.py::step_bytes_canvas": "diagram geometry: placing shapes on a canvas",
    "labs/llm/decode-bandwidth/decode_bandwidth_views/pictures.py::regime_canvas": "diagram geometry: placing shapes on a canvas",
    "labs/llm/decode-bandwidth/decode_bandwidth_views/trained.py::bars_canvas": "diagram geometry: placing shapes on a canvas",
    "labs/llm/decode-bandwidth/decode_bandwidth_views/pictures.py::px": "diagram geometry: the roofline's log x axis",
    "labs/llm/decode-bandwidth/decode_bandwidth_views/pictures.py::py": "diagram geometry: the roofline's log y axis",
    "labs/llm/decode-bandwidth/decode_bandwidth_views/pictures.py::roofline_canvas": "diagram geometry: log axes and the two ceilings drawn from the record's stored rates; every dot at its stored intensity and flops per second",
    "labs/llm/kv-serving/kv_serving_views/pictures.py::phases_canvas": "diagram geometry: placing shapes on a canvas",
    "labs/llm/kv-serving/kv_serving_views/pictures.py::iterations_canvas": "diagram geometry: placing shapes on a canvas",
    "labs/llm/kv-serving/kv_serving_views/pictures.py::stall_canvas": "diagram geometry: the replayed timeline's spans placed to scale",
    "labs/llm/kv-window/kv_window_views/pictures.py": GEOMETRY,
    "labs/llm/kv-prefix/kv_prefix_views/pictures.py": GEOMETRY + "; its block ids number a drawn example's blocks",
}


@dataclass(frozen=True)
class Finding:
    path: str
    function: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.function}(): {self.text}"


def constant(node: ast.expr) -> bool:
    """A literal number, a negated one, a named constant (UPPER_CASE, bare or as a module attribute), or
    arithmetic between constants (``1 + BAND`` scales by a constant factor)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return constant(node.operand)
    if isinstance(node, ast.BinOp):
        return constant(node.left) and constant(node.right)
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.Attribute):
        return node.attr.isupper()
    return False


def text_like(node: ast.expr) -> bool:
    """Text or a sequence, whose ``+`` joins and whose ``*`` repeats, neither of them arithmetic: a string
    literal, an f-string, a ``str.join``, a conditional with text in a branch (Python adds no number to
    text, so the other branch is text too), a list or tuple display or comprehension, or such a join."""
    if isinstance(node, ast.JoinedStr | ast.List | ast.Tuple | ast.ListComp):
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.IfExp):
        return text_like(node.body) or text_like(node.orelse)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
        return text_like(node.left) or text_like(node.right)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"


def call_name(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


class Walker(ast.NodeVisitor):
    def __init__(self, path: str, source: str) -> None:
        self.path, self.source = path, source
        self.function = "<module>"
        self.findings: list[Finding] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        outer, self.function = self.function, node.name
        self.generic_visit(node)
        self.function = outer

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815 (ast.NodeVisitor's naming)

    def note(self, node: ast.AST) -> None:
        if f"{self.path}::{self.function}" not in ALLOWED:
            text = ast.get_source_segment(self.source, node) or ast.dump(node)
            self.findings.append(Finding(self.path, self.function, node.lineno, " ".join(text.split())[:100]))

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if (isinstance(node.op, ARITHMETIC) and not (constant(node.left) or constant(node.right))
                and not (text_like(node.left) or text_like(node.right))):
            self.note(node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ARITHMETIC) and not constant(node.value) and not text_like(node.value):
            self.note(node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if call_name(node) in AGGREGATES:
            self.note(node)
        self.generic_visit(node)


def views_modules() -> list[Path]:
    """Every module of every lab's views package (or module), and the site's record renderers."""
    modules: list[Path] = [ROOT / "site_hooks" / name for name in SITE_VIEWS]
    for lab in discover_labs(ROOT):
        folder = ROOT / lab.folder
        package = folder / lab.views
        modules += sorted(package.rglob("*.py")) if package.is_dir() else [folder / f"{lab.views}.py"]
    return modules


def findings(path: Path) -> list[Finding]:
    relative = path.relative_to(ROOT).as_posix()
    if relative in ALLOWED:
        return []
    source = path.read_text()
    walker = Walker(relative, source)
    walker.visit(ast.parse(source, filename=relative))
    return walker.findings


def test_views_compute_no_figure_from_record_values() -> None:
    found = [str(f) for path in views_modules() for f in findings(path)]
    assert found == [], ("derive these in the lab's figures module and store them in the record, or allow-list "
                         "the function with its reason:\n" + "\n".join(found))


def test_every_allowed_entry_names_a_views_module() -> None:
    modules = {path.relative_to(ROOT).as_posix() for path in views_modules()}
    unknown = sorted(name for name in ALLOWED if name.split("::")[0] not in modules)
    assert unknown == [], f"not a views module: {unknown}"


def test_the_walker_catches_arithmetic_between_values_and_passes_unit_conversion_and_joined_text() -> None:
    source = ("def view(record):\n"
              "    a = record['x'] / record['y']\n"
              "    b = record['x'] / 1e6\n"
              "    c = record['n'] - 1\n"
              "    d = record['n'] * BYTES\n"
              "    e = 'text ' + record['name']\n"
              "    f = sum(record['values'])\n"
              "    g = statistics.median(record['values'])\n"
              "    h = ', '.join(record['modes']) + (' (baseline)' if record['b'] else '')\n"
              "    i = ['format'] + ['ppl', 'kl'] * len(record['contexts'])\n"
              "    j = (record['a'] if record['b'] else record['c']) - record['d']\n"
              "    k = record['a'] + record['b'] * 2\n"
              "    m = (1 + BAND) * record['a']\n")
    walker = Walker("example.py", source)
    walker.visit(ast.parse(source))
    assert [finding.line for finding in walker.findings] == [2, 7, 8, 11, 12]

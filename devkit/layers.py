"""The house rules of the source tree, checked: each top-level package imports only the
packages below it, modules and functions stay small enough to read, and a library's
internals are used in its one adapter module only.

    python -m kip.devkit.layers   # the import graph of the top-level packages, and any breach

Each folder installs as ``kip.<folder>`` (pyproject.toml), so the imports name
``kip.transport``, ``kip.pipeline``, ...; the modules of kip/ itself are the ``kip`` layer.

tests/devkit/test_layers.py runs the same checks in CI.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from kip.devkit.internals import reaches

# Bottom to top: a package may import the ones on earlier lines only. Packages on one
# line are peers and must not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("schemas",),             # what travels
    ("topics",),              # where it travels: names, the catalogue, the ACL plan
    ("transport",),           # how kip talks to Kafka: clients, transactions, reading
    ("runtime",),             # settings and metrics every process shares
    ("models",),              # registry, manifests, preprocessing, export
    ("pipeline", "workers"),  # the stages: decide, compute
    ("kip",),                 # the producer SDK and the CLI
    ("devkit",),              # local broker, dev stack, demo, load and fault harnesses
)
RANK = {package: rank for rank, line in enumerate(LAYERS) for package in line}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40
# Functions allowed to be longer, each with the reason.
LONG_FUNCTIONS: dict[str, str] = {}


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    source: str    # the importing top-level package
    target: str    # the imported top-level package


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def modules(root: Path) -> list[Path]:
    return sorted(p for package in RANK for p in (root / package).rglob("*.py"))


def layer_of(name: str) -> str | None:
    """The layer a dotted module name belongs to: ``kip.transport.clients`` is
    transport's, ``kip.client`` the kip layer's; None outside kip."""
    parts = name.split(".")
    if parts[0] != "kip":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in RANK else "kip"


def imports(root: Path) -> list[Import]:
    """Every import (also inside functions) from one kip package of another."""
    found = []
    for path in modules(root):
        source = path.relative_to(root).parts[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in _imported(node):
                target = layer_of(name)
                if target is not None and target != source:
                    found.append(Import(path.relative_to(root), node.lineno, source, target))
    return found


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def upward(found: list[Import]) -> list[Import]:
    """Imports of a package on the same line or above."""
    return [i for i in found if RANK[i.target] >= RANK[i.source]]


def too_long(root: Path) -> list[str]:
    """Modules over ``MAX_MODULE_LINES`` and functions over ``MAX_FUNCTION_LINES`` that
    ``LONG_FUNCTIONS`` does not excuse."""
    out = []
    for path in modules(root):
        text = path.read_text()
        rel = path.relative_to(root)
        if text.count("\n") > MAX_MODULE_LINES:
            out.append(f"{rel}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                name = f"{rel}:{node.name}"
                if lines > MAX_FUNCTION_LINES and name not in LONG_FUNCTIONS:
                    out.append(f"{name}: {lines} lines")
    return out


def graph(found: list[Import]) -> dict[tuple[str, str], int]:
    edges: dict[tuple[str, str], int] = defaultdict(int)
    for i in found:
        edges[(i.source, i.target)] += 1
    return dict(edges)


def main() -> int:
    root = repo_root()
    found = imports(root)
    for (source, target), count in sorted(graph(found).items(),
                                          key=lambda e: (-RANK[e[0][0]], -RANK[e[0][1]])):
        arrow = "UPWARD" if RANK[target] >= RANK[source] else ""
        print(f"{source:>9} -> {target:<9} {count:4d} imports  {arrow}")
    breaches = [f"{i.path}:{i.line}: {i.source} imports {i.target}" for i in upward(found)]
    breaches += too_long(root)
    breaches += [str(r) for r in reaches(root, modules(root))]
    for line in breaches:
        print(line)
    print("house rules hold" if not breaches else f"{len(breaches)} breaches")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())

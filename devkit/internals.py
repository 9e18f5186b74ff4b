"""One door per library: a library's internals are used in its adapter module only.

kip leans on a few things aiokafka, faust, mode, prometheus-client and pydantic keep
private, each for a reason its adapter gives, and each pinned there by a test that fails
when a release changes it. Anywhere else, a use of those is a breach:

- an attribute named ``_x`` (``consumer._client``, ``super()._commit``, or ``self._x``
  in a mixin of a library's class), unless the module itself defines or assigns ``_x``:
  those are kip's own;
- ``getattr``, ``setattr``, ``hasattr`` or ``delattr`` with a literal ``"_x"``;
- a library's own dunder (``__pydantic_serializer__``);
- in a class that derives from a class of aiokafka, faust or mode, a method named
  ``_x``: an override of the library's private part;
- an import of a module the library does not publish as its API
  (``aiokafka.producer.sender``), or of a name starting with ``_``.

A static check cannot know an object's type: a module that defines a private name of
its own and reads the same name off a library object goes unseen. Review covers that.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ADAPTERS: dict[str, str] = {
    "aiokafka": "transport/aiokafka_adapter.py",
    "faust": "pipeline/faust_adapter.py",
    "mode": "pipeline/faust_adapter.py",
    "prometheus_client": "runtime/prometheus_adapter.py",
    "pydantic": "schemas/pydantic_adapter.py",
}
# Each library's modules that are its public API; importing any other is reaching inside.
PUBLIC_MODULES: dict[str, set[str]] = {
    # aiokafka.admin.config_resource: the admin client's public calls take its
    # ConfigResource, which aiokafka.admin does not re-export.
    "aiokafka": {"aiokafka", "aiokafka.abc", "aiokafka.admin", "aiokafka.admin.config_resource",
                 "aiokafka.errors", "aiokafka.helpers", "aiokafka.structs"},
    "faust": {"faust", "faust.types"},
    "mode": {"mode"},
    "prometheus_client": {"prometheus_client"},
    "pydantic": {"pydantic", "pydantic_settings"},
}
LIBRARY_DUNDERS = ("__pydantic",)
# Private-looking names the standard library documents as its API.
STDLIB_API = {"os._exit", "sys._getframe"}
SUBCLASSED_LIBRARIES = ("aiokafka", "faust", "mode")
REFLECTION = {"getattr", "setattr", "hasattr", "delattr"}


@dataclass(frozen=True)
class Reach:
    path: Path
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what} outside its adapter"


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def reaches(root: Path, paths: list[Path]) -> list[Reach]:
    """Every use of a library's internals in ``paths`` (under ``root``) that is not in
    that library's adapter."""
    adapters = {root / a for a in ADAPTERS.values()}
    found = []
    for path in paths:
        if path in adapters:
            continue
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(root)
        found += [Reach(rel, line, what) for line, what in _in_module(tree)]
    return sorted(found, key=lambda r: (str(r.path), r.line))


def _in_module(tree: ast.Module) -> list[tuple[int, str]]:
    own = _own_privates(tree)
    library_names = _library_imports(tree)
    found = []
    for node in ast.walk(tree):
        found += _import_reach(node)
        found += _attribute_reach(node, own)
        found += _reflection_reach(node)
        if isinstance(node, ast.ClassDef) and _derives_from_library(node, library_names):
            found += _subclass_reach(node)
    return found


def _own_privates(tree: ast.AST) -> set[str]:
    """Private names the module defines: functions, classes, class attributes, and
    attributes it assigns on ``self``."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
    return {name for name in own if private(name)}


def _library_of(module: str) -> str | None:
    top = module.split(".")[0]
    top = "pydantic" if top == "pydantic_settings" else top
    return top if top in ADAPTERS else None


def _library_imports(tree: ast.AST) -> set[str]:
    """Names the module imports from aiokafka, faust or mode (classes it may derive
    from), and the libraries' module names themselves."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _library_of(node.module) in SUBCLASSED_LIBRARIES:
                names |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names
                      if _library_of(a.name) in SUBCLASSED_LIBRARIES}
    return names


def _import_reach(node: ast.AST) -> list[tuple[int, str]]:
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        modules = [(node.module, [alias.name for alias in node.names])]
    elif isinstance(node, ast.Import):
        modules = [(alias.name, []) for alias in node.names]
    else:
        return []
    found = []
    for module, names in modules:
        library = _library_of(module)
        if library is None:
            continue
        if module not in PUBLIC_MODULES[library]:
            found.append((node.lineno, f"import of {library}'s internal module {module}"))
        found += [(node.lineno, f"import of {library}'s private {module}.{name}")
                  for name in names if name.startswith("_")]
    return found


def _attribute_reach(node: ast.AST, own: set[str]) -> list[tuple[int, str]]:
    if not isinstance(node, ast.Attribute):
        return []
    base = node.value
    if node.attr.startswith(LIBRARY_DUNDERS):
        return [(node.lineno, f"a library's own {node.attr}")]
    if not private(node.attr) or node.attr in own:
        return []
    if isinstance(base, ast.Name) and f"{base.id}.{node.attr}" in STDLIB_API:
        return []
    return [(node.lineno, f"{ast.unparse(base)}.{node.attr}")]


def _reflection_reach(node: ast.AST) -> list[tuple[int, str]]:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in REFLECTION and len(node.args) >= 2):
        return []
    name = node.args[1]
    if isinstance(name, ast.Constant) and isinstance(name.value, str) and private(name.value):
        return [(node.lineno, f"{node.func.id}(..., {name.value!r})")]
    return []


def _derives_from_library(node: ast.ClassDef, library_names: set[str]) -> bool:
    for base in node.bases:
        root = base
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in library_names:
            return True
    return False


def _subclass_reach(node: ast.ClassDef) -> list[tuple[int, str]]:
    """Overrides of a library class's private methods in a class of kip's that derives
    from it (reads of its private attributes are ``_attribute_reach``'s)."""
    return [(item.lineno, f"{node.name}.{item.name} overrides a library's")
            for item in node.body
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and private(item.name)]

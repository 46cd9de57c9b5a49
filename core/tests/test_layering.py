"""The core's layering, read from its source with ``ast`` (imports inside functions count too):
no import cycles between its modules, ``tir`` imports nothing from ``te``, and the core imports no
plugin by name.

A module importing ``nnvm.x.y`` depends on ``nnvm.x.y`` and on the packages on the way (their
``__init__`` runs first), except the root ``nnvm`` package, the public facade that every module
reaches through ``import nnvm`` and that imports the rest.
"""

from __future__ import annotations

import ast
import pathlib

import nnvm

ROOT = pathlib.Path(nnvm.__file__).parent


def _modules() -> dict:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: pathlib.Path, modules: dict) -> set:
    """The core modules ``name`` imports anywhere in its file (top level or inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            targets = subs or [base]
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name and t != "nnvm":
                found.add(t)
    return found


def _graph() -> dict:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_core_has_no_import_cycles():
    assert _cycles(_graph()) == []


def test_tir_imports_nothing_from_te():
    graph = _graph()
    up = {(m, d) for m, deps in graph.items() if m.startswith("nnvm.tir") for d in deps
          if d == "nnvm.te" or d.startswith("nnvm.te.")}
    assert up == set()


def test_the_core_imports_no_plugin_by_name():
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for m in mods:
                assert not m.startswith(("nnvm_", "nnvm-")), f"{name} imports {m}"


def test_the_checker_sees_cycles_and_function_level_imports(tmp_path):
    """The walk is not vacuous: a cycle made of a top-level and a function-level import is found."""
    (tmp_path / "a.py").write_text("from nnvm.b import g\n")
    (tmp_path / "b.py").write_text("def g():\n    from nnvm.a import f\n")
    modules = {"nnvm.a": tmp_path / "a.py", "nnvm.b": tmp_path / "b.py"}
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph == {"nnvm.a": {"nnvm.b"}, "nnvm.b": {"nnvm.a"}}
    assert _cycles(graph) == [["nnvm.a", "nnvm.b"]]

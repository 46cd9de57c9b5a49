"""The core's layering, read from its source with ``ast`` (imports inside functions count too):
no import cycles between its modules, ``tir`` imports nothing from ``te``, and the core imports no
plugin by name.

A module importing ``nnvm.x.y`` depends on ``nnvm.x.y`` and on the packages on the way (their
``__init__`` runs first), except the root ``nnvm`` package, the public facade that every module
reaches through ``import nnvm`` and that imports the rest.

Packages (``nnvm.graph``, ``nnvm.ops``) and top-level modules (``nnvm.compiler``) are ordered in
``LAYERS``: each imports only from the layers below it, so there is no cycle between packages either.
Imports inside functions are allowed only from ``FUNCTION_LEVEL_IMPORTS``, each with its reason: an
import moved into a function to dodge a cycle hides the cycle from readers, not from Python.
"""

from __future__ import annotations

import ast
import pathlib

import nnvm

ROOT = pathlib.Path(nnvm.__file__).parent

# The core's packages and top-level modules, lowest first: a package imports only from lower layers (and
# from itself). A new package or module goes into the layer it belongs to.
LAYERS = (
    ("errors", "hookspecs", "environment"),  # error types; the hook specifications; NNVM_* variables
    ("calibration",),  # post-training quantization arithmetic (ranges, scales), numpy only
    ("plugins", "limits", "options", "tir"),  # plugin manager and registries; limits; nnvm.Options; loop IR
    ("target", "graph", "kernel_cache"),  # target strings; the graph IR and builder; compiled-kernel store
    ("backend", "te", "kernel_jobs"),  # what a backend implements; tensor expressions; compile workers
    ("ops", "generic_schedule"),  # the standard operators (compute only); the generic schedule
    ("frontend", "passes", "runtime"),  # the shared frontend layer; graph passes; plan, module, loader
    ("lowering",),  # a model up to each group's schedule: what the compiler and the tuner share
    ("autotune", "batch_loop"),  # templates, tuning logs, tasks, the tuner; a symbolic batch's loop
    ("cpu", "gpu"),  # the shared backend layers (schedule templates, GPU stages)
    ("bench", "compiler"),  # nnvm bench; nnvm.compile
    ("dynamic", "staged"),  # symbolic modules, on the compiler; a model cut at data-dependent nodes
    ("generate",),  # greedy decoding with a KV cache on a symbolic module (nnvm generate)
    ("cli", ""),  # the command line; the root package, the public facade
)

# Imports inside functions, (module, what it imports) -> why. Nothing else: fix the dependency instead
# (pass the thing in, or move the shared piece down a layer).
FUNCTION_LEVEL_IMPORTS = {
    # optional dependencies, imported where they are needed
    ("nnvm.autotune.tuner", "sklearn.ensemble"): "the model-guided tuner's cost model (nnvm[tune])",
    ("nnvm.autotune.tuner", "threadpoolctl"): "comes with scikit-learn, only for its cost model",
    ("nnvm.bench", "onnxruntime"): "nnvm bench --compare onnxruntime; not a dependency of the core",
    ("nnvm.generate", "openvino"): "nnvm generate --compare openvino; not a dependency of the core",
    ("nnvm.cli", "nnvm.autotune.cluster"): "nnvm tune --cluster: it imports Ray (nnvm[cluster])",
    # plugin loading: the backend registered for a target kind, asked when it is needed
    ("nnvm.target", "nnvm.plugins"): "Target.backend",
    ("nnvm.runtime.module", "nnvm.plugins"): "nnvm.load asks the installed backends for a foreign file",
}
MAX_FUNCTION_LEVEL_IMPORTS = 30


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


def _package(module: str) -> str:
    """``nnvm.graph.ir`` -> ``graph``, ``nnvm.compiler`` -> ``compiler``, ``nnvm`` -> ``""``."""
    return module.split(".")[1] if "." in module else ""


def _function_level_imports() -> list:
    """``(module, imported module, line)`` for every import statement inside a function of the core."""
    found = []

    def visit(name, node, inside):
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, ast.Import | ast.ImportFrom):
                target = child.names[0].name if isinstance(child, ast.Import) else child.module or ""
                found.append((name, target, child.lineno))
            visit(name, child, inside or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    for name, path in _modules().items():
        visit(name, ast.parse(path.read_text()), False)
    return found


def test_packages_import_only_from_lower_layers():
    layer = {pkg: k for k, pkgs in enumerate(LAYERS) for pkg in pkgs}
    unplaced = {_package(m) for m in _modules()} - set(layer)
    assert not unplaced, f"put these packages or modules into a layer of LAYERS: {sorted(unplaced)}"
    upward = sorted(f"{m} -> {d}" for m, deps in _graph().items() for d in deps
                    if _package(m) != _package(d) and layer[_package(d)] >= layer[_package(m)])
    assert upward == [], "imports from the same or a higher layer:\n" + "\n".join(upward)


def test_no_cycles_between_packages():
    packages: dict = {}
    for m, deps in _graph().items():
        own = _package(m)
        packages.setdefault(own, set()).update(_package(d) for d in deps if _package(d) != own)
    assert _cycles(packages) == []


def test_imports_inside_functions_are_on_the_allowed_list():
    found = _function_level_imports()
    unlisted = sorted(f"{m}:{line} imports {t}" for m, t, line in found
                      if (m, t) not in FUNCTION_LEVEL_IMPORTS)
    assert unlisted == [], ("imports inside functions, not on FUNCTION_LEVEL_IMPORTS (import at the top, "
                            "or fix the dependency):\n" + "\n".join(unlisted))
    assert len(found) <= MAX_FUNCTION_LEVEL_IMPORTS
    stale = set(FUNCTION_LEVEL_IMPORTS) - {(m, t) for m, t, _ in found}
    assert stale == set(), f"allowed but no longer there (remove from the list): {sorted(stale)}"


# File names the core uses more than once, each with its reason; any other name says which room it is in.
SHARED_NAMES = {
    "__init__": "packages",
    "plugin": "each layer's entry point module (nnvm.ops.plugin, nnvm.cpu.plugin, ...)",
    "backend": "nnvm.backend is what every backend implements; nnvm.gpu.backend the GPU backends' base class",
    "lower": "te.lower lowers a schedule to the loop program, tir.lower lowers the loop program further",
}


def test_module_names_do_not_collide():
    """No two modules of the core share a file name (three ``schedules.py`` and four layout modules once
    did), and no module sits beside a package of its own name (``runtime/fibers.py`` and ``fibers/``)."""
    by_name: dict = {}
    for path in ROOT.rglob("*.py"):
        by_name.setdefault(path.stem, []).append(path.relative_to(ROOT).as_posix())
    shared = {name: sorted(paths) for name, paths in by_name.items()
              if len(paths) > 1 and name not in SHARED_NAMES}
    assert shared == {}, f"name these for what they do: {shared}"
    beside = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py") if p.with_suffix("").is_dir())
    assert beside == []

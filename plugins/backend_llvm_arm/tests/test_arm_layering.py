"""The Arm plugin is target facts on the shared LLVM layer: it imports the layer's public names only
(``nnvm_backend_llvm.__all__``), nothing of the x86 plugin, and gets its schedules from the core's CPU
layer (key ``cpu``), not from a copy: read from its source with ``ast`` (imports inside functions count
too)."""

from __future__ import annotations

import ast
import pathlib

import nnvm_backend_llvm
import nnvm_backend_llvm_arm
from nnvm.target import parse_target

SOURCE = pathlib.Path(nnvm_backend_llvm_arm.__file__).parent


def _imports(path: pathlib.Path) -> list:
    """(module, names) of every import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", tuple(a.name for a in node.names)))
    return found


def test_the_arm_plugin_imports_only_the_llvm_layers_public_names():
    public = set(nnvm_backend_llvm.__all__)
    wrong = []
    for path in sorted(SOURCE.rglob("*.py")):
        for module, names in _imports(path):
            if module.startswith(("nnvm_backend_llvm.", "nnvm_backend_llvm_x86")):
                wrong.append(f"{path.name}: from {module} import {', '.join(names)}")
            elif module == "nnvm_backend_llvm" and not set(names) <= public:
                wrong.append(f"{path.name}: {sorted(set(names) - public)} not in the LLVM layer's __all__")
    assert not wrong, "\n".join(wrong)
    assert not (SOURCE / "schedules.py").exists(), "the CPU templates come from nnvm.cpu, key cpu"


def test_arm_targets_answer_the_cpu_layers_questions():
    for kind in ("aarch64", "armv7"):
        target = parse_target(kind)
        assert target.keys == ("cpu",)
        assert target.backend.vector_lanes(target) == 4, kind
        assert target.backend.blocked_layout(target) is False, kind

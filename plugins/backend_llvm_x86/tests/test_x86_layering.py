"""The x86 plugin is target facts on the shared LLVM layer: it imports the layer's public names only
(``nnvm_backend_llvm.__all__``) and nothing of the Arm plugin; read from its source with ``ast``."""

from __future__ import annotations

import ast
import pathlib

import nnvm_backend_llvm
import nnvm_backend_llvm_x86

SOURCE = pathlib.Path(nnvm_backend_llvm_x86.__file__).parent


def test_the_x86_plugin_imports_only_the_llvm_layers_public_names():
    public = set(nnvm_backend_llvm.__all__)
    wrong = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [(a.name, ()) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [(node.module or "", tuple(a.name for a in node.names))]
            else:
                continue
            for module, names in modules:
                if module.startswith(("nnvm_backend_llvm.", "nnvm_backend_llvm_arm")):
                    wrong.append(f"{path.name}: import of {module}")
                elif module == "nnvm_backend_llvm" and not set(names) <= public:
                    wrong.append(f"{path.name}: {sorted(set(names) - public)} not in the layer's __all__")
    assert not wrong, "\n".join(wrong)

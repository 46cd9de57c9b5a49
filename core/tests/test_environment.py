"""The environment is read in one module (``nnvm.environment``), and every variable it reads is documented."""

from __future__ import annotations

import pathlib
import re

import nnvm
from nnvm import environment

ROOT = pathlib.Path(nnvm.__file__).parent
README = ROOT.parents[2] / "README.md"
# Modules that still read their variables themselves, until issue 38 moves them to nnvm.environment
# (runtime/ is rewritten by its first part; the kernel cache resolves its directory at the top already).
PENDING = {"runtime/host_kernels.py", "runtime/crt.py", "runtime/threads.py", "kernel_cache.py"}
# os.environ.get("NNVM_X"), os.getenv("NNVM_X"), os.environ["NNVM_X"] not followed by an assignment
READ = re.compile(r"""(?:environ\.get\(|getenv\()\s*["'](NNVM_\w*)"""
                  r"""|environ\[["'](NNVM_\w*)["']\](?!\s*=[^=])""")


def test_nnvm_variables_are_read_only_in_the_environment_module():
    readers = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        names = {m.group(1) or m.group(2) for m in READ.finditer(path.read_text())}
        if names and rel not in PENDING | {"environment.py"}:
            readers[rel] = sorted(names)
    assert readers == {}, f"read these through nnvm.environment: {readers}"


def test_every_variable_is_documented_in_the_readme():
    text = README.read_text()
    missing = [name for name in environment.VARIABLES if f"`{name}" not in text]
    assert missing == []
    assert len(environment.VARIABLES) <= 9  # the eight a user needs, and the GPU runner's test switch


def test_the_overlay_reads_the_variable_given():
    env = {"NNVM_PLUGINS": "onnx, llvm-x86,", "NNVM_DISABLE_PLUGIN_AUTOLOAD": "0", "NNVM_X86_LAYOUT": "0",
           "NNVM_CACHE_DIR": "/somewhere"}
    assert environment.plugin_allow_list(env) == {"onnx", "llvm-x86"}
    assert environment.plugin_autoload(env)
    assert not environment.plugin_autoload({"NNVM_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert environment.cpu_switch("LAYOUT", env) == "0" and environment.cpu_switch("SHUFFLE", env) == ""
    assert str(environment.cache_dir(env)) == "/somewhere"

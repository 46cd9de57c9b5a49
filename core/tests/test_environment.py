"""The environment is read in one module (``nnvm.environment``): at most eight ``NNVM_*`` variables across the
core and every plugin, each documented in the README. The one reader outside it is the LLVM thread pool's
C code, which runs in exported modules with no Python (``nnvm.environment`` says why)."""

from __future__ import annotations

import pathlib
import re

import nnvm
from nnvm import environment

ROOT = pathlib.Path(nnvm.__file__).parent
REPO = ROOT.parents[2]
README = REPO / "README.md"
# What ships in the core's, the plugins' and the examples' packages (their tests and nnvm_testing do not).
SOURCES = [ROOT, *sorted(REPO.glob("plugins/*/src")), *sorted(REPO.glob("examples/*/src")),
           REPO / "conformance" / "src"]
# Readers outside nnvm/environment.py, with what each may read: the thread pool links into exported modules
# that the C runtime runs with no Python in the process, so it reads its two variables itself.
C_READERS = {
    "plugins/backend_llvm/src/nnvm_backend_llvm/nnvm_pool.c": {"NNVM_NUM_THREADS", "NNVM_POOL_AFFINITY"},
}
# os.environ.get("NNVM_X"), os.getenv("NNVM_X"), os.environ["NNVM_X"] not followed by an assignment,
# "NNVM_X" in os.environ; and C's getenv("NNVM_X")
READ = re.compile(r"""(?:environ\.get\(|getenv\()\s*["'](NNVM_\w*)"""
                  r"""|environ\[["'](NNVM_\w*)["']\](?!\s*=[^=])"""
                  r"""|["'](NNVM_\w*)["']\s+(?:not\s+)?in\s+(?:os\.)?environ""")
C_SUFFIXES = {".c", ".h", ".cc", ".cpp", ".js"}


def _reads(text: str) -> set:
    return {next(g for g in m.groups() if g) for m in READ.finditer(text)}


def _readers() -> dict:
    """``{path relative to the repository: the NNVM_* variables it reads}`` over all shipped source."""
    found = {}
    for base in SOURCES:
        for path in base.rglob("*"):
            if path.suffix == ".py" or path.suffix in C_SUFFIXES:
                names = _reads(path.read_text(errors="replace"))
                if names:
                    found[path.relative_to(REPO).as_posix()] = names
    return found


def test_nnvm_variables_are_read_only_in_the_environment_module():
    readers = _readers()
    module = (ROOT / "environment.py").relative_to(REPO).as_posix()
    stray = {path: sorted(names) for path, names in readers.items()
             if path != module and not names <= C_READERS.get(path, set())}
    assert stray == {}, f"read these through nnvm.environment: {stray}"
    assert "plugins/backend_llvm/src/nnvm_backend_llvm/nnvm_pool.c" in readers  # the walk reaches C source


def test_at_most_eight_variables_and_every_one_documented():
    read = set().union(*_readers().values())
    unlisted = read - set(environment.VARIABLES)
    assert unlisted == set(), f"read but not listed in nnvm.environment.VARIABLES: {sorted(unlisted)}"
    assert len(environment.VARIABLES) <= 8
    text = README.read_text()
    table = {m.group(1) for m in re.finditer(r"^\| `(NNVM_\w+)", text, re.M)}
    assert table == set(environment.VARIABLES), "the README's table and nnvm.environment.VARIABLES differ"


def test_no_cpu_switch_is_an_environment_variable():
    """The CPU layer's A/B switches are ``Options.cpu_switches``; the ``NNVM_X86_*`` overlay is gone."""
    mentions = sorted(path.relative_to(REPO).as_posix() for base in SOURCES for path in base.rglob("*.py")
                      if "NNVM_X86_" in path.read_text())
    assert mentions == []


def test_the_pattern_sees_each_way_of_reading():
    text = """os.environ.get("NNVM_A"); os.getenv('NNVM_B'); os.environ["NNVM_C"]; "NNVM_D" in os.environ
    os.environ["NNVM_E"] = "1"; getenv("NNVM_F");"""
    assert _reads(text) == {"NNVM_A", "NNVM_B", "NNVM_C", "NNVM_D", "NNVM_F"}


def test_the_module_reads_the_variable_given():
    env = {"NNVM_PLUGINS": "onnx, llvm-x86,", "NNVM_DISABLE_PLUGIN_AUTOLOAD": "0",
           "NNVM_CACHE_DIR": "/somewhere", "NNVM_GPU_THREAD_ORDER": "Reversed", "NNVM_NUM_THREADS": "3"}
    assert environment.plugin_allow_list(env) == {"onnx", "llvm-x86"}
    assert environment.plugin_autoload(env)
    assert not environment.plugin_autoload({"NNVM_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert str(environment.cache_dir(env)) == "/somewhere"
    assert str(environment.kernel_cache_dir(env)) == "/somewhere/kernels"
    assert str(environment.kernel_cache_dir({"NNVM_KERNEL_CACHE_DIR": "/own"})) == "/own"
    assert environment.kernel_cache_dir({"NNVM_KERNEL_CACHE_DIR": "off"}) is None
    assert environment.gpu_threads_reversed(env) and not environment.gpu_threads_reversed({})
    assert environment.num_threads(env) == "3" and environment.pool_affinity(env) == ""

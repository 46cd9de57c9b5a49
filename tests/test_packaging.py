"""How nnvm is packaged and tested: fresh installs of the core alone and of the core with one plugin, and
the skip policy every test runs under (the root ``conftest.py``).

The installs are real, not editable: ``uv pip install ./core`` into a new virtual environment, as a user
would, so a file missing from the wheel or an entry point typo shows up here.
"""

from __future__ import annotations

import json
import re
import textwrap
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

PLUGINS_JSON = "import json, nnvm; print(json.dumps(nnvm.plugins()))"


def _version(folder: str) -> str:
    with open(REPO_ROOT / folder / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def _plugins(run_in, bin_dir) -> list[tuple[str, dict]]:
    """What the installed nnvm reports, through the CLI and through the Python API."""
    found = []
    for how, program, args in (("nnvm plugins --json", "nnvm", ["plugins", "--json"]),
                               ("nnvm.plugins()", "python", ["-c", PLUGINS_JSON])):
        proc = run_in(bin_dir, program, *args)
        assert proc.returncode == 0, f"{how} failed in a fresh venv: {proc.stderr}"
        found.append((how, json.loads(proc.stdout)))
    return found


@pytest.fixture(scope="module")
def core_alone(fresh_venv):
    return fresh_venv("core")


def test_core_alone_lists_no_frontend_and_no_backend(core_alone, run_in):
    for how, info in _plugins(run_in, core_alone):
        assert info["frontend"] == [], f"{how}: core alone lists frontends {info['frontend']}"
        assert info["backend"] == [], f"{how}: core alone lists backends {info['backend']}"
        others = {row["distribution"] for kind in ("pass", "op") for row in info[kind]} - {"nnvm"}
        assert not others, f"{how}: core alone lists plugins from {others}"


def test_core_alone_installs_no_plugin_dependency(core_alone, run_in):
    probe = "import importlib.util as u; print([m for m in ('onnx', 'llvmlite', 'nnvm_frontend_onnx', " \
            "'nnvm_backend_llvm', 'nnvm_backend_llvm_x86') if u.find_spec(m)])"
    proc = run_in(core_alone, "python", "-c", probe)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"core alone pulled in {proc.stdout.strip()}"


def test_core_alone_ships_no_test_helpers(core_alone, run_in):
    """The test suites' helpers live in ``nnvm-testing`` (a dev dependency), not in the core's wheel."""
    probe = "import importlib.util as u, pathlib, nnvm; root = pathlib.Path(nnvm.__file__).parent; " \
            "print(sorted(p.relative_to(root).as_posix() for p in root.rglob('*testing*')), " \
            "[m for m in ('nnvm.testing', 'nnvm_testing') if u.find_spec(m)])"
    proc = run_in(core_alone, "python", "-c", probe)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[] []", f"the core's wheel ships test helpers: {proc.stdout.strip()}"


def test_core_alone_lowers_a_tensor_expression(core_alone, run_in):
    script = textwrap.dedent("""
        import nnvm
        from nnvm import te
        n = 64
        A = te.placeholder((n, n), name="A"); B = te.placeholder((n, n), name="B")
        k = te.reduce_axis((0, n), name="k")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        s = te.create_schedule(C.op)
        xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
        ko, ki = s[C].split(k, factor=4)
        s[C].reorder(ko, xi, ki, yi); s[C].unroll(ki); s[C].vectorize(yi); s[C].parallel(xo)
        print(nnvm.lower(s, [A, B, C]))
    """)
    proc = run_in(core_alone, "python", "-c", script)
    assert proc.returncode == 0, f"lowering failed with the core alone: {proc.stderr}"
    for needle in ("for ", "parallel", "vectorized", "C[", "A[", "B["):
        assert needle in proc.stdout, f"{needle!r} missing from the loop program:\n{proc.stdout}"


def test_core_alone_round_trips_a_graph_through_json(core_alone, run_in):
    script = textwrap.dedent("""
        import numpy as np
        import nnvm
        g = nnvm.Graph(
            nodes=[nnvm.Node("dense", "fc", ["x", "w"], ["y"], {"units": 4}),
                   nnvm.Node("relu", "act", ["y"], ["z"])],
            inputs=["x"], outputs=["z"],
            params={"w": np.arange(12, dtype="float32").reshape(4, 3)},
            types={"x": nnvm.TensorType((2, 3), "float32"), "z": nnvm.TensorType((2, 4), "float32")},
            name="tiny")
        text = g.to_json()
        back = nnvm.Graph.from_json(text)
        assert back.to_json() == text, "to_json(from_json(text)) differs from text"
        assert back.nodes == g.nodes and back.types == g.types and back.name == "tiny"
        assert back.params["w"].dtype == np.float32 and (back.params["w"] == g.params["w"]).all()
        print("ok")
    """)
    proc = run_in(core_alone, "python", "-c", script)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", f"graph JSON round trip: {proc.stderr}"


def test_core_alone_runs_an_exported_module(core_alone, run_in, tmp_path):
    """Deployment: a module exported with the full toolchain runs where only the core is installed."""
    import numpy as np
    import onnxruntime as ort

    import nnvm
    from nnvm_testing.frontend_onnx import models

    path = models.cached_model_path("mobilenet_v2")
    artifact = tmp_path / "mobilenet_v2.so"
    nnvm.compile(path, target="llvm").export(str(artifact))
    x = np.random.default_rng(7).standard_normal((1, 3, 224, 224)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = (f"import numpy as np, nnvm; m = nnvm.load({str(artifact)!r}); "
              f"np.save({str(tmp_path / 'y.npy')!r}, m.run(np.load({str(tmp_path / 'x.npy')!r}))[0])")
    proc = run_in(core_alone, "python", "-c", script)
    assert proc.returncode == 0, proc.stderr
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    err = float(np.abs(np.load(tmp_path / "y.npy") - want).max() / np.abs(want).max())
    assert err < 1e-4, f"exported mobilenet_v2 under the core alone: max relative error {err:.2e}"


def test_core_alone_builds_the_c_runtime(core_alone, run_in, tmp_path):
    """The C runtime's sources ship in the core's wheel: ``nnvm runtime build`` works with the core alone,
    and its ``nnvm-run`` runs an exported module (checked against numpy)."""
    import subprocess

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    import nnvm

    out = tmp_path / "rt"
    proc = run_in(core_alone, "nnvm", "runtime", "build", "--target", "llvm", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "nnvm-run: " in proc.stdout and (out / "libnnvm_runtime.a").exists(), proc.stdout
    w = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 6])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    nnvm.compile(model, target="llvm").export(tmp_path / "mm.so")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "x.npy", x)
    done = subprocess.run([str(out / "nnvm-run"), str(tmp_path / "mm.so"), str(tmp_path / "x.npy"), "-o",
                           str(tmp_path / "y.npy")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x @ w, rtol=1e-5, atol=1e-5)


def test_core_with_onnx_frontend_lists_exactly_that_frontend(fresh_venv, run_in):
    bin_dir = fresh_venv("core", "plugins/frontend_onnx")
    want = ("nnvm-frontend-onnx", _version("plugins/frontend_onnx"))
    for how, info in _plugins(run_in, bin_dir):
        got = [(row["distribution"], row["version"]) for row in info["frontend"]]
        assert got == [want], f"{how}: frontends {got}, want [{want}]"
        assert info["backend"] == [], f"{how}: lists backends {info['backend']} with no backend installed"
        dists = {row["distribution"] for rows in info.values() for row in rows} - {"nnvm"}
        assert dists == {"nnvm-frontend-onnx"}, f"{how}: plugins from {dists}"


# -- the example plugins of docs/plugins.md ----------------------------------------------------------

# Each example's registration hook -> the entry point name its test package gets.
DOC_EXAMPLES = {"nnvm_register_ops": "softsign", "nnvm_register_frontends": "chain",
                "nnvm_register_passes": "float32", "nnvm_register_backends": "interp"}


def _doc_example_packages(root) -> list:
    """One package per example plugin of docs/plugins.md, each from the documented pyproject.toml."""
    text = (REPO_ROOT / "docs" / "plugins.md").read_text()
    (pyproject,) = re.findall(r"```toml\n(.*?)```", text, re.S)
    modules = {}
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        hooks = [h for h in DOC_EXAMPLES if f"def {h}(" in block]
        if hooks:
            modules[DOC_EXAMPLES[hooks[0]]] = block
    assert sorted(modules) == sorted(DOC_EXAMPLES.values()), f"examples found: {sorted(modules)}"
    folders = []
    for name, source in modules.items():
        package = root / f"doc-{name}"
        (package / "src" / f"nnvm_doc_{name}").mkdir(parents=True)
        (package / "src" / f"nnvm_doc_{name}" / "__init__.py").write_text("")
        (package / "src" / f"nnvm_doc_{name}" / "plugin.py").write_text(source)
        (package / "pyproject.toml").write_text(
            pyproject.replace("nnvm-ops-softsign", f"nnvm-doc-{name}")
            .replace("nnvm_ops_softsign", f"nnvm_doc_{name}").replace("softsign = ", f"{name} = "))
        folders.append(str(package))
    return folders


def test_plugin_examples_of_the_docs_compile_and_run_a_model(fresh_venv, run_in, tmp_path):
    bin_dir = fresh_venv("core", *_doc_example_packages(tmp_path))
    (tmp_path / "model.chain").write_text("1x16\nrelu\nsoftsign\nsigmoid\n")
    script = textwrap.dedent(f"""
        import json
        import numpy as np
        import nnvm
        mod = nnvm.compile({str(tmp_path / "model.chain")!r}, target="interp")
        x = np.random.default_rng(0).standard_normal((1, 16)).astype("float32")
        (y,) = mod.run(x)
        r = np.maximum(x, 0)
        r = r / (1 + np.abs(r))
        want = 1 / (1 + np.exp(-r))
        info = nnvm.plugins()
        print(json.dumps({{"err": float(np.abs(y - want).max()),
                          "dists": sorted({{row["distribution"] for rows in info.values() for row in rows}}),
                          "passes": [row["name"] for row in info["pass"]]}}))
    """)
    proc = run_in(bin_dir, "python", "-c", script)
    assert proc.returncode == 0, f"the docs/plugins.md examples failed: {proc.stderr}"
    got = json.loads(proc.stdout)
    assert got["err"] < 1e-6, f"relu -> softsign -> sigmoid on 'interp': max abs error {got['err']:.2e}"
    assert got["dists"] == sorted(["nnvm", *(f"nnvm-doc-{n}" for n in DOC_EXAMPLES.values())]), got["dists"]
    assert "forbid_float64" in got["passes"], got["passes"]


# -- the skip policy of the root conftest.py ----------------------------------------------------------

POLICY_TESTS = """
    import pytest

    def test_skips():
        pytest.skip("no toolchain here")

    @pytest.mark.skipif(True, reason="no compiler")
    def test_skipif():
        pass

    @pytest.mark.gpu
    def test_gpu_skips():
        pytest.skip("no GPU here")

    @pytest.mark.xfail(reason="known bug")
    def test_xfail():
        assert False

    @pytest.mark.slow
    def test_passes():
        pass
"""


@pytest.fixture
def policy_pytester(pytester):
    pytester.makeconftest((REPO_ROOT / "conftest.py").read_text())
    pytester.makepyfile(test_policy=POLICY_TESTS,
                        test_module_skip="import pytest\npytest.importorskip('no_such_module_nnvm')\n")
    return pytester


def test_skips_pass_outside_ci(policy_pytester, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    # --strict-markers: using 'gpu' and 'slow' is an error unless the conftest registers them
    result = policy_pytester.runpytest_subprocess("-p", "no:xdist", "--strict-markers")
    result.assert_outcomes(passed=1, skipped=4, xfailed=1)


def test_skips_fail_under_ci_unless_marked_gpu(policy_pytester, monkeypatch):
    monkeypatch.setenv("CI", "true")
    result = policy_pytester.runpytest_subprocess("-p", "no:xdist", "-rA", "--continue-on-collection-errors")
    # test_skips fails in its body; test_skipif in setup (reported as an error); the module-level skip
    # as a collection error; the gpu test may skip; xfail stays xfail.
    result.assert_outcomes(passed=1, failed=1, errors=2, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(["*skipped under CI=true*no toolchain here*"])
    result.stdout.fnmatch_lines(["*skipped under CI=true*no compiler*"])
    result.stdout.fnmatch_lines(["*skipped under CI=true*no_such_module_nnvm*"])
    assert result.ret != 0


def test_core_with_mxnet_frontend_alone_reads_a_checkpoint(fresh_venv, run_in):
    """nnvm-frontend-mxnet installs alone next to the core (no mxnet, no onnx) and reads a gluon export."""
    from nnvm_testing import frontend_mxnet as testing
    from nnvm_testing.venvs import pytest_venv

    model = pytest_venv(testing.zoo_models, ["resnet18_v1"])["resnet18_v1"]
    bin_dir = fresh_venv("core", "plugins/frontend_mxnet")
    want = ("nnvm-frontend-mxnet", _version("plugins/frontend_mxnet"))
    for how, info in _plugins(run_in, bin_dir):
        got = [(row["distribution"], row["version"]) for row in info["frontend"]]
        assert got == [want], f"{how}: frontends {got}, want [{want}]"
    script = (f"import nnvm; g, p = nnvm.load_model({str(model.symbol)!r}, "
              "shapes={'data': (1, 3, 224, 224)}); print(g.types[g.outputs[0]].shape, len(p))")
    proc = run_in(bin_dir, "python", "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("(1, 1000)"), proc.stdout

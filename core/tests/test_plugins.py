"""The plugin manager: built-ins through the same hooks, allow-list, and misspelled hooks are errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import nnvm
from nnvm import plugins


def test_builtin_ops_and_passes_are_registered_through_hooks():
    info = nnvm.plugins()
    ops = {r["name"]: r for r in info["op"]}
    assert {"conv2d", "dense", "relu", "add", "batch_norm", "softmax"} <= set(ops)
    assert ops["conv2d"]["plugin"] == "nnvm-std-ops" and ops["conv2d"]["distribution"] == "nnvm"
    assert {r["name"] for r in info["pass"]} >= {"infer_types", "simplify_inference", "fold_constants",
                                                  "eliminate_dead_code", "fuse_ops"}


def _run(code: str, **env):
    import os

    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full, timeout=120)


def test_disable_autoload_keeps_only_builtins():
    proc = _run("import nnvm, json; print(json.dumps(nnvm.plugins()))", NNVM_DISABLE_PLUGIN_AUTOLOAD="1")
    assert proc.returncode == 0, proc.stderr
    import json

    info = json.loads(proc.stdout)
    assert info["frontend"] == [] and info["backend"] == []
    assert info["op"]


def test_misspelled_hook_is_an_error():
    import pluggy

    from nnvm.hookspecs import hookimpl

    class Broken:
        @hookimpl
        def nnvm_register_opz(self, register):  # misspelled on purpose
            pass

    pm = plugins.manager()
    pm.register(Broken(), name="broken-test-plugin")
    try:
        with pytest.raises(pluggy.PluginValidationError):
            pm.check_pending()
    finally:
        pm.unregister(name="broken-test-plugin")


def test_third_party_op_set_uses_the_same_hook():
    code = """
        import nnvm
        from nnvm import plugins, te
        from nnvm.hookspecs import hookimpl
        from nnvm.ops.registry import OpDef, OpPattern

        class MyOps:
            @hookimpl
            def nnvm_register_ops(self, register):
                register(OpDef("my_double", lambda ts, a: [ts[0]],
                               lambda xs, a, ty: [te.compute(xs[0].shape, lambda *i: xs[0][i] * 2.0)],
                               OpPattern.ELEMWISE))

        plugins.manager().register(MyOps(), name="my-ops")
        print(plugins.op_registry().owner("my_double"))
    """
    proc = _run(code, NNVM_DISABLE_PLUGIN_AUTOLOAD="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "my-ops"

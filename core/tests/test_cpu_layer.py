"""The shared CPU layer (``nnvm.cpu``) without a real CPU backend: a backend nnvm has never heard of, with
the key ``cpu``, gets the CPU templates by answering ``vector_lanes``, sized at the width it answers; the
blocked layout pass runs only where it answers ``blocked_layout``; a backend that answers neither gets the
generic schedule. The backend stops at ``build`` (no code generator): what is checked is which template
each fused group got and the configs they chose."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
import nnvm.compiler
from nnvm import plugins
from nnvm.backend import Backend
from nnvm.graph.builder import GraphBuilder
from nnvm.hookspecs import hookimpl
from nnvm.target import parse_target


class _Built(Exception):
    """Raised by the fake backend's ``build``: lowering got that far, no code generator follows."""


class _FakeCPU(Backend):
    name = "test-cpu"
    target_kinds = ("testcpu",)
    keys, device = ("cpu",), "cpu"
    lanes: int | None = 4
    blocked = False

    def vector_lanes(self, target):
        return self.lanes

    def blocked_layout(self, target):
        return self.blocked

    def build(self, funcs, target):
        raise _Built([f.name for f in funcs])


class _Plugin:
    def __init__(self, backend):
        self.backend = backend

    @hookimpl
    def nnvm_register_backends(self, register):
        register(self.backend)


@pytest.fixture
def testcpu(monkeypatch):
    """(target, backend): the kind ``testcpu`` (key ``cpu`` by default: it is no GPU) and its backend."""
    backend = _FakeCPU()
    plugins.reset()
    plugins.manager().register(_Plugin(backend), name="test-cpu")
    yield parse_target("testcpu"), backend
    plugins.reset()


def _graph():
    """conv 3x3 + relu, depthwise conv 3x3, dense, softmax: one group for each template family."""
    rng = np.random.default_rng(7)
    b = GraphBuilder("small")
    x = b.input("x", (1, 3, 8, 8))
    w = b.param("w", (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype("float32"))
    c = b.node1("relu", [b.node1("conv2d", [x, w], {"padding": (1, 1, 1, 1)})])
    wd = b.param("wd", (rng.standard_normal((8, 1, 3, 3)) * 0.3).astype("float32"))
    d = b.node1("conv2d", [c, wd], {"padding": (1, 1, 1, 1), "groups": 8})
    f = b.node1("reshape", [d], {"newshape": (1, 512)})
    y = b.node1("dense", [f, b.param("wf", (rng.standard_normal((16, 512)) * 0.1).astype("float32"))])
    b.output(b.node1("softmax", [y], {"axis": -1}))
    return b.build()


def _chosen(monkeypatch, target, **compile_args) -> list:
    """The templates ``nnvm.compile`` picked for every group of ``_graph()`` on ``target``."""
    chosen = []
    ask = nnvm.compiler.schedule_template

    def spy(target, group):
        template = ask(target, group)
        chosen.append(template)
        return template

    monkeypatch.setattr(nnvm.compiler, "schedule_template", spy)
    with pytest.raises(_Built) as built:
        nnvm.compile(_graph(), target=target, **compile_args)
    assert built.value.args[0], "no kernel reached the backend"
    return chosen


def test_a_new_cpu_backend_answering_vector_lanes_gets_the_templates_at_its_width(testcpu, monkeypatch):
    target, _ = testcpu
    assert target.keys == ("cpu",)
    templates = {t.name: t for t in _chosen(monkeypatch, target) if t is not None}
    want = {"cpu.conv2d_nchw.direct", "cpu.depthwise_conv2d_nchw.direct", "cpu.dense.rfactor",
            "cpu.softmax.rows"}
    assert want <= set(templates), f"templates chosen: {sorted(templates)}"
    # Sized at 4 lanes: the conv tile is one 4-wide vector of the 8 columns (8 at AVX2, 16 at AVX-512
    # would take the whole row), the dense partial sums are one 4-wide vector.
    assert templates["cpu.conv2d_nchw.direct"].fallback["ow_block"] == 4
    assert templates["cpu.dense.rfactor"].fallback["kb"] == 4
    # No blocked layout was asked for: nothing was rewritten into NCHW[x]c or packed.
    assert not {"cpu.conv2d_nchwc.direct", "cpu.dense.packed"} & set(templates)


def test_the_blocked_layout_runs_where_the_backend_asks_for_it(testcpu, monkeypatch):
    target, backend = testcpu
    backend.blocked = True
    names = {t.name for t in _chosen(monkeypatch, target) if t is not None}
    want = {"cpu.conv2d_nchwc.direct", "cpu.depthwise_conv2d_nchwc.tiles", "cpu.dense.packed"}
    assert want <= names, f"templates chosen: {sorted(names)}"


def test_a_cpu_backend_that_does_not_answer_vector_lanes_gets_the_generic_schedule(testcpu, monkeypatch):
    target, backend = testcpu
    backend.lanes = None  # the base class's answer
    assert Backend().vector_lanes(target) is None and not Backend().blocked_layout(target)
    assert all(t is None for t in _chosen(monkeypatch, target))
    from nnvm.cpu import plugin

    assert plugin.nnvm_schedule_template(target=parse_target("cuda"), group=None) is None  # key gpu


def test_cpu_switches_are_options_and_never_the_environment(testcpu, monkeypatch, cpu_switch):
    """``Options(cpu_switches=...)`` turns a CPU switch; a compile without options takes the active ones
    (``cpu_switch``), a compile's own options win over them, the environment plays no part, and an unknown
    switch or value is one sentence before anything compiles."""
    target, backend = testcpu
    backend.blocked = True
    cpu_switch("layout", None)
    names = lambda **kw: {t.name for t in _chosen(monkeypatch, target, **kw) if t is not None}  # noqa: E731
    blocked = names()
    assert "cpu.dense.packed" in blocked
    plain = names(options=nnvm.Options(cpu_switches={"layout": "0"}))
    assert "cpu.dense.packed" not in plain and plain != blocked
    cpu_switch("layout", "0")
    assert names() == plain
    assert names(options=nnvm.Options(cpu_switches={"LAYOUT": "1"})) == blocked
    cpu_switch("layout", None)
    monkeypatch.setenv("NNVM_X86_LAYOUT", "0")  # what switched it before it was an option: nothing now
    assert names() == blocked
    for bad, says in (({"layuot": "0"}, "cpu switch 'layuot' does not exist"),
                      ({"layout": "2"}, "cpu switch layout='2': must be one of 0, 1")):
        with pytest.raises(nnvm.Error, match=says):
            nnvm.compile(_graph(), target=target, options=nnvm.Options(cpu_switches=bad))


def test_compile_keywords_override_the_options_they_differ_from(testcpu, monkeypatch):
    target, _ = testcpu
    seen = []
    real = nnvm.compiler._compile
    monkeypatch.setattr(nnvm.compiler, "_compile",
                        lambda model, target, shapes, options, **kw: seen.append(options) or real(
                            model, target, shapes, options, **kw))
    base = nnvm.Options(opt_level=1, jobs=1, cpu_switches={"templates": "0"})
    for kwargs in ({}, {"opt_level": 2}, {"disabled_passes": ["fold_scale_axis"]}):
        with pytest.raises(_Built):
            nnvm.compile(_graph(), target=target, kernel_cache=False, options=base, **kwargs)
    assert [(o.opt_level, o.jobs, o.cpu_switches, o.kernel_cache, o.disabled_passes) for o in seen] == [
        (1, 1, {"templates": "0"}, False, frozenset()), (2, 1, {"templates": "0"}, False, frozenset()),
        (1, 1, {"templates": "0"}, False, frozenset({"fold_scale_axis"}))]
    with pytest.raises(nnvm.Error, match="opt_level must be 0, 1, 2 or 3"):
        nnvm.Options(opt_level=4)

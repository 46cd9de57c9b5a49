"""Small templates for testing the tuner and for reading as examples; no backend ships them.

- ``matmul_template(n, faults=False)``: a factory (``task_from_factory("nnvm_testing.autotune_templates:
  matmul_template", n=64)``) for ``C = A @ B`` with tile knobs. With ``faults=True`` it gains a
  ``fault`` knob whose values make a candidate misbehave the way real ones do: raise while building,
  kill its process (``exit``), crash it (``segfault``) or never finish (``hang``); the tuner must record
  each as an error and carry on.
- This module is also a plugin: registered by hand (``nnvm.plugins.manager().register(module)``) its
  ``nnvm_schedule_template`` offers a ``testing.dense`` template for every ``dense`` group on ``llvm``,
  so a model with dense layers can be tuned and compiled with tuned configs whatever the backends offer.
"""

from __future__ import annotations

import ctypes
import os
import time

import nnvm
from nnvm import te
from nnvm.autotune.template import ScheduleTemplate
from nnvm.generic_schedule import schedule_loop_nest
from nnvm.te.examples import matmul
from nnvm.te.tensor import ComputeOp

FAULTS = ("none", "raise", "exit", "segfault", "hang")


def _divisors(n: int, candidates) -> list:
    return [c for c in candidates if n % c == 0] or [1]


def _misbehave(fault: str) -> None:
    if fault == "raise":
        raise ValueError("this candidate fails to build (fault=raise)")
    if fault == "exit":
        os._exit(3)
    if fault == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if fault == "hang":
        time.sleep(3600)


def _tile_reduction(stage, tile_j: int, tile_k: int) -> None:
    """(i, j, k) -> i, j.outer, k.outer, k.inner, j.inner (vectorized): the accumulator is a vector."""
    i, j = stage.op.axis
    (k,) = stage.op.reduce_axis
    jo, ji = stage.split(j, factor=tile_j)
    ko, ki = stage.split(k, factor=tile_k)
    stage.reorder(i, jo, ko, ki, ji)
    stage.vectorize(ji)
    return i


def matmul_template(n: int = 64, faults: bool = False):
    """``(template, [A, B, C])`` for an n x n x n matmul; knobs ``tile_j``, ``tile_k``, ``parallel``."""
    A, B, C, _ = matmul(n)
    space = {"tile_j": _divisors(n, (4, 8, 16, 32, 64)), "tile_k": _divisors(n, (1, 2, 4, 8, 16)),
             "parallel": [False, True]}
    fallback = {"tile_j": space["tile_j"][-1], "tile_k": space["tile_k"][0], "parallel": False}
    if faults:
        space["fault"] = list(FAULTS)
        fallback["fault"] = "none"

    def build(config):
        _misbehave(config.get("fault", "none"))
        s = te.create_schedule(C.op)
        i = _tile_reduction(s[C], config["tile_j"], config["tile_k"])
        if config["parallel"]:
            s[C].parallel(i)
        return s

    name = "testing.matmul.faulty" if faults else "testing.matmul"
    return ScheduleTemplate(name, space, fallback, build, flops=2.0 * n ** 3), [A, B, C]


def dense_template(group) -> ScheduleTemplate:
    """A template for a fused ``dense`` group (bias and activation epilogues inlined into the output)."""
    data, weight = (group.tensors[v] for v in group.anchor.inputs[:2])
    m, k = (int(d.value) for d in data.shape)
    n = int(weight.shape[0].value)
    space = {"tile_j": _divisors(n, (4, 8, 16, 32)), "tile_k": _divisors(k, (1, 2, 4, 8))}
    fallback = {"tile_j": space["tile_j"][0], "tile_k": space["tile_k"][0]}

    def build(config):
        s = te.create_schedule([t.op for t in group.outputs])
        for stage in s.stages:
            op = stage.op
            if isinstance(op, ComputeOp) and not stage.is_output and not op.reduce_axis:
                stage.compute_inline()
        for stage in s.stages:
            if not isinstance(stage.op, ComputeOp) or stage.attach_type != "root":
                continue
            if stage.op.reduce_axis and len(stage.op.axis) == 2:
                _tile_reduction(stage, config["tile_j"], config["tile_k"])
            else:
                schedule_loop_nest(stage)
        return s

    return ScheduleTemplate("testing.dense", space, fallback, build, flops=2.0 * m * n * k)


@nnvm.hookimpl
def nnvm_schedule_template(target, group):
    if getattr(target, "kind", None) != "llvm" or group.anchor_op != "dense":
        return None
    return dense_template(group)

"""Schedule mistakes are ``nnvm.ScheduleError``s (an ``nnvm.Error``) naming the stage and the axis.

The three families of issue 3: a primitive given an axis of another stage, ``compute_at`` to a loop
that does not dominate every use of the stage, and one thread axis bound twice; and a few neighbours
(an axis already split away, fusing loops that are not adjacent).
"""

from __future__ import annotations

import pytest

import nnvm
from nnvm import te


def chain():
    """A -> B(p, q) -> C(x, y) -> D(u, v), axes named apart so a message names the right one."""
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda p, q: A[p, q] * 2.0, name="B")
    C = te.compute((8, 8), lambda x, y: B[x, y] + 1.0, name="C")
    D = te.compute((8, 8), lambda u, v: C[u, v] * 3.0, name="D")
    return A, B, C, D


def raises(fn, *fragments):
    with pytest.raises(nnvm.Error) as info:
        fn()
    assert isinstance(info.value, nnvm.ScheduleError)
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in the error: {msg}"
    return msg


# ---------------------------------------------------------------------------------------------------
# a primitive given an axis of another stage

FOREIGN = {
    "split": lambda s, B, C: s[B].split(C.op.axis[0], factor=2),
    "split nparts": lambda s, B, C: s[B].split(C.op.axis[0], nparts=2),
    "tile": lambda s, B, C: s[B].tile(B.op.axis[0], C.op.axis[0], 2, 2),
    "fuse": lambda s, B, C: s[B].fuse(B.op.axis[0], C.op.axis[0]),
    "reorder": lambda s, B, C: s[B].reorder(C.op.axis[0], B.op.axis[0]),
    "unroll": lambda s, B, C: s[B].unroll(C.op.axis[0]),
    "vectorize": lambda s, B, C: s[B].vectorize(C.op.axis[0]),
    "parallel": lambda s, B, C: s[B].parallel(C.op.axis[0]),
    "bind": lambda s, B, C: s[B].bind(C.op.axis[0], "blockIdx.x"),
    "pragma": lambda s, B, C: s[B].pragma(C.op.axis[0], "auto_unroll_max_step", 4),
    "storage_align": lambda s, B, C: s[B].storage_align(C.op.axis[0], 16, 1),
    "tensorize": lambda s, B, C: s[B].tensorize(C.op.axis[0], None),
}


@pytest.mark.parametrize("primitive", sorted(FOREIGN))
def test_primitive_on_an_axis_of_another_stage(primitive):
    A, B, C, D = chain()
    s = te.create_schedule(D.op)
    raises(lambda: FOREIGN[primitive](s, B, C), "stage B: axis x does not belong to this stage")


def test_compute_at_with_an_axis_of_another_stage():
    A, B, C, D = chain()
    s = te.create_schedule(D.op)
    raises(lambda: s[B].compute_at(s[C], D.op.axis[0]), "stage C: axis u does not belong to this stage")


def test_rfactor_with_an_axis_of_another_stage():
    A = te.placeholder((8, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    R = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="R")
    k2 = te.reduce_axis((0, 8), name="k2")
    te.compute((8,), lambda i: te.sum(A[i, k2], axis=k2), name="R2")
    s = te.create_schedule(R.op)
    raises(lambda: s.rfactor(R, k2), "stage R: axis k2 does not belong to this stage")


def test_axis_already_split_away_and_loops_not_adjacent():
    A, B, C, D = chain()
    s = te.create_schedule(D.op)
    s[D].split(D.op.axis[0], factor=2)
    raises(lambda: s[D].split(D.op.axis[0], factor=2), "stage D: axis u was already split or fused away")
    uo, ui = s[D].leaf_iter_vars[:2]
    raises(lambda: s[D].fuse(uo, D.op.axis[1]), "stage D:", "u.outer", "v")


# ---------------------------------------------------------------------------------------------------
# compute_at to a loop that does not dominate


def test_compute_at_a_stage_that_does_not_read_it():
    """B is read by C; computing it inside D's loop would leave C reading it before it exists."""
    A, B, C, D = chain()
    s = te.create_schedule(D.op)
    s[B].compute_at(s[D], D.op.axis[0])
    raises(lambda: nnvm.lower(s, [A, D]),
           "stage B: compute_at loop u of stage D does not dominate every read of B",
           "C reads it outside that loop, and D does not read it")


def test_compute_at_one_of_two_readers():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda p: A[p] * 2.0, name="B")
    C = te.compute((8,), lambda x: B[x] + 1.0, name="C")
    E = te.compute((8,), lambda w: B[w] - 1.0, name="E")
    s = te.create_schedule([C.op, E.op])
    s[B].compute_at(s[C], C.op.axis[0])
    raises(lambda: nnvm.lower(s, [A, C, E]),
           "stage B: compute_at loop x of stage C does not dominate every read of B", "E reads it")


def test_compute_at_own_loop():
    A, B, C, D = chain()
    s = te.create_schedule(D.op)
    raises(lambda: s[B].compute_at(s[B], B.op.axis[1]), "stage B: compute_at its own loop q")


def test_compute_at_a_consumer_attached_inside_it():
    """B at a loop of C and C at a loop of B: neither loop exists before the other."""
    A, B, C, D = chain()
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].compute_at(s[B], B.op.axis[0])
    raises(lambda: nnvm.lower(s, [A, D]), "stage C: compute_at loop p of stage B",
           "not computed before it can be attached to")


def test_compute_at_a_producer():
    A, B, C, D = chain()
    s = te.create_schedule(D.op)
    s[D].compute_at(s[C], C.op.axis[1])
    raises(lambda: nnvm.lower(s, [A, D]), "stage D: compute_at loop y of stage C")


def test_compute_at_an_inlined_stage():
    A, B, C, D = chain()
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].compute_inline()
    raises(lambda: nnvm.lower(s, [A, D]), "stage B: compute_at loop x of stage C",
           "(inlined or attached later)")


# ---------------------------------------------------------------------------------------------------
# one thread axis bound twice


def test_same_thread_axis_bound_to_two_loops():
    A, B, C, D = chain()
    s = te.create_schedule(D.op)
    raises(lambda: (s[D].bind(D.op.axis[0], "threadIdx.x"), s[D].bind(D.op.axis[1], "threadIdx.x")),
           "stage D: threadIdx.x is already bound to axis u; cannot bind it to v too")


def test_same_block_axis_bound_twice_after_a_split():
    A, B, C, D = chain()
    s = te.create_schedule(D.op)
    uo, ui = s[D].split(D.op.axis[0], factor=4)
    s[D].bind(uo, "blockIdx.x")
    raises(lambda: s[D].bind(ui, "blockIdx.x"), "stage D: blockIdx.x is already bound to axis u.outer",
           "cannot bind it to u.inner")


def test_vthread_may_be_bound_twice_and_unknown_tags_are_refused():
    A, B, C, D = chain()
    s = te.create_schedule(D.op)
    s[D].bind(D.op.axis[0], "vthread")
    s[D].bind(D.op.axis[1], "vthread")  # virtual threads nest: allowed, as in TVM
    assert [a.get("thread_tag") for a in s[D].iter_var_attrs.values()] == ["vthread", "vthread"]
    raises(lambda: s[C].bind(C.op.axis[0], "threadIdx.w"), "stage C: unknown thread tag 'threadIdx.w'")

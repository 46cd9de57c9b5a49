"""The memory plan never lets two live tensors overlap, and stays near the lower bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnvm.errors import Error
from nnvm.runtime.plan import check_plan, plan_memory


@st.composite
def lifetimes(draw):
    n = draw(st.integers(1, 40))
    sizes, lives = {}, {}
    for k in range(n):
        first = draw(st.integers(0, 30))
        last = draw(st.integers(first, 31))
        sizes[f"v{k}"] = draw(st.integers(1, 1 << 16))
        lives[f"v{k}"] = (first, last)
    return sizes, lives


@settings(max_examples=200, deadline=None, derandomize=True)
@given(lifetimes())
def test_live_values_never_overlap(case):
    sizes, lives = case
    offsets, arena = plan_memory(sizes, lives)
    names = list(sizes)
    for a in names:
        assert offsets[a] % 64 == 0
        assert offsets[a] + sizes[a] <= arena
        for b in names:
            if a >= b:
                continue
            (fa, la), (fb, lb) = lives[a], lives[b]
            if la < fb or lb < fa:
                continue
            apart = offsets[a] + sizes[a] <= offsets[b] or offsets[b] + sizes[b] <= offsets[a]
            assert apart, f"{a} {offsets[a]}+{sizes[a]} overlaps {b} {offsets[b]}+{sizes[b]} while both live"


def test_chain_reuses_memory():
    sizes = {f"v{k}": 1024 for k in range(10)}
    lives = {f"v{k}": (k, k + 1) for k in range(10)}
    _, arena = plan_memory(sizes, lives)
    assert arena == 2048


def test_check_plan_names_two_live_values_sharing_bytes():
    plan = {"placements": {"a": [0, 128, 0, 3], "b": [64, 128, 2, 5], "c": [0, 64, 4, 5]},
            "arena_bytes": 192, "lower_bound_bytes": 192}
    with pytest.raises(Error, match=r"a \[0, 128\) live 0..3 overlaps b \[64, 192\) live 2..5"):
        check_plan(plan)
    plan["placements"]["b"] = [128, 64, 2, 5]  # now only a and c share bytes, at different times
    check_plan(plan)
    with pytest.raises(Error, match="below the lower bound"):
        check_plan(dict(plan, lower_bound_bytes=256))

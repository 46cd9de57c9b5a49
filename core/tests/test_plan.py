"""The memory plan never lets two live tensors overlap, and stays near the lower bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nnvm.runtime.plan import plan_memory


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

"""Floating-point contraction: a*b + c becomes one fused multiply-add, and nothing else changes.

The code generator marks float ``fmul``/``fadd``/``fsub`` with the fast-math flag ``contract`` only:
LLVM may fuse a multiply into the add that consumes it (one rounding instead of two), but may not
reassociate, assume no NaN/inf, or use approximate reciprocals.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import nnvm
from nnvm.te.examples import matmul_api_schedule

# Fast-math flags other than ``contract``: any of them could change results beyond one rounding.
OTHER_FLAGS = re.compile(r"\bf(?:add|sub|mul|div|neg|rem)\b[^\n]*\b(?:fast|reassoc|nnan|ninf|nsz|arcp|afn)\b")


def _has_fma(target: str) -> bool:
    from nnvm.target import parse_target
    from nnvm_backend_llvm_x86.plugin import X86Backend

    return "+fma" in X86Backend().resolve(parse_target(target)).features.split(",")


def test_matmul_numbers_and_fused_multiply_add(api_matmul, rng):
    f = api_matmul(128, rng, rtol=1e-4, atol=1e-4)
    lib = f.library
    assert re.search(r"fmul contract", lib.unoptimized_ir), "float multiplies are not marked contract"
    assert re.search(r"fadd contract", lib.unoptimized_ir), "float adds are not marked contract"
    bad = OTHER_FLAGS.search(lib.unoptimized_ir)
    assert bad is None, f"a fast-math flag beyond contract was emitted: {bad.group(0)!r}"
    if not _has_fma("llvm"):
        pytest.skip("the host CPU has no FMA instructions")
    asm = lib.assembly()
    n_fma = len(re.findall(r"\bvfmadd\w*ps\b", asm))
    assert n_fma > 0, "no vfmadd in the matmul machine code: multiply and add were not fused"


def test_haswell_code_has_vector_fma():
    """An explicit FMA-capable CPU gets ``vfmadd`` on ymm registers, whatever the host is."""
    s, args = matmul_api_schedule(64)
    f = nnvm.build(s, args, target="llvm -mcpu=haswell")
    asm = f.library.assembly()
    assert re.search(r"vfmadd\w*ps\s+.*%ymm", asm), "no 256-bit vfmadd in the haswell matmul"


def test_no_contraction_without_fma_unit():
    """Without an FMA unit LLVM keeps the separate multiply and add (the flag permits, never forces)."""
    s, args = matmul_api_schedule(64)
    f = nnvm.build(s, args, target="llvm -mcpu=x86-64")
    asm = f.library.assembly()
    assert "vfmadd" not in asm and "mulps" in asm


def test_contraction_only_rounds_once(build, close):
    """Elementwise ``a*b + c`` and ``a*b - c``: within one rounding of the exact float64 result."""
    from nnvm.tir import expr as E
    from nnvm.tir import stmt as S

    n = 1000
    bufs = {name: S.Buffer(name, (E.const(n),), "float32") for name in "ABCDE"}
    i = E.Var("i", E.INDEX_DTYPE)
    A, B, C, D, Out = (bufs[x] for x in "ABCDE")

    def ld(buf):
        return E.Load(buf, i, "float32")

    mul = E.BinOp("mul", ld(A), ld(B), "float32")
    body = S.seq(S.Store(D, i, E.BinOp("add", mul, ld(C), "float32")),
                 S.Store(Out, i, E.BinOp("sub", mul, ld(C), "float32")))
    func = S.PrimFunc("fma_elementwise", (A, B, C, D, Out),
                      S.For(i, E.const(0), E.const(n), S.ForKind.SERIAL, body))
    f = build([func])["fma_elementwise"]
    r = np.random.default_rng(7)
    a, b, c = (r.standard_normal(n).astype("float32") for _ in range(3))
    d, e = np.zeros(n, "float32"), np.zeros(n, "float32")
    f(a, b, c, d, e)
    exact = a.astype("float64") * b.astype("float64")
    close("a*b + c", d, exact + c, rtol=1e-6, atol=1e-6)
    close("a*b - c", e, exact - c, rtol=1e-6, atol=1e-6)


def test_non_divisible_matmul_keeps_fma_and_numbers(api_matmul, rng):
    """n = 100 over 32x32 tiles and k by 4: the partitioned main nest and the guarded tails agree
    with numpy, and the main nest is fused multiply-adds."""
    f = api_matmul(100, rng, rtol=1e-4, atol=1e-4)
    if _has_fma("llvm"):
        assert re.search(r"\bvfmadd\w*ps\b", f.library.assembly()), "no vfmadd in the non-divisible matmul"

"""The C-family printer (nnvm.gpu.c_printer): one class, a language is a few overridden methods.

A toy dialect defined here (about twenty lines) prints lowered GPU kernels; the tests check the parts
every dialect shares: thread indices, shared arrays, barriers, guards, vectors, constants, floor
division and names that stay unique.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import nnvm
from nnvm import te
from nnvm.gpu.c_printer import CPrinter
from nnvm.gpu.kernels import lower_for_gpu
from nnvm.te.examples import gemm, gemm_intrin
from nnvm.te.lower import lower_schedule
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.vectorize import vectorize_loops


class ToyPrinter(CPrinter):
    """A CUDA-like dialect, to show how little a language needs (its type names and splat are its own
    choice: the base spells plain C and no vector syntax)."""

    kernel_prefix = 'extern "C" __global__ void'
    shared_qualifier = "__shared__"
    restrict = "__restrict__"
    scalar_types = {**CPrinter.scalar_types, "uint8": "uchar"}

    def broadcast(self, value: str, dtype: str) -> str:
        return f"(({self.type_name(dtype)})({value}))"

    def thread_index(self, tag: str) -> str:
        return tag  # blockIdx.x, threadIdx.y, ... are CUDA's own names

    def barrier(self) -> str:
        return "__syncthreads();"

    def vector_load(self, buf: str, base: str, dtype: str) -> str:
        return f"*(({self.type_name(dtype)}*)({buf} + {base}))"

    def vector_store(self, buf: str, base: str, value: str, dtype: str) -> str:
        return f"*(({self.type_name(dtype)}*)({buf} + {base})) = {value}"


def _shared_copy_kernel():
    n = 64
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[n - 1 - i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    bo, bi = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    s[AS].compute_at(s[B], bo)
    s[AS].bind(s[AS].op.axis[0], "threadIdx.x")
    (kernel,) = lower_for_gpu(lower_schedule(s, [A, B], "rev")).kernels
    return kernel


def test_kernel_with_shared_memory_and_barrier():
    src = ToyPrinter().kernel(_shared_copy_kernel())
    lines = [ln.strip() for ln in src.splitlines()]
    assert lines[0] == ('extern "C" __global__ void rev_k0(float* __restrict__ A, float* __restrict__ B) {')
    assert "const long blockIdx_x = (long)blockIdx.x;" in lines
    assert "__shared__ float A_shared[16];" in lines
    sync = lines.index("__syncthreads();")
    assert lines.index("const long threadIdx_x = (long)threadIdx.x;") < sync
    assert any(ln.startswith("A_shared[threadIdx_x] = A[") for ln in lines[:sync])
    assert any(ln.startswith("B[") and "A_shared[" in ln for ln in lines[sync:])


def test_vectors_constants_floor_division_and_unique_names():
    A = te.placeholder((8, 4), name="A")
    I = te.placeholder((4,), dtype="int32", name="I")
    B = te.compute((8, 4), lambda i, j: te.exp(A[i, j]) * 0.5, name="B")
    C = te.compute((4,), lambda i: te.floordiv(I[i], te.const(-3, "int32")) + te.floormod(I[i], 5), name="C")
    D = te.compute((1,), lambda i: te.max(A[0, 0], te.const(-float("inf"), "float32")), name="D")
    s = te.create_schedule([B.op, C.op, D.op])
    s[B].vectorize(B.op.axis[1])
    func = lower_schedule(s, [A, I, B, C, D], "mix")
    func = replace(func, body=vectorize_loops(func.body))
    src = ToyPrinter().kernel(func)
    assert "*((float4*)(B + (i * 4L))) = (exp(*((float4*)(A + (i * 4L)))) * ((float4)(0.5f)));" in src
    assert "NNVM_FLOORDIV(I[i_1], (-3))" in src or "NNVM_FLOORDIV(I[i_1], -3)" in src
    assert "(I[i_1] % 5)" not in src  # I may be negative: C's % would round the wrong way
    assert "(-INFINITY)" in src
    for name in ("i", "i_1", "i_2"):
        assert f"for (long {name} = 0L;" in src


def test_constants_print_with_their_c_types():
    p = ToyPrinter()
    assert p.const(E.const(3, "int64")) == "3L"
    assert p.const(E.const(-(2 ** 63), "int64")) == "(-9223372036854775807L - 1L)"
    assert p.const(E.const(1.0, "float32")) == "1.0f"
    assert p.const(E.const(2.5, "float64")) == "2.5"
    assert p.const(E.const(True, "bool")) == "1"
    assert p.const(E.const(7, "uint8")) == "((uchar)7)"
    assert p.type_name("float32x4") == "float4" and p.storage_type("bool") == "uchar"


def test_provably_non_negative_divisions_print_as_c_division():
    i = E.Var("i")
    out = S.Buffer("O", (E.const(10),), "int64")
    body = S.For(i, E.const(0), E.const(10), S.ForKind.SERIAL, S.Store(out, i, (i + 3) // 4 + (i + 3) % 4))
    src = ToyPrinter().kernel(S.PrimFunc("k", (out,), body))
    assert "((i + 3L) / 4L)" in src and "((i + 3L) % 4L)" in src and "NNVM_FLOOR" not in src


class Toy32Printer(ToyPrinter):
    index32_type = "int"  # 32-bit indices where fits_int32 proves them safe (CUDA's choice)


_I = E.Var("i")


def _loop_store(extent: int, params: tuple, index, value) -> S.PrimFunc:
    """``for i in range(extent): params[0][index] = value``."""
    body = S.For(_I, E.const(0), E.const(extent), S.ForKind.SERIAL, S.Store(params[0], index, value))
    return S.PrimFunc("k", params, body)


def test_32_bit_indices_where_every_index_term_provably_fits():
    src = Toy32Printer().kernel(_shared_copy_kernel())
    assert "const int threadIdx_x = (int)threadIdx.x;" in src and "const int blockIdx_x" in src
    assert "long" not in src and not any(c.isdigit() and n == "L" for c, n in zip(src, src[1:]))
    assert "long" in ToyPrinter().kernel(_shared_copy_kernel())  # a language without index32_type: 64-bit
    small, wide = S.Buffer("O", (E.const(16),), "float32"), S.Buffer("A", (E.const(2 ** 31),), "float32")
    # a buffer of 2^31 elements keeps 64-bit indices, though this loop touches only 16 of them
    src = Toy32Printer().kernel(_loop_store(16, (small, wide), _I, E.Load(wide, _I, "float32")))
    assert "for (long i = 0L; i < 16L; ++i)" in src and "A[i]" in src
    # small buffers, but a term beyond 32 bits: i * 2^20 reaches 2^40 before the modulo
    one = E.const(1.0, "float32")
    src = Toy32Printer().kernel(_loop_store(2 ** 20, (small,), (_I * (2 ** 20)) % 16, one))
    assert "for (long i = 0L;" in src and "1048576L" in src
    # int64 data stays 64-bit: a load of it and a constant beyond 32 bits are long long in C, the index
    # terms beside them int
    x64, o64 = S.Buffer("X", (E.const(16),), "int64"), S.Buffer("Y", (E.const(16),), "int64")
    value = E.Load(x64, _I, "int64") * E.const(3 * 10 ** 9, "int64") + (_I * 4 + 1)
    src = Toy32Printer().kernel(_loop_store(16, (o64, x64), _I, value))
    assert "for (int i = 0; i < 16; ++i)" in src
    assert "Y[i] = ((X[i] * 3000000000L) + ((i * 4) + 1));" in src


def test_names_of_builtins_and_keywords_are_renamed():
    x = S.Buffer("cos", (E.const(2),), "float32")
    y = S.Buffer("int", (E.const(2),), "float32")
    i = E.Var("i")
    body = S.For(i, E.const(0), E.const(2), S.ForKind.SERIAL,
                 S.Store(y, i, E.call("cos", E.Load(x, i, "float32"))))
    src = ToyPrinter().kernel(S.PrimFunc("k", (x, y), body))
    assert "int_[i] = cos(cos_[i]);" in src


def test_tensor_intrinsic_call_is_an_error_naming_the_intrinsic_and_the_kernel():
    A, B, C, _ = gemm(8, 32, 16)
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[C].tensorize(xi, gemm_intrin(4, 16, 16))
    func = lower_schedule(s, [A, B, C], "mm")
    with pytest.raises(nnvm.Error, match="kernel mm: tensor intrinsic gemm_4x16x16 has no C-family"):
        ToyPrinter().kernel(func)


def test_printer_errors_name_the_kernel():
    x = S.Buffer("x", (E.Var("n"),), "float32")
    body = S.Allocate(x, S.Seq(()))
    with pytest.raises(nnvm.Error, match="kernel dyn: buffer x needs a constant size"):
        ToyPrinter().kernel(S.PrimFunc("dyn", (), body))


def test_the_base_spells_plain_c_and_asks_the_language_for_the_rest():
    """Nothing of one GPU language in the base: no OpenCL builtins or type names, and what plain C cannot
    spell (vectors, thread indices, barriers) is the subclass's to say, not a silent default."""
    import ast
    import inspect

    from nnvm.gpu import c_printer

    tree = ast.parse(inspect.getsource(c_printer))
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    code = " ".join(n.value for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings)
    for word in ("vload", "vstore", "get_local_id", "uchar", "convert_", "__local", "__kernel", "float4)"):
        assert word not in code, word
    p = CPrinter()
    assert p.type_name("uint8") == "unsigned char" and p.storage_type("bool") == "unsigned char"
    for call in (lambda: p.broadcast("x", "float32x4"), lambda: p.vector_load("A", "0", "float32x4"),
                 lambda: p.thread_index("threadIdx.x"), p.barrier):
        with pytest.raises(NotImplementedError, match="CPrinter must spell"):
            call()


def test_languages_supply_vector_operators_calls_literals_and_parameters():
    """A dialect without vector operators (CUDA) spells them as calls; a vector sigmoid's one is a vector;
    infinities can be spelled through bit patterns; extra parameters follow the buffers."""

    class NoOperators(ToyPrinter):
        inf_literal = "__int_as_float(0x7f800000)"

        def vector_binary(self, op, a, b, dtype):
            return f"vop<'{op}'>({a}, {b})"

        def vector_call(self, name, args, dtype):
            return f"v_{name}({', '.join(args)})"

        def extra_params(self, func):
            return ["uint3 tid"]

    A = te.placeholder((8, 4), name="A")
    B = te.compute((8, 4), lambda i, j: te.max(te.sigmoid(A[i, j]), te.const(-float("inf"), "float32")),
                   name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[1])
    func = lower_schedule(s, [A, B], "vec")
    src = NoOperators().kernel(replace(func, body=vectorize_loops(func.body)))
    assert "uint3 tid) {" in src
    assert "v_fmax(" in src and "v_exp(" in src and "vop<'/'>(((float4)(1.0f))" in src
    assert "(-__int_as_float(0x7f800000))" in src and "INFINITY" not in src


def test_bounded_exp_prints_as_exp():
    """``exp_bounded``'s range only shortens a CPU's inline exp: a C-family language prints exp, scalar
    and vector."""
    A = te.placeholder((8, 4), name="A")
    B = te.compute((8, 4), lambda i, j: te.exp_bounded(A[i, j]), name="B")
    C = te.compute((8, 4), lambda i, j: te.exp_bounded(A[i, j]), name="C")
    s = te.create_schedule([B.op, C.op])
    s[B].vectorize(B.op.axis[1])
    func = lower_schedule(s, [A, B, C], "bexp")
    src = ToyPrinter().kernel(replace(func, body=vectorize_loops(func.body)))
    assert "exp_bounded" not in src
    assert "= exp(*((float4*)(A + (i * 4L))));" in src and "= exp(A[" in src


def test_a_gpu_backend_is_a_printer_a_vector_target_and_a_compile_call():
    """``GPUBackend`` runs the stages (lower for the GPU, vectorize, print, compile) for a language given
    as its printer, ``VectorTarget`` and compile call, and hands ``compile`` every function's launch table."""
    from nnvm.gpu.backend import GPUBackend
    from nnvm.gpu.library import GPUKernelLibrary
    from nnvm.target import parse_target
    from nnvm.tir.vectorize import C_FAMILY

    class ToyBackend(GPUBackend):
        name, target_kinds, printer, vectors = "toy", ("toy",), ToyPrinter, replace(C_FAMILY, lanes=(4,))

        def build_options(self, target):
            return {"target": str(target)}

        def compile(self, source, tables, options):
            return GPUKernelLibrary(tables, {"kernels.toy": source}, options)

    n = 64
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=16)
    bio, bii = s[B].split(bi, factor=4)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bio, "threadIdx.x")
    s[B].vectorize(bii)
    lib = ToyBackend().build([lower_schedule(s, [A, B], "twice")], parse_target("opencl"))
    assert lib.options == {"target": "opencl"}
    assert lib.tables["twice"]["launches"] == [{"kernel": "twice_k0", "grid": [4, 1, 1], "block": [4, 1, 1]}]
    assert '*((float4*)(B + ' in lib.source_text(), lib.source_text()
    with pytest.raises(NotImplementedError, match="must say how its source is compiled"):
        GPUBackend().compile("", [], {})

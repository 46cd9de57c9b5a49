"""``cuLaunchKernel``'s argument array, built from the kernel's own parameter list.

``kernelParams[i]`` must point at a value of exactly the size and layout of the kernel's i-th parameter:
the driver copies ``sizeof(parameter)`` bytes from there, so an ``int`` passed where the kernel takes a
``long long`` reads four bytes past it, and a Python float where it takes ``__half`` gives garbage. The
parameter types are read from the ``extern "C" __global__`` signatures of the source (``kernel_parameters``)
and every value is converted to its exact C type (``pack_arguments``), range-checked. The CPU runner's
trampolines unpack the very same array with the very same types, so the fake driver's tests check it.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np

from nnvm.errors import Error
from nnvm_backend_cuda.compiler import KERNEL


class Half(ctypes.Structure):
    """CUDA's ``__half``: 16 bits, passed as the IEEE binary16 bit pattern."""

    _fields_ = [("bits", ctypes.c_uint16)]


SCALARS = {
    "bool": ctypes.c_bool, "char": ctypes.c_int8, "signed char": ctypes.c_int8,
    "unsigned char": ctypes.c_uint8, "short": ctypes.c_int16, "unsigned short": ctypes.c_uint16,
    "int": ctypes.c_int32,
    "unsigned": ctypes.c_uint32, "unsigned int": ctypes.c_uint32, "long long": ctypes.c_int64,
    "unsigned long long": ctypes.c_uint64, "int8_t": ctypes.c_int8, "uint8_t": ctypes.c_uint8,
    "int16_t": ctypes.c_int16, "uint16_t": ctypes.c_uint16, "int32_t": ctypes.c_int32,
    "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_uint64, "float": ctypes.c_float, "double": ctypes.c_double,
    "half": Half, "__half": Half,
}
# CUDA's vector structs: element type of each name stem
_VECTOR_ELEMENTS = {"char": ctypes.c_int8, "uchar": ctypes.c_uint8, "short": ctypes.c_int16,
                    "ushort": ctypes.c_uint16, "int": ctypes.c_int32, "uint": ctypes.c_uint32,
                    "longlong": ctypes.c_int64, "ulonglong": ctypes.c_uint64, "float": ctypes.c_float,
                    "double": ctypes.c_double, "half": Half, "__half": Half}
_VECTOR = re.compile(r"(u?char|u?short|u?int|u?longlong|float|double|__half|half)([234])")
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict)\b")
_vector_types: dict = {}


def vector_type(name: str):
    """The ctypes structure of CUDA's vector struct ``name`` (``float4``: four floats, 16 bytes)."""
    if name not in _vector_types:
        m = _VECTOR.fullmatch(name)
        if m is None or (m.group(1) in ("half", "__half") and m.group(2) != "2"):
            return None
        element = _VECTOR_ELEMENTS[m.group(1)]
        fields = [(c, element) for c in "xyzw"[:int(m.group(2))]]
        _vector_types[name] = type(name, (ctypes.Structure,), {"_fields_": fields})
    return _vector_types[name]


def c_type(type_name: str):
    """The ctypes type a parameter of CUDA type ``type_name`` is passed as; None when unknown. Pointers
    of every kind are 64-bit device addresses."""
    if "*" in type_name:
        return ctypes.c_uint64
    return SCALARS.get(type_name) or vector_type(type_name)


def kernel_parameters(source: str) -> dict:
    """Kernel name -> its parameters' types, qualifiers dropped (``float*``, ``int``, ``float4``), read from
    the ``__global__`` signatures of ``source``."""
    out = {}
    for m in KERNEL.finditer(source):
        depth, end = 1, m.end()
        while depth and end < len(source):
            depth += {"(": 1, ")": -1}.get(source[end], 0)
            end += 1
        params = source[m.end():end - 1].strip()
        types = []
        for param in params.split(",") if params and params != "void" else []:
            text = " ".join(_QUALIFIERS.sub(" ", param).split())
            name = re.search(r"\w+$", text)
            types.append(text[:name.start()].replace(" *", "*").strip() if name else text)
        out[m.group(1)] = types
    return out


def _convert(ctype, value):
    if ctype is Half:
        return Half(int(np.array(value, dtype=np.float16).view(np.uint16)))
    if ctype in (ctypes.c_float, ctypes.c_double):
        return ctype(float(value))
    if ctype is ctypes.c_bool:
        return ctype(bool(value))
    if issubclass(ctype, ctypes.Structure):  # a vector struct: one value per lane
        values = list(value)
        if len(values) != len(ctype._fields_):
            raise ValueError(f"{len(ctype._fields_)} lanes, got {len(values)} values")
        return ctype(*[_convert(t, v) for (_, t), v in zip(ctype._fields_, values)])
    bits = 8 * ctypes.sizeof(ctype)
    signed = ctype(-1).value < 0
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    v = int(value)
    if not low <= v <= high:
        raise ValueError(f"{v} is outside [{low}, {high}]")
    return ctype(v)


def pack_arguments(kernel: str, types: list, values: list) -> tuple:
    """``(array, keep)``: the ``void *[]`` for ``cuLaunchKernel`` whose i-th entry points at ``values[i]``
    converted to the kernel's i-th parameter type (``types``, from ``kernel_parameters``), 16-byte
    aligned; keep ``keep`` (the storage and the converted ctypes values) alive as long as the array.
    A count, type or value that does not fit is an ``Error`` naming the kernel and the parameter."""
    if len(types) != len(values):
        raise Error(f"CUDA kernel {kernel} takes {len(types)} arguments ({', '.join(types)}), the launch "
                    f"gives {len(values)}")
    keep = []
    for i, (type_name, value) in enumerate(zip(types, values)):
        ctype = c_type(type_name)
        if ctype is None:
            raise Error(f"CUDA kernel {kernel}: parameter {i} has type {type_name!r}, which nnvm cannot pass")
        try:
            keep.append(_convert(ctype, value))
        except (TypeError, ValueError, OverflowError) as exc:
            raise Error(f"CUDA kernel {kernel}: argument {i} ({value!r}) does not fit parameter type "
                        f"{type_name} ({exc})") from None
    array, storage = argument_array([bytes(v) for v in keep])
    return array, (storage, keep)


ALIGN = 16  # bytes: every value starts at a multiple (a float4 or double2 loaded whole needs it)


def argument_array(values: list) -> tuple:
    """``(array, storage)``: a ``void *[]`` whose i-th entry points at a copy of the bytes ``values[i]``,
    each copy ``ALIGN``-aligned in one ``storage`` buffer (keep it alive as long as the array)."""
    offsets, end = [], 0
    for v in values:
        offsets.append(end)
        end += -(-max(len(v), 1) // ALIGN) * ALIGN
    storage = (ctypes.c_uint8 * (end + ALIGN))()
    base = ctypes.addressof(storage)
    base += -base % ALIGN
    for v, off in zip(values, offsets):
        ctypes.memmove(base + off, v, len(v))
    array = (ctypes.c_void_p * max(len(values), 1))(*[base + off for off in offsets])
    return array, storage

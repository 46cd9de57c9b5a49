"""ML Program (MIL) conversion: the function ``main`` of an ``.mlpackage``'s program, op by op.

An operation's inputs are named parameters, each a list of bindings (a value name or an inline value;
variadic parameters such as concat's ``values`` have several). Parameters like strides and pads arrive
as ``const`` operations; consts are kept as numpy arrays (``MilContext.consts``) and become graph
constants only where an operator takes them as tensors.
"""

from __future__ import annotations

import numpy as np

from nnvm.errors import ModelLoadError
from nnvm.frontend import (
    ConversionContext,
    ConverterTable,
    bind_input,
    call_converter,
    check_shape_keys,
    check_supported,
)
from nnvm.graph.builder import GraphBuilder
from nnvm_frontend_coreml.reader import WeightFile, proto, unpack_bits

TABLE = ConverterTable("CoreML ML Program")

# MIL DataType names -> numpy dtypes (sub-byte types unpack to int8/uint8).
DTYPES = {
    "STRING": object,
    "BOOL": np.bool_,
    "FLOAT16": np.float16,
    "FLOAT32": np.float32,
    "FLOAT64": np.float64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT4": np.int8,
    "UINT1": np.uint8,
    "UINT2": np.uint8,
    "UINT3": np.uint8,
    "UINT4": np.uint8,
    "UINT6": np.uint8,
}
SUB_BYTE = {"INT4": 4, "UINT1": 1, "UINT2": 2, "UINT3": 3, "UINT4": 4, "UINT6": 6}
# Compute dtypes nnvm takes for a MIL tensor (it has no 8/16-bit integer arithmetic beyond consts).
# float16 programs (coremltools' default precision) compute in float32 with their float16 weights, as
# CoreML itself does on the CPU: fp16 arithmetic on a CPU is slower and lost 2% on MobileNetV2.
NNVM_DTYPE = {
    "float16": "float32",
    "float32": "float32",
    "float64": "float32",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
    "int8": "int32",
    "uint8": "int32",
    "int16": "int32",
    "uint16": "int32",
    "uint32": "int64",
}


class MilContext(ConversionContext):
    """The MIL operation being converted: ``args[param]`` is its list of bindings, each a value name
    or an inline numpy array; ``consts`` holds every const op's value."""

    def __init__(self, builder: GraphBuilder, consts: dict, env: dict):
        super().__init__(builder)
        self.consts, self.env = consts, env
        self.args: dict = {}

    @property
    def label(self) -> str:
        return f"operation {self.name} ({self.op_type})"

    def has(self, param: str) -> bool:
        return param in self.args

    def const(self, param: str, default=None):
        """The numpy value of ``param`` (an inline value, a const op or a folded constant), or default."""
        if param not in self.args:
            return default
        b = self.args[param][0]
        if isinstance(b, np.ndarray):
            return b
        if b in self.consts:
            return self.consts[b]
        value = self.const_value(self.env[b]) if b in self.env else None
        if value is None:
            raise self.error(f"parameter {param!r} must be a constant here")
        return np.asarray(value)

    def value(self, param: str, index: int = 0) -> str:
        """``param``'s binding as a graph value (a constant is added for a const or inline value)."""
        if param not in self.args:
            raise self.error(f"the required parameter {param!r} is missing")
        return self.binding(self.args[param][index])

    def values(self, param: str) -> list[str]:
        return [self.binding(b) for b in self.args.get(param, [])]

    def binding(self, b) -> str:
        if isinstance(b, np.ndarray):
            return self.param(as_nnvm(b))
        if b in self.env:
            return self.env[b]
        if b in self.consts:
            self.env[b] = self.b.const(as_nnvm(self.consts[b]), hint=b)
            return self.env[b]
        raise self.error(f"uses {b!r}, which no earlier operation defines")


def as_nnvm(a: np.ndarray) -> np.ndarray:
    """A constant in a dtype nnvm computes with (small integer types widen)."""
    a = np.asarray(a)
    want = NNVM_DTYPE.get(a.dtype.name, a.dtype.name)
    return a if a.dtype.name == want else a.astype(want)


class ValueReader:
    """MIL ``Value`` protos as numpy arrays: immediate tensors or records of the package's weight file."""

    def __init__(self, weights_dir, where: str):
        self.weights_dir, self.where = weights_dir, where
        self.files: dict = {}
        self.mil = proto("MIL_pb2")

    def read(self, value):
        ttype = value.type.tensorType
        dtype_name = self.mil.DataType.Name(ttype.dataType)
        if dtype_name not in DTYPES:
            raise ModelLoadError(
                f"{self.where}: a constant has data type {dtype_name}, which is not supported"
            )
        dtype = DTYPES[dtype_name]
        shape = tuple(int(d.constant.size) for d in ttype.dimensions)
        kind = value.WhichOneof("value")
        if kind == "blobFileValue":
            flat = self._blob(value.blobFileValue, int(np.prod(shape, dtype=np.int64)))
            if flat.dtype != dtype and dtype_name not in SUB_BYTE:
                flat = (
                    flat.view(dtype)
                    if flat.dtype.itemsize == np.dtype(dtype).itemsize
                    else flat.astype(dtype)
                )
        elif kind == "immediateValue":
            flat = self._immediate(value.immediateValue, dtype, dtype_name, shape)
        else:
            raise ModelLoadError(f"{self.where}: a constant has no value")
        if flat.size != int(np.prod(shape, dtype=np.int64)):
            raise ModelLoadError(f"{self.where}: a constant of shape {shape} holds {flat.size} values")
        return flat.reshape(shape)

    def _immediate(self, imm, dtype, dtype_name, shape):
        if imm.WhichOneof("value") != "tensor":
            raise ModelLoadError(f"{self.where}: only tensor constants are supported")
        t = imm.tensor
        kind = t.WhichOneof("value")
        if kind == "strings":
            return np.array(list(t.strings.values), dtype=object)
        if kind == "bytes":
            raw = np.frombuffer(t.bytes.values, np.uint8)
            if dtype_name in SUB_BYTE:
                return unpack_bits(
                    raw,
                    SUB_BYTE[dtype_name],
                    int(np.prod(shape, dtype=np.int64)),
                    signed=dtype_name == "INT4",
                )
            return raw.view(dtype).copy()
        if kind is None:
            return np.zeros(0, dtype)
        return np.asarray(list(getattr(t, kind).values)).astype(dtype)

    def _blob(self, blob, count: int):
        name = blob.fileName.replace("@model_path/", "")
        if self.weights_dir is None:
            raise ModelLoadError(
                f"{self.where}: a constant refers to {blob.fileName}, but the model was not "
                "read from an .mlpackage"
            )
        if name not in self.files:
            self.files[name] = WeightFile(self.weights_dir / name)
        return self.files[name].blob(int(blob.offset), count)


def _tensor_shape(vtype) -> tuple:
    t = vtype.tensorType
    return tuple(
        int(d.constant.size) if d.WhichOneof("dimension") == "constant" else None for d in t.dimensions
    )


def convert_program(spec, weights_dir, where: str, shapes) -> object:
    """The graph of ``spec.mlProgram``'s function ``main``."""
    program = spec.mlProgram
    if "main" not in program.functions:
        raise ModelLoadError(
            f"{where}: the ML Program has no function 'main' "
            f"(functions: {', '.join(program.functions) or 'none'})"
        )
    fn = program.functions["main"]
    if fn.opset not in fn.block_specializations:
        raise ModelLoadError(f"{where}: function main has no block for its opset {fn.opset}")
    block = fn.block_specializations[fn.opset]
    ops = list(block.operations)
    named = [(op.type, op.outputs[0].name if op.outputs else op.type) for op in ops if op.type != "const"]
    check_supported(named, TABLE.supports, "CoreML ML Program", where)

    mil = proto("MIL_pb2")
    reader = ValueReader(weights_dir, where)
    b = GraphBuilder()
    shapes = check_shape_keys(shapes, [i.name for i in fn.inputs], where)
    env: dict = {}
    for inp in fn.inputs:
        dtype = DTYPES.get(mil.DataType.Name(inp.type.tensorType.dataType), np.float32)
        shape = bind_input(inp.name, _tensor_shape(inp.type), shapes, where)
        env[inp.name] = b.input(inp.name, shape, NNVM_DTYPE.get(np.dtype(dtype).name, "float32"))
    consts: dict = {}
    ctx = MilContext(b, consts, env)
    for op in ops:
        if op.type == "const":
            consts[op.outputs[0].name] = reader.read(op.attributes["val"])
            continue
        args = {}
        for param, arg in op.inputs.items():
            args[param] = [
                reader.read(bd.value) if bd.WhichOneof("binding") == "value" else bd.name
                for bd in arg.arguments
            ]
        for param, value in op.attributes.items():  # iOS16 constexpr ops carry their values as attributes
            if param != "name" and param not in args:
                args[param] = [reader.read(value)]
        name = op.outputs[0].name if op.outputs else op.type
        ctx.begin(name, op.type, {})
        ctx.args = args
        results = call_converter(ctx, TABLE.lookup(op.type), args)
        for out, value in zip(op.outputs, results):
            env[out.name] = value
    for out in block.outputs:
        b.output(ctx.binding(out) if out in env or out in consts else out)
    return b.build()


from nnvm_frontend_coreml import mil_ops  # noqa: E402,F401  (fills TABLE)

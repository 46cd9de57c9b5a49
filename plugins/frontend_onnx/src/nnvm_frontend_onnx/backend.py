"""ONNX's backend interface (``onnx.backend.base.Backend``) over ``nnvm.compile(..., target="llvm")``.

``prepare(model)`` returns a rep whose ``run(inputs)`` compiles on first use and returns the outputs,
so ONNX's own runner (``onnx.backend.test.BackendTest``) and any tool written for that interface can
drive nnvm.

Shapes in nnvm are static, so two kinds of run-time facts are compiled in, and a change in either
compiles again (one compiled module is kept per distinct key, so nothing stale is ever run):

- the shapes of all inputs (they bind symbolic dimensions, as ``shapes=`` does);
- the *values* of inputs that decide shapes (Reshape's shape, Reduce axes, Pad's pads, TopK's k,
  Resize's sizes, Expand's shape, Range's bounds, Slice's starts ...). The first ``run`` tries with
  every input at run time; when a converter needs the value of an input (it raises
  ``ValueDependentError``), that input is specialized on: treated as a constant for the compile, and
  its bytes become part of the cache key.

Sequence and optional inputs and outputs (ONNX's node tests feed lists of arrays and None, and expect
lists back) are flattened here, since ``mod.run`` takes and returns tensors: a sequence input given as
N arrays becomes N tensor inputs feeding a ``SequenceConstruct`` (an empty one a ``SequenceEmpty``), an
empty optional input an ``Optional`` node with no input, so the model compiled is one per structure of
the inputs (lengths, presence; part of the cache key). The importer resolves the sequences
(``convert_sequence``) and says how its flat outputs group into the model's (``import_onnx``).
"""

from __future__ import annotations

import numpy as np

from nnvm.errors import Error, InputError
from nnvm_frontend_onnx import sequences

_MAX_SPECIALIZED_ELEMENTS = 4096  # larger inputs are data, not shape parameters


def _device_ok(device: str) -> bool:
    return str(device).split(":")[0].upper() == "CPU"


class NnvmBackendRep:
    """A prepared model: compiled lazily per input shapes and shape-deciding input values."""

    def __init__(self, model, device: str = "CPU", opt_level: int = 3, **kwargs):
        import onnx

        if not isinstance(model, onnx.ModelProto):
            from nnvm_frontend_onnx.importer import read_model

            model, _, _ = read_model(model, in_place=False)
        self.model = model
        self.device = device
        self.opt_level = opt_level
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in inits]
        self.output_names = [o.name for o in model.graph.output]
        self.input_types = {vi.name: vi.type for vi in model.graph.input if vi.name not in inits}
        self.specialized: set[str] = set()  # inputs whose values are compiled in
        self._modules: dict = {}  # key -> (module, output layout)

    def run(self, inputs, **kwargs) -> tuple:
        """The outputs in the model's output order: numpy arrays, lists of them for sequences, None for
        an empty optional."""
        feeds, structure = self._feeds(inputs)
        while True:
            key = (structure, self._key(feeds))
            compiled = self._modules.get(key)
            if compiled is None:
                try:
                    compiled = self._compile(feeds, structure)
                except Error as exc:
                    if self._specialize_for(exc, feeds):
                        continue
                    raise
                self._modules[key] = compiled
            mod, layout = compiled
            runtime = {k: v for k, v in feeds.items() if k not in self.specialized}
            outs = (mod.run(**runtime) if runtime else mod.run()) if mod is not None else []
            arrays = iter([np.asarray(o) for o in outs])
            return tuple(sequences.regroup(value, arrays) for value in layout)

    # -- internals ----------------------------------------------------------------------------------
    def _feeds(self, inputs) -> tuple:
        """``(flat feeds, structure)``: every tensor by its name in the flattened model (``_flat_model``),
        and per input its structure: ``"tensor"``, a sequence's length, or ``("optional", inner or None)``."""
        if isinstance(inputs, dict):
            given = dict(inputs)
        else:
            inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(inputs) > len(self.input_names):
                raise InputError(f"the model takes {len(self.input_names)} inputs, got {len(inputs)}")
            given = dict(zip(self.input_names, inputs))
        missing = [n for n in self.input_names if n not in given]
        if missing:
            raise InputError(f"input {missing[0]!r} of the ONNX model is missing")
        feeds: dict = {}
        structure = tuple(_flatten_input(name, self.input_types[name], given[name], feeds)
                          for name in self.input_names)
        return feeds, structure

    def _key(self, feeds: dict) -> tuple:
        parts = []
        for name in feeds:
            v = feeds[name]
            value = v.tobytes() if name in self.specialized else None
            parts.append((name, v.shape, v.dtype.str, value))
        return tuple(parts)

    def _compile(self, feeds: dict, structure: tuple) -> tuple:
        """``(module, output layout)``; the module is None when no output holds a tensor."""
        import nnvm
        from nnvm_frontend_onnx.importer import import_onnx

        model = self._specialized_model(self._flat_model(structure, feeds), feeds)
        shapes = {k: v.shape for k, v in feeds.items() if k not in self.specialized}
        try:
            graph, layout = import_onnx(model, shapes)
            if not any(sequences.flatten(value) for value in layout):
                return None, layout
            return nnvm.compile(graph, target="llvm", opt_level=self.opt_level), layout
        except Error:
            raise
        except Exception as exc:  # a compiler bug: still one nnvm.Error for the caller, cause attached
            ops = sorted({n.op_type for n in self.model.graph.node})
            raise Error(f"nnvm failed to compile the ONNX model (operators {', '.join(ops)}): "
                        f"{type(exc).__name__}: {exc}") from exc

    def _flat_model(self, structure: tuple, feeds: dict):
        """The model with every sequence or optional input replaced by its tensors (``_feeds``' names)
        and the nodes that rebuild it from them, for this structure of the inputs."""
        if all(s == "tensor" for s in structure):
            return self.model
        model = type(self.model)()
        model.CopyFrom(self.model)
        graph = model.graph
        kept = [vi for vi in graph.input]
        del graph.input[:]
        nodes = []
        for vi in kept:
            if vi.name not in self.input_types or vi.type.HasField("tensor_type"):
                graph.input.append(vi)
                continue
            s = structure[self.input_names.index(vi.name)]
            graph.input.extend(_rebuild_input(vi.name, vi.type, s, feeds, nodes))
        rest = list(graph.node)
        del graph.node[:]
        graph.node.extend(nodes + rest)
        return model

    def _specialized_model(self, model, feeds: dict):
        if not self.specialized:
            return model
        from onnx import numpy_helper

        model2 = type(model)()
        model2.CopyFrom(model)
        for name in feeds:
            if name in self.specialized:
                model2.graph.initializer.append(numpy_helper.from_array(feeds[name], name))
        return model2

    def _specialize_for(self, exc: Error, feeds: dict) -> bool:
        """After a converter asked for an input's value: specialize on it (or, when the value is
        computed from inputs, on every small input not yet specialized). False if nothing is left."""
        from nnvm_frontend_onnx.context import ValueDependentError

        if not isinstance(exc, ValueDependentError):
            return False
        if exc.value in feeds and exc.value not in self.specialized:
            self.specialized.add(exc.value)
            return True
        small = {n for n in feeds if n not in self.specialized and feeds[n].size <= _MAX_SPECIALIZED_ELEMENTS}
        if not small:
            return False
        self.specialized |= small
        return True


def _flatten_input(name: str, type_proto, value, feeds: dict):
    """Put the tensors of input ``name`` (per its ONNX type) into ``feeds`` under their flat names;
    returns its structure (see ``_feeds``)."""
    if type_proto.HasField("sequence_type"):
        if not isinstance(value, list | tuple):
            raise InputError(f"input {name!r} is a sequence: give it as a list of arrays")
        for k, item in enumerate(value):
            feeds[f"{name}.{k}"] = np.asarray(item)
        return len(value)
    if type_proto.HasField("optional_type"):
        if value is None:
            return ("optional", None)
        inner = _flatten_input(f"{name}.value", type_proto.optional_type.elem_type, value, feeds)
        return ("optional", inner)
    if not type_proto.HasField("tensor_type"):
        raise InputError(f"input {name!r} is neither a tensor, a sequence nor an optional")
    if value is None:
        raise InputError(f"input {name!r} is a tensor, got None")
    feeds[name] = np.asarray(value)
    return "tensor"


def _rebuild_input(name: str, type_proto, structure, feeds: dict, nodes: list) -> list:
    """The tensor inputs (``ValueInfoProto``, typed as ``feeds`` holds them) that stand for input
    ``name`` given with ``structure``, appending to ``nodes`` what rebuilds ``name`` from them."""
    from onnx import helper

    def tensor(n: str):
        a = feeds[n]
        return helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)

    if type_proto.HasField("tensor_type"):
        return [tensor(name)]
    if type_proto.HasField("optional_type"):
        inner_type = type_proto.optional_type.elem_type
        if structure[1] is None:
            nodes.append(helper.make_node("Optional", [], [name], type=inner_type))
            return []
        infos = _rebuild_input(f"{name}.value", inner_type, structure[1], feeds, nodes)
        nodes.append(helper.make_node("Optional", [f"{name}.value"], [name]))
        return infos
    elem = type_proto.sequence_type.elem_type
    if not elem.HasField("tensor_type"):
        raise InputError(f"input {name!r} is a sequence of non-tensors, which nnvm does not support")
    parts = [f"{name}.{k}" for k in range(structure)]
    if parts:
        nodes.append(helper.make_node("SequenceConstruct", parts, [name]))
    else:
        nodes.append(helper.make_node("SequenceEmpty", [], [name], dtype=elem.tensor_type.elem_type or 1))
    return [tensor(p) for p in parts]


def prepare(model, device: str = "CPU", **kwargs) -> NnvmBackendRep:
    """A rep of ``model`` (``onnx.ModelProto``, path or bytes) whose ``run(inputs)`` returns outputs."""
    if not _device_ok(device):
        raise Error(f"device {device!r} is not supported by the nnvm ONNX backend (only CPU)")
    kwargs.pop("rtol", None)
    kwargs.pop("atol", None)
    return NnvmBackendRep(model, device, **kwargs)


def run_model(model, inputs, device: str = "CPU", **kwargs) -> tuple:
    """``prepare(model).run(inputs)``."""
    return prepare(model, device, **kwargs).run(inputs)


def run_node(node, inputs, device: str = "CPU", outputs_info=None, **kwargs) -> tuple:
    """Run one ``onnx.NodeProto`` on numpy inputs (a one-node model with the inputs' types)."""
    from onnx import TensorProto, helper

    arrays = [np.asarray(x) for x in inputs]
    names = [n for n in node.input if n][:len(arrays)]
    infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in zip(names, arrays)]
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in node.output if n]
    opset = kwargs.pop("opset_version", None)
    graph = helper.make_graph([node], "run_node", infos, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)] if opset else None)
    return run_model(model, dict(zip(names, arrays)), device, **kwargs)


def supports_device(device: str) -> bool:
    """Only the host CPU (target ``llvm``)."""
    return _device_ok(device)


def is_compatible(model, device: str = "CPU", **kwargs) -> bool:
    """Every model is attempted; unsupported operators fail with an ``nnvm.Error`` naming them."""
    return True

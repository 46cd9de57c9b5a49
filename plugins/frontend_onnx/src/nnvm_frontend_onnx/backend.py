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
"""

from __future__ import annotations

import numpy as np

from nnvm.errors import Error, InputError

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
        self.specialized: set[str] = set()  # inputs whose values are compiled in
        self._modules: dict = {}

    def run(self, inputs, **kwargs) -> tuple:
        """The outputs, as a tuple of numpy arrays in the model's output order."""
        feeds = self._feeds(inputs)
        while True:
            key = self._key(feeds)
            mod = self._modules.get(key)
            if mod is None:
                try:
                    mod = self._compile(feeds)
                except Error as exc:
                    if self._specialize_for(exc, feeds):
                        continue
                    raise
                self._modules[key] = mod
            runtime = {k: v for k, v in feeds.items() if k not in self.specialized}
            outs = mod.run(**runtime) if runtime else mod.run()
            return tuple(np.asarray(o) for o in outs)

    # -- internals ----------------------------------------------------------------------------------
    def _feeds(self, inputs) -> dict:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(inputs) > len(self.input_names):
                raise InputError(f"the model takes {len(self.input_names)} inputs, got {len(inputs)}")
            feeds = dict(zip(self.input_names, inputs))
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise InputError(f"input {missing[0]!r} of the ONNX model is missing")
        return {k: np.asarray(v) for k, v in feeds.items()}

    def _key(self, feeds: dict) -> tuple:
        parts = []
        for name in self.input_names:
            v = feeds[name]
            value = v.tobytes() if name in self.specialized else None
            parts.append((name, v.shape, v.dtype.str, value))
        return tuple(parts)

    def _compile(self, feeds: dict):
        import nnvm

        model = self._specialized_model(feeds)
        shapes = {k: v.shape for k, v in feeds.items() if k not in self.specialized}
        try:
            return nnvm.compile(model, target="llvm", shapes=shapes, opt_level=self.opt_level)
        except Error:
            raise
        except Exception as exc:  # a compiler bug: still one nnvm.Error for the caller, cause attached
            ops = sorted({n.op_type for n in self.model.graph.node})
            raise Error(f"nnvm failed to compile the ONNX model (operators {', '.join(ops)}): "
                        f"{type(exc).__name__}: {exc}") from exc

    def _specialized_model(self, feeds: dict):
        if not self.specialized:
            return self.model
        from onnx import numpy_helper

        model = type(self.model)()
        model.CopyFrom(self.model)
        for name in self.input_names:
            if name in self.specialized:
                model.graph.initializer.append(numpy_helper.from_array(feeds[name], name))
        return model

    def _specialize_for(self, exc: Error, feeds: dict) -> bool:
        """After a converter asked for an input's value: specialize on it (or, when the value is
        computed from inputs, on every small input not yet specialized). False if nothing is left."""
        from nnvm_frontend_onnx.context import ValueDependentError

        if not isinstance(exc, ValueDependentError):
            return False
        if exc.value in feeds and exc.value not in self.specialized:
            self.specialized.add(exc.value)
            return True
        small = {n for n in self.input_names if n not in self.specialized
                 and feeds[n].size <= _MAX_SPECIALIZED_ELEMENTS}
        if not small:
            return False
        self.specialized |= small
        return True


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

"""nnvm: an end-to-end deep learning compiler.

    mod = nnvm.compile("resnet18.onnx", target="llvm")
    out, = mod.run(x)
    mod.export("resnet18.so"); nnvm.load("resnet18.so").run(x)
"""

from __future__ import annotations

import os

from nnvm import options as _options

# ``nnvm.plugins()`` lists loaded plugins per kind ({"frontend": [...], "backend": [...], "pass": [...],
# "op": [...]}); the module is callable so that the plugin manager's home and the API share one name.
# Importing it builds nothing: the manager is built on first use.
from nnvm import (
    plugins,  # noqa: F401
    te,  # noqa: F401
)
from nnvm.compiler import compile_model, import_model
from nnvm.dynamic import compile_symbolic, wants_symbolic
from nnvm.errors import (  # noqa: F401
    CalibrationInputError,
    DataDependentError,
    Error,
    InputError,
    ModelLoadError,
    ScheduleError,
    TargetError,
    UnboundDimError,
    UnsupportedOperatorError,
)
from nnvm.frontend import find_frontend
from nnvm.generate import Decoder  # noqa: F401  (nnvm.Decoder: greedy decoding with a KV cache)
from nnvm.graph.ir import Graph, Node, TensorType, detached  # noqa: F401
from nnvm.hookspecs import hookimpl  # noqa: F401
from nnvm.kernel_cache import KernelCache, default_kernel_cache
from nnvm.options import Options  # noqa: F401  (nnvm.Options)
from nnvm.runtime import staged_file
from nnvm.runtime.kernel import build_function
from nnvm.runtime.module import load_module
from nnvm.staged import compile_staged
from nnvm.te.lower import lower_schedule

__version__ = "0.1.0"


def lower(schedule, args, name: str = "main"):
    """The loop program of a schedule, as a ``PrimFunc`` (``print`` it to read it)."""
    return lower_schedule(schedule, list(args), name)


def build(schedule, args, target: str = "llvm", name: str = "main"):
    """Compile a schedule for ``target``; the result is callable on numpy arrays, one per argument."""
    return build_function(schedule, list(args), target, name)


def load_model(model, shapes: dict | None = None, **kwargs):
    """Import a model with the frontend that reads it; returns ``(graph, params)``."""
    graph = import_model(model, shapes, **kwargs)
    graph = graph.replace(params={k: detached(v) for k, v in graph.params.items()})
    return graph, dict(graph.params)


def compile(model, target: str = "llvm", shapes: dict | None = None, bounds: dict | None = None,  # noqa: A001
            opt_level: int = 3, tuning_log=None, dump_ir: str | None = None, kernel_cache=None,
            jobs: int | None = None, options: Options | None = None, **kwargs):
    """Compile a model (file path, framework object, or ``Graph``) into a runnable ``Module``.

    ``shapes``: input name -> shape; integers bind dims, names (``("batch", "seq")``) keep them symbolic.
    ``bounds``: dim name -> ``(lo, hi)``. With a symbolic dim or bounds the result is a
    ``nnvm.dynamic.SymbolicModule`` that runs any shape within the bounds (docs/dynamic-shapes.md); so is
    a model whose own symbolic dims cannot be bound (a leading batch dim alone is bound to 1, as before).

    ``kernel_cache``: a directory or ``nnvm.kernel_cache.KernelCache`` for compiled kernels, ``False`` for
    none; None: ``$NNVM_KERNEL_CACHE_DIR``, else ``$NNVM_CACHE_DIR/kernels``, else ``~/.cache/nnvm/kernels``.
    ``jobs``: worker processes compiling kernels (None: the CPUs, when nothing else runs threads here).
    ``options``: an ``nnvm.Options`` holding all of these and the CPU layer's switches; a keyword above
    that differs from its default overrides it. None: the active options (``nnvm.options.activated``),
    else the defaults.
    """
    options = (_options.active() or Options()) if options is None else options
    given = {"opt_level": (opt_level, 3), "tuning_log": (tuning_log, None), "dump_ir": (dump_ir, None),
             "kernel_cache": (kernel_cache, None), "jobs": (jobs, None)}
    changes = {k: v for k, (v, default) in given.items() if v != default}
    for name in ("disabled_passes", "enabled_passes"):  # pass names, as compile_model took them
        if name in kwargs:
            changes[name] = frozenset(kwargs.pop(name))
    options = options.replace(**changes)
    kernel_cache = options.kernel_cache
    if kernel_cache is None:
        kernel_cache = default_kernel_cache()
    elif kernel_cache is False:
        kernel_cache = None
    elif not isinstance(kernel_cache, KernelCache):
        kernel_cache = KernelCache(kernel_cache)
    options = options.replace(kernel_cache=False if kernel_cache is None else kernel_cache)
    return _compile_any(model, target, shapes, bounds, options, **kwargs)


def _compile_any(model, target, shapes, bounds, options: Options, **kwargs):
    """A bound, symbolic or staged module for ``model``, as ``compile`` says; a model with a node whose
    output shape its input values decide is cut there into stages, each compiled by this function."""
    try:
        if wants_symbolic(shapes, bounds):
            return compile_symbolic(model, target, shapes, bounds, options, **kwargs)
        try:
            return compile_model(model, target=target, shapes=shapes, options=options, **kwargs)
        except UnboundDimError:  # a dim that cannot be bound (not a leading batch): one module, every shape
            return compile_symbolic(model, target, shapes, bounds, options, **kwargs)
    except DataDependentError as exc:
        return compile_staged(model, exc, target, shapes, bounds, options, _compile_any, **kwargs)


def quantize(model, calibration_inputs, per_channel: bool = True, method: str = "minmax",
             percentile: float = 99.99, target: str = "llvm"):
    """A float model quantized after calibration, as a QDQ ``onnx.ModelProto`` (docs/quantization.md).

    ``model``: an ONNX path, bytes or ``onnx.ModelProto`` (other formats are refused: convert them to
    ONNX first). ``calibration_inputs``: a list of samples, each ``{input name: array}`` (or an array for
    a one-input model); nnvm runs the float model on them for ``target``. Weights int8 symmetric, per
    output channel (``per_channel``) or per tensor; activations uint8 over ranges found by ``method``:
    ``minmax``, ``percentile`` (``percentile`` of ``|x|``) or ``entropy`` (TensorRT's KL calibration).
    """
    frontend = find_frontend(model)
    if frontend.quantize is None:
        raise Error(f"nnvm.quantize writes QDQ ONNX and reads ONNX float models; this is a {frontend.name} "
                    f"model: convert it to ONNX first")
    return frontend.quantize(model, calibration_inputs, per_channel=per_channel, method=method,
                             percentile=percentile, target=target)


def load(path: str):
    """Load a module exported by ``mod.export`` (a bound, symbolic or staged module); needs only the core
    installed."""
    path = os.fspath(path)
    if staged_file.is_staged(path):
        return staged_file.load(path, load)
    return load_module(path)

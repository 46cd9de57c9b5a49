"""The one exception family users see. The CLI prints any of them as a single sentence."""

from __future__ import annotations


class Error(Exception):
    """A problem with the user's model, input, target or schedule; the message names where."""


def with_context(exc: Error, where: str) -> Error:
    """``exc`` with ``where`` (the node, group or file) put in front of its message, keeping its class
    and attributes, so a caller can still tell an ``UnsupportedOperatorError`` from any other error.
    Use as ``raise with_context(exc, f"node {name}") from None``."""
    exc.args = (f"{where}: {exc}",)
    return exc


class NodeError(Error):
    """An operator node the graph builder rejects: bad attributes, input count or input types.

    It carries the parts apart (``node``, ``op``, ``reason``) so a frontend can name its own node
    (``node conv1 (Convolution)``) in front of ``reason`` without parsing the message.
    """

    def __init__(self, node: str, op: str, reason: str):
        self.node, self.op, self.reason = node, op, reason
        super().__init__(f"node {node} ({op}): {reason}")


class UnsupportedOperatorError(Error):
    """The model uses operators no installed frontend can convert; lists all of them at once."""

    def __init__(self, fmt: str, missing: dict[str, list[str]], path: str | None = None):
        self.missing = missing
        where = f" in {path}" if path else ""
        parts = []
        # str keys: a damaged file can hold an operator name protobuf hands over as bytes (not UTF-8)
        for op, nodes in sorted(missing.items(), key=lambda item: str(item[0])):
            shown = ", ".join(map(str, nodes[:5])) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
            parts.append(f"{op} (nodes: {shown})")
        super().__init__(
            f"the {fmt} model{where} uses {len(missing)} unsupported operator"
            f"{'s' if len(missing) > 1 else ''}: " + "; ".join(parts)
        )


class ModelLoadError(Error):
    """The model file is missing, truncated or not in a format any frontend reads."""


class InputError(Error):
    """A runtime input has the wrong name, shape or dtype."""


class CalibrationInputError(InputError):
    """A calibration input of ``nnvm.quantize`` that does not fit the model: ``sample`` (its index),
    ``input`` (the model input's name, or None) and ``reason`` apart, so ``nnvm quantize`` can name the
    .npy file instead of the index."""

    def __init__(self, sample: int, input: str | None, reason: str):  # noqa: A002
        self.sample, self.input, self.reason = sample, input, reason
        what = f", input {input!r}" if input else ""
        super().__init__(f"calibration input {sample}{what}: {reason}")


class UnboundDimError(InputError):
    """A model input has a symbolic dim that binding could not give a value (not a leading batch dim):
    ``nnvm.compile`` then keeps the model's dims symbolic (docs/dynamic-shapes.md)."""


class DataDependentError(Error):
    """An operator whose output shape is decided by values computed at run time (``NonZero``, ``TopK``
    with a computed k, ``Range`` over computed bounds): ``nnvm.compile`` then cuts the model at it
    (``nnvm.staged``). ``node`` names the node in the frontend's terms, ``op`` its operator."""

    def __init__(self, message: str, node: str = "", op: str = ""):
        super().__init__(message)
        self.node, self.op = node, op


class ScheduleError(Error):
    """A schedule primitive was used in a way that cannot be lowered (names the stage and axis)."""


class TargetError(Error):
    """The target string names no installed backend, or an option it does not understand."""


class ResourceLimitError(Error):
    """A model or input needs more memory than the machine has, or sizes beyond 64 bits (``limits``)."""


def reason(exc: BaseException, limit: int = 200) -> str:
    """What a library's exception says, as one short line for a sentence: its first non-empty line
    (h5py's and protobuf's messages run over several), or its class name when it says nothing."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    if isinstance(exc, KeyError):  # its message is the bare key
        text = f"no entry {text}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


class reading:
    """Whatever a library raises while reading the user's file ``path`` is that file's error.

    h5py, zipfile, protobuf, json and numpy raise what they like on damaged bytes (h5py a
    ``RuntimeError`` about heap free lists, zipfile a ``struct.error``, numpy a ``MemoryError`` for a
    header that lies about a size); none of it is a bug in nnvm, so inside ``with reading(path,
    "not a readable Keras .h5 file"):`` any exception but an ``nnvm.Error`` becomes one
    ``ModelLoadError``: ``"{path}: {what} ({the library's first line})"``. Keep the block to the
    reading (lazy reads included: an h5py dataset read when a weight is fetched), so that a bug in a
    converter still surfaces as one. It lives here, below every layer, because the runtime reads
    exported modules with it too; frontends take it from ``nnvm.frontend``."""

    def __init__(self, path, what: str = "cannot be read"):
        self.path, self.what = path, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or isinstance(exc, Error) or not isinstance(exc, Exception):
            return False  # ours already says which file; KeyboardInterrupt and exit pass through
        why = "a size in it is too large to allocate" if isinstance(exc, MemoryError) else reason(exc)
        raise ModelLoadError(f"{self.path}: {self.what} ({why})") from None

"""The Keras conversion context: the layer being converted, its weights, and where each value's channels
are.

Keras tensors are channels-last. A value in ``cf`` holds its Keras tensor channels-first (NCHW for a
4-D tensor, the permutation ``nnvm.frontend.channels_last.channels_first_axes``); ``first``/``last`` give a
value in either layout, transposing once per value and layout (the transpose is remembered, so a
tensor read by three convolutions is transposed once).
"""

from __future__ import annotations

import numpy as np

from nnvm.frontend import ConversionContext, ConverterTable
from nnvm.frontend.channels_last import (
    channels_first_axes,
    channels_last_axes,
    to_channels_first,
    to_channels_last,
)
from nnvm_frontend_keras.reader import is_ops_node

CONVERTERS = ConverterTable("Keras")


def op_key(layer: dict) -> str:
    """The table key of a layer: its class name; ``keras.ops`` nodes as ``ops.<Class>``."""
    cls = layer.get("class_name", "")
    if is_ops_node(layer):
        return f"ops.{cls}"
    if cls not in CONVERTERS and f"ops.{cls}" in CONVERTERS and set(layer.get("config", {})) <= {"name"}:
        return f"ops.{cls}"  # a one-operand operation (keras.ops.relu) in a legacy .h5 config
    return cls


class Context(ConversionContext):
    def __init__(self, builder, km):
        super().__init__(builder)
        self.km = km
        self.weights: list = []
        self.kwargs: dict = {}
        self.cf: set = set()  # values holding their Keras tensor channels-first
        self._first: dict = {}  # channels-last value -> its channels-first twin, and back
        self._last: dict = {}

    def begin_layer(self, name: str, op: str, config: dict, weights: list, kwargs: dict) -> None:
        self.begin(name, op, config)
        self.weights, self.kwargs = list(weights), kwargs

    @property
    def label(self) -> str:
        return f"layer {self.name} ({self.op_type})"

    @property
    def keras_major(self) -> int:
        return self.km.major

    def weight(self, i: int, what: str) -> np.ndarray:
        if i >= len(self.weights):
            raise self.error(f"has {len(self.weights)} weights in the file, but its config needs {what} "
                             f"(weight {i})")
        return np.asarray(self.weights[i], dtype=np.float32)

    # -- layouts ------------------------------------------------------------------------------------
    def first(self, v: str) -> str:
        """``v`` channels-first (rank >= 3)."""
        if v in self.cf:
            return v
        if v not in self._first:
            perm = channels_first_axes(self.rank(v))
            t = self._moved(v, perm) or to_channels_first(self, v)
            self._first[v], self._last[t] = t, v
            self.cf.add(t)
        return self._first[v]

    def last(self, v: str) -> str:
        """``v`` channels-last, as Keras holds it."""
        if v not in self.cf:
            return v
        if v not in self._last:
            perm = channels_last_axes(self.rank(v))
            t = self._moved(v, perm) or to_channels_last(self, v)
            self._last[v], self._first[t] = t, v
        return self._last[v]

    def _moved(self, v: str, perm) -> str | None:
        """``v`` permuted by ``perm`` as a reshape, when the permutation moves only axes of size 1 (an
        SE block's (N, 1, 1, C) is (N, C, 1, 1) channels-first): no data moves, so no transpose."""
        shape = self.shape(v)
        if [a for a in range(len(shape)) if shape[a] != 1] != [a for a in perm if shape[a] != 1]:
            return None
        return self.reshape(v, [shape[p] for p in perm])

    def mark_first(self, v: str) -> str:
        self.cf.add(v)
        return v

    def like(self, v: str, layout_of: str) -> str:
        """``v`` marked with the layout of ``layout_of`` (for elementwise results)."""
        if layout_of in self.cf:
            self.cf.add(v)
        return v

    def keras_axis(self, v: str, axis: int) -> int:
        """Keras ``axis`` of the tensor ``v`` holds, as an axis of ``v`` in its layout."""
        rank = self.rank(v)
        a = self.normalize_axis(axis, rank)
        return channels_first_axes(rank).index(a) if v in self.cf else a

    def common_layout(self, values: list) -> list:
        """Elementwise operands in one layout: channels-first if any operand is and all non-scalar ones
        have its rank, else channels-last."""
        shaped = [v for v in values if self.rank(v) > 0]
        want_first = any(v in self.cf for v in shaped) and len({self.rank(v) for v in shaped}) == 1
        return [v if self.rank(v) == 0 else (self.first(v) if want_first else self.last(v)) for v in values]

    def channel_vector(self, v: str, vec, axis: int = -1) -> str:
        """A per-channel constant ``vec`` (along Keras ``axis`` of ``v``) shaped to broadcast against
        ``v`` in its layout."""
        vec = np.asarray(vec, dtype=np.float32)
        if vec.size == 1:
            return self.param(vec.reshape(()), "scalar")
        rank = self.rank(v)
        a = self.keras_axis(v, axis)
        shape = [1] * rank
        shape[a] = vec.size
        return self.param(vec.reshape(shape[1:] if a > 0 else shape), "channel")

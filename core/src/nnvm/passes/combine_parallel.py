"""combine_parallel_matmuls: products of one activation by several constant weights as one product.

A Llama-style decoder layer projects its normalised hidden state three times (``q``, ``k``, ``v``: 768 ->
768, 256, 256 with grouped-query attention) by three ``MatMul`` nodes. In a decoding step each is a
GEMV that streams its weight once, and the small ones never reach the memory bandwidth the large ones
do (a launch, and the prefetchers' ramp, for 0.8 MB: 19-23 GB/s against 35-50). Here they become one
product by the weights concatenated along their outputs (``[K, N1 + N2 + ...]``, a constant made at
compile time) followed by a slice of it for each original value, which their readers keep reading::

    q = matmul(x, Wq); k = matmul(x, Wk); v = matmul(x, Wv)
    ->  qkv = matmul(x, concat(Wq, Wk, Wv)); q = qkv[..., :768]; k = qkv[..., 768:1024]; v = ...

Each slice starts the injective kernel of its readers (the heads' reshape and transpose, the rotary
embedding), so it costs no kernel of its own; a ``split``, with three outputs, was one more kernel a
layer, and slow over symbolic rows (2.5 ms of Llama's 32-token prefill).

Only graphs with symbolic dims are rewritten (the modules that decode), so bound compiles keep their
kernels exactly; GPT-2's export already has its QKV in one ``Gemm``.
"""

from __future__ import annotations

import numpy as np

from nnvm.graph.ir import Graph, Node, TensorType


def combine_parallel_matmuls(graph: Graph, ctx=None) -> Graph:
    """Every set of two or more float32 ``matmul`` nodes reading the same activation by constant 2-D
    weights of the same depth, in a graph with symbolic dims, as one ``matmul`` and a slice of it each."""
    types = graph.types
    if not any(ty.symbolic for ty in types.values()):
        return graph
    sets: dict = {}  # (data, depth) -> matmul nodes, in order
    for node in graph.nodes:
        if node.op != "matmul" or len(node.inputs) != 2 or node.inputs[1] not in graph.params:
            continue
        data, weight = node.inputs
        w = graph.params[weight]
        if w.ndim != 2 or w.dtype != np.float32 or types.get(data) is None or types[data].dtype != "float32":
            continue
        if len(types[data].shape) < 2 or types[data].shape[-1] != w.shape[0]:
            continue
        sets.setdefault((data, w.shape[0]), []).append(node)
    sets = {key: nodes for key, nodes in sets.items() if len(nodes) > 1}
    if not sets:
        return graph
    params, new_types = dict(graph.params), dict(types)
    first = {nodes[0].name: nodes for nodes in sets.values()}
    dropped = {n.name for nodes in sets.values() for n in nodes[1:]}
    out_nodes: list = []
    for node in graph.nodes:
        if node.name in dropped:
            continue
        nodes = first.get(node.name)
        if nodes is None:
            out_nodes.append(node)
            continue
        data = node.inputs[0]
        weight = _fresh(graph, f"{node.name}_combined_weight", params)
        params[weight] = np.ascontiguousarray(np.concatenate([graph.params[n.inputs[1]] for n in nodes], 1))
        new_types[weight] = TensorType(params[weight].shape, "float32")
        whole = _fresh(graph, f"{node.name}_combined", new_types)
        lead = tuple(types[data].shape[:-1])
        new_types[whole] = TensorType((*lead, params[weight].shape[1]), "float32")
        out_nodes.append(Node("matmul", f"{node.name}_combined", (data, weight), (whole,), {}))
        at = 0
        for n in nodes:  # a slice each, which the reader's injective kernel takes in (a split would not)
            width = graph.params[n.inputs[1]].shape[1]
            attrs = {"begin": (at,), "end": (at + width,), "strides": None, "axes": (len(lead),)}
            out_nodes.append(Node("strided_slice", f"{n.name}_slice", (whole,), n.outputs, attrs))
            at += width
    used = {v for n in out_nodes for v in n.inputs}
    params = {k: v for k, v in params.items() if k in used}
    return graph.replace(nodes=tuple(out_nodes), params=params, types=new_types)


def _fresh(graph: Graph, hint: str, taken) -> str:
    name, k = hint, 0
    while name in taken or name in graph.types or name in graph.params:
        k += 1
        name = f"{hint}_{k}"
    return name

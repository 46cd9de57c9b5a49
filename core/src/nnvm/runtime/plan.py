"""Memory planning and the execution plan: what the runtime needs to run a compiled graph.

Every activation (graph inputs and kernel outputs) lives in one arena. Lifetimes count in half
steps: call ``k`` occupies ``2k`` (its inputs are read) and ``2k + 1`` (its outputs are written), so a
value is live from ``2k`` of the call that writes it to ``2k + 1`` of the last call that reads it
(graph outputs to the end), and a kernel's inputs and outputs normally never share memory.

In place: when a kernel's only output is computed from an input element by element (every node of
the group on the way from that input to the output is elementwise or broadcast and keeps its shape),
and that input dies at this call, the output takes the input's storage: the input's life ends at
``2k`` and the output's starts at ``2k + 1``. Each element is read before the same element is
written and no other element is read after, so sharing is safe; the two are planned as one block,
never at two offsets that partially overlap.

Views: a concatenation marked ``in_place`` (``is_view``; only where the dims before its axis are 1, so
its output's bytes are its inputs' bytes one after the other) gets no kernel call. Its inputs are
placed side by side inside its output, the producers writing there directly; a value may sit inside
several views (DenseNet: each layer's concatenation is a prefix of the next one's). Each family of
values tied this way is one storage block, live from the first member's write to the last member's
read; its members never take part in in-place pairs.

Blocks are placed largest first at the lowest offset that does not overlap any already placed block
whose lifetime overlaps, a greedy that lands close to the lower bound (the most bytes ever live at
once).
"""

from __future__ import annotations

from nnvm.errors import Error
from nnvm.graph.dims import Dim
from nnvm.graph.ir import Graph, TensorType
from nnvm.ops.registry import OpPattern, get_op

ALIGN = 64
PLAN_VERSION = 1  # the runtime reads offsets only; lifetimes in half steps do not change it


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_memory(sizes: dict, lifetimes: dict) -> tuple[dict, int]:
    """Offsets for values with byte ``sizes`` and inclusive ``lifetimes`` (first, last step)."""
    placed: list = []  # (offset, size, first, last)
    offsets: dict = {}
    for v in sorted(sizes, key=lambda v: (-sizes[v], lifetimes[v][0])):
        size = _aligned(max(sizes[v], 1))
        first, last = lifetimes[v]
        conflicts = sorted((o, s) for o, s, f, l in placed if not (l < first or last < f))
        offset = 0
        for o, s in conflicts:
            if offset + size <= o:
                break
            offset = max(offset, o + s)
        offsets[v] = offset
        placed.append((offset, size, first, last))
    arena = max((o + s for o, s, _, _ in placed), default=0)
    return offsets, arena


def check_plan(plan: dict) -> None:
    """Raise ``Error`` naming the values when two that are live at the same time share bytes, or when
    the arena is below the lower bound: the planner's invariants, for its tests and for debugging it."""
    placed = sorted(plan["placements"].items(), key=lambda item: item[1][0])
    views = plan.get("views", {})
    for i, (v, (o1, s1, f1, l1)) in enumerate(placed):
        for w, (o2, s2, f2, l2) in placed[i + 1:]:
            if o2 >= o1 + s1:
                break  # sorted by offset: no later value starts inside v
            if v in views and views[v] == views.get(w):
                continue  # one view family: view_placements checked the values kernels write
            if f1 <= l2 and f2 <= l1:
                raise Error(f"memory plan: {v} [{o1}, {o1 + s1}) live {f1}..{l1} overlaps {w} "
                            f"[{o2}, {o2 + s2}) live {f2}..{l2}")
    if plan["lower_bound_bytes"] > plan["arena_bytes"]:
        raise Error(f"memory plan: the arena ({plan['arena_bytes']} bytes) is below the lower bound "
                    f"({plan['lower_bound_bytes']} bytes)")


def inplace_input(graph: Graph, call: dict, producers: dict) -> str | None:
    """The input whose storage the call's single output may take (see the module docstring), or None."""
    members = set(call["group"])
    outs = [v for v in call["args"] if v in producers and producers[v].name in members]
    if len(outs) != 1:
        return None
    out = outs[0]
    out_ty = graph.type_of(out)
    nodes = [n for n in graph.nodes if n.name in members]
    for v in call["args"]:
        if v == out or v in graph.params or v in graph.inputs or v in graph.outputs:
            continue
        ty = graph.type_of(v)
        if ty.nbytes != out_ty.nbytes or ty.shape != out_ty.shape:
            continue
        reach = {v}
        ok = True
        for node in nodes:  # execution order: a reader comes after what it reads
            if not any(i in reach for i in node.inputs):
                continue
            if get_op(node.op, node.name).pattern > OpPattern.BROADCAST or any(
                    graph.type_of(o).shape != ty.shape for o in node.outputs):
                ok = False
                break
            reach.update(node.outputs)
        if ok and out in reach:
            return v
    return None


class ViewPlaces:
    """Where views put values: each value -> (value it lies in, byte offset there), a union-find with
    offsets. ``tie`` records a view's inputs inside its output, or refuses (changing nothing) where
    that would put one value at two places or two values that kernels write on the same bytes. The CPU
    pass that marks views (``nnvm.cpu.concat_in_place``) and ``view_placements`` both walk with it."""

    def __init__(self):
        self.parent: dict = {}  # value -> (value it is placed in, byte offset there); roots absent
        self.views: set = set()

    def find(self, v) -> tuple:
        offset = 0
        while v in self.parent:
            v, step = self.parent[v]
            offset += step
        return v, offset

    def tie(self, graph: Graph, node) -> str | None:
        """None when ``node``'s inputs now lie inside its output, else why not (nothing recorded)."""
        saved = dict(self.parent)
        out, at = node.outputs[0], 0
        for v in node.inputs:
            root_in, off_in = self.find(v)
            root_out, off_out = self.find(out)
            if root_in == root_out:
                if off_in != off_out + at:
                    self.parent = saved
                    return f"{v} would lie at two places inside {out}"
            else:
                self.parent[root_in] = (root_out, off_out + at - off_in)
            at += graph.type_of(v).nbytes
        clash = self._clash(graph, self.views | {out})
        if clash is not None:
            self.parent = saved
            return clash
        self.views.add(out)
        return None

    def _clash(self, graph: Graph, views: set) -> str | None:
        for found in self.blocks(views).values():
            written = sorted((o, graph.type_of(v).nbytes, v) for v, o in found.items() if v not in views)
            for (o1, s1, v1), (o2, _, v2) in zip(written, written[1:]):
                if o2 < o1 + s1:
                    return f"the views place {v1} and {v2} on the same bytes"
        return None

    def blocks(self, views: set | None = None) -> dict:
        """block (its root value) -> {value: byte offset from the block's start} for every tied value."""
        members: dict = {}
        for v in list(self.parent) + list(self.views if views is None else views):
            root, offset = self.find(v)
            members.setdefault(root, {})[v] = offset
        return {root: {v: o - min(found.values()) for v, o in found.items()}
                for root, found in members.items()}


def view_placements(graph: Graph, calls: list) -> dict:
    """value -> (block, byte offset in the block) for every value the views tie together (see the module
    docstring); a block is named by one of its values. Raises ``Error`` where the views contradict each
    other (the pass that marks views must never let that happen)."""
    by_name = {n.name: n for n in graph.nodes}
    places = ViewPlaces()
    for call in calls:
        if call.get("view"):
            why = places.tie(graph, by_name[call["group"][0]])
            if why is not None:
                raise Error(f"memory plan: {why}")
    return {v: (root, o) for root, found in places.blocks().items() for v, o in found.items()}


def symbolic_dims(graph: Graph) -> list:
    """The names of the symbolic dims in ``graph``'s types, in order of first appearance."""
    found: dict = {}
    for ty in graph.types.values():
        for d in ty.shape:
            if isinstance(d, Dim):
                found.update(dict.fromkeys(d.names))
    return list(found)


def bind_types(graph: Graph, values: dict) -> Graph:
    """``graph`` with every symbolic dim of its types evaluated with ``values`` (dim name -> int)."""
    types = {v: TensorType(tuple(d.evaluate(values) if isinstance(d, Dim) else d for d in ty.shape), ty.dtype)
             if ty.symbolic else ty for v, ty in graph.types.items()}
    return graph.replace(types=types)


def bind_dim(value, name: str, size: int):
    """An attribute value (nested tuples, lists, dicts) with dim ``name`` set to ``size`` where it
    appears; other dims are left symbolic (a group using them is not looped)."""
    if isinstance(value, Dim):
        return value.evaluate({name: size}) if set(value.names) <= {name} else value
    if isinstance(value, tuple | list):
        return type(value)(bind_dim(v, name, size) for v in value)
    if isinstance(value, dict):
        return {k: bind_dim(v, name, size) for k, v in value.items()}
    return value


def bound_graph(graph: Graph, name: str, size: int = 1) -> Graph:
    """``graph`` with dim ``name`` set to ``size`` in its types (dims of other names stay)."""
    types = {v: TensorType(tuple(bind_dim(d, name, size) for d in ty.shape), ty.dtype) if ty.symbolic else ty
             for v, ty in graph.types.items()}
    return graph.replace(types=types)


def inplace_pairs(graph: Graph, calls: list) -> dict:
    """Call index -> the input whose storage its output may take (``inplace_input``). On a graph with
    symbolic dims the shapes compare as expressions, so the pairs hold for every binding: a symbolic
    module finds them once and plans each binding (or bucket of bindings) with them."""
    producers = graph.producers()
    pairs = {}
    for k, call in enumerate(calls):
        if call.get("view"):
            continue
        v = inplace_input(graph, call, producers)
        if v is not None:
            pairs[k] = v
    return pairs


def make_plan(graph: Graph, calls: list, inplace: bool = True, dims: dict | None = None,
              pairs: dict | None = None, bindable: bool = False, places: dict | None = None) -> dict:
    """The JSON-able plan: inputs, outputs, kernel calls with argument locations, arena size. A graph with
    symbolic dims is planned for one binding, ``dims`` (name -> value): shapes and sizes are evaluated
    with it, and a call whose kernel takes dims (``call["dims"]``, ``lowering.group_calls``) gets a
    ``{"dim": name}`` argument for each, after its buffers. ``pairs``: the in-place pairs
    (``inplace_pairs``), found here when not given; on a symbolic graph they are found before binding,
    so they hold for any smaller binding a bucket's plan serves.

    ``bindable``: each input and output whose storage no other value shares (no in-place partner, no
    view) lists the kernel arguments that read or write it (``"uses"``: ``[call, argument]`` pairs), so
    a run can point them at the caller's arrays instead of copying through the arena
    (``Module.run_shaped``).

    ``places``: the views' placements (``view_placements``) where they are not those of this binding:
    over a symbolic batch they are one image's, each image a block's image apart (``nnvm.batch_loop``)."""
    if inplace and pairs is None:
        pairs = inplace_pairs(graph, calls)
    if dims is not None:
        graph = bind_types(graph, dims)
    in_views = view_placements(graph, calls) if places is None else places
    runs = [(k, call) for k, call in enumerate(calls) if not call.get("view")]  # (index in calls, call)
    steps = len(runs)
    lifetimes: dict = {}
    for v in graph.inputs:
        lifetimes[v] = [0, 1]
    producers = graph.producers()
    for step, (_, call) in enumerate(runs):
        for v in call["args"]:
            if v in graph.params:
                continue
            if v not in lifetimes:
                lifetimes[v] = [2 * step, 2 * step + 1]
            lifetimes[v][1] = max(lifetimes[v][1], 2 * step + 1)
    for v in graph.outputs:
        if v in lifetimes:
            lifetimes[v][1] = 2 * steps + 1
    # In-place pairs: the input's life ends as the output's begins; both join one storage block.
    block_of = {v: v for v in lifetimes}
    for step, (k, call) in enumerate(runs if inplace else ()):
        v = pairs.get(k)
        if v is None or v in in_views or lifetimes[v][1] != 2 * step + 1:
            continue  # read again later: its storage is not free
        out = next(o for o in call["args"] if o in producers and producers[o].name in set(call["group"]))
        if out in in_views:
            continue
        lifetimes[v][1] = 2 * step
        lifetimes[out][0] = 2 * step + 1
        block_of[out] = block_of[v]
    sizes = {v: graph.type_of(v).nbytes for v in list(lifetimes) + list(in_views)}
    inner = {}  # byte offset of a value inside its block (views' families; 0 for every other value)
    for v, (root, offset) in in_views.items():
        block_of[v], inner[v] = root, offset
    block_size: dict = {}
    block_life: dict = {}
    for v, b in block_of.items():
        block_size[b] = max(block_size.get(b, 0), inner.get(v, 0) + sizes[v])
        if v in lifetimes:  # a view no kernel reads has none: its block lives while its members do
            f, last = lifetimes[v]
            bf, bl = block_life.get(b, (f, last))
            block_life[b] = (min(bf, f), max(bl, last))
    for v in in_views:
        lifetimes.setdefault(v, list(block_life[block_of[v]]))
    block_offsets, arena = plan_memory(block_size, block_life)
    offsets = {v: block_offsets[b] + inner.get(v, 0) for v, b in block_of.items()}
    change = [0] * (2 * steps + 3)  # bytes becoming live (+) and dead (-) at each step: one sweep
    live_spans = [(sizes[v], lifetimes[v]) for v in lifetimes if v not in in_views]
    live_spans += [(block_size[b], block_life[b]) for b in set(in_views[v][0] for v in in_views)]
    for size, (f, last) in live_spans:
        change[f] += _aligned(size)
        change[last + 1] -= _aligned(size)
    lower_bound = live = 0
    for step in range(2 * steps + 2):
        live += change[step]
        lower_bound = max(lower_bound, live)

    def ref(v):
        if v in graph.params:
            return {"param": v}
        return {"arena": offsets[v], "nbytes": sizes[v]}

    uses: dict = {}
    sharers: dict = {}
    if bindable:
        for k, (_, c) in enumerate(runs):  # the plan's calls: views get none
            for a, v in enumerate(c["args"]):
                uses.setdefault(v, []).append([k, a])
        for b in block_of.values():
            sharers[b] = sharers.get(b, 0) + 1
        ends = list(graph.inputs) + list(graph.outputs)

    def desc(v):
        ty = graph.type_of(v)
        d = {"name": v, "shape": list(ty.shape), "dtype": ty.dtype, "ref": ref(v)}
        # a value both input and output, or twice an output, has one storage: it stays in the arena
        # (a view's family, an in-place pair: one storage for several values)
        if bindable and "arena" in d["ref"] and sharers.get(block_of.get(v)) == 1 and ends.count(v) == 1:
            d["uses"] = uses.get(v, [])
        return d

    plan = {
        "version": PLAN_VERSION,
        "inputs": [desc(v) for v in graph.inputs],
        "outputs": [desc(v) for v in graph.outputs],
        "calls": [{"kernel": c["kernel"], "group": c["group"],
                   "args": [ref(v) for v in c["args"]] + [{"dim": d} for d in c.get("dims", ())]}
                  for _, c in runs],
        "arena_bytes": arena,
        # Without fusion or planning every node output and input would have its own memory.
        "naive_bytes": sum(_aligned(graph.type_of(v).nbytes)
                           for v in list(graph.inputs) + [o for n in graph.nodes for o in n.outputs]),
        "lower_bound_bytes": lower_bound,
        "placements": {v: [offsets[v], sizes[v], lifetimes[v][0], lifetimes[v][1]] for v in offsets},
    }
    if in_views:  # which placements share a block on purpose (check_plan)
        plan["views"] = {v: root for v, (root, _) in in_views.items()}
    if dims is not None:
        plan["dims"] = dict(dims)
    return plan

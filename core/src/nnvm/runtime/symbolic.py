"""Binding a symbolic module's dims at each run, and its shapes as small programs an exported file carries.

``DimSignature`` is what a run needs to know about a module with symbolic dims (docs/dynamic-shapes.md):
each input's declared shape (ints, dim names, ``past + seq``), every dim's bounds, and the requirements
the import recorded (``seq <= 512`` for a slice of a position table). ``bind`` reads each dim from the
given arrays' shapes and checks it, one sentence naming the input and the dim; the compiled symbolic
module (``nnvm.dynamic``) and an exported one loaded back (``nnvm.load``) both bind through it.

An exported symbolic module must also be bound where there is no Python (the C runtime), so every shape
expression it needs (each input axis, each output axis, each requirement) is written as a **program**:
a postfix list of int64 words over the dim vector (the dims in their export order),

    CONST v | DIM k | ADD | SUB | MUL | FLOORDIV | MOD | MIN | MAX

(``CONST`` and ``DIM`` take the next word; division and remainder round toward minus infinity, as
Python's). ``nnvm_runtime.c`` evaluates the same words; ``program`` and ``evaluate`` are their Python side.
"""

from __future__ import annotations

from nnvm.errors import Error, InputError
from nnvm.graph.dims import Dim, dim_expression
from nnvm.tir import expr as E

CONST, DIM, ADD, SUB, MUL, FLOORDIV, MOD, MIN, MAX = range(9)
_BINARY = {"add": ADD, "sub": SUB, "mul": MUL, "floordiv": FLOORDIV, "floormod": MOD, "min": MIN, "max": MAX}
MAX_STACK = 32  # the C runtime's evaluation stack; an export refuses a deeper program


def program(d, dims: list) -> list[int]:
    """The postfix program of ``d`` (an int or a ``Dim``) over the dim vector ``dims`` (names, in order)."""
    if not isinstance(d, Dim):
        return [CONST, int(d)]
    code: list = []
    depth = _emit(d.expr, dims, code)
    if depth > MAX_STACK:
        raise Error(f"the dim {d} is too deep an expression ({depth} levels) for the C runtime")
    return code


def _emit(e, dims: list, code: list) -> int:
    """Appends ``e``'s words to ``code``; returns the stack depth evaluating it needs."""
    if isinstance(e, E.Const):
        code += [CONST, int(e.value)]
        return 1
    if isinstance(e, E.Var):
        if e.name not in dims:
            raise Error(f"the dim {e.name} is not one of the module's dims ({', '.join(dims)})")
        code += [DIM, dims.index(e.name)]
        return 1
    if isinstance(e, E.BinOp) and e.op in _BINARY:
        a = _emit(e.a, dims, code)
        b = _emit(e.b, dims, code)
        code.append(_BINARY[e.op])
        return max(a, b + 1)
    raise Error(f"a dim must be built of dim names, integers and + - * // % min max, not {e}")


def evaluate(code: list, values: list) -> int:
    """The value of a postfix ``program`` with the dim vector ``values``."""
    stack: list = []
    k = 0
    while k < len(code):
        op = code[k]
        if op in (CONST, DIM):
            stack.append(code[k + 1] if op == CONST else values[code[k + 1]])
            k += 2
            continue
        if len(stack) < 2 or op not in (ADD, SUB, MUL, FLOORDIV, MOD, MIN, MAX):
            raise ValueError(f"a malformed dim program {code}")
        b, a = stack.pop(), stack.pop()
        stack.append({ADD: a + b, SUB: a - b, MUL: a * b, MIN: min(a, b), MAX: max(a, b)}.get(op)
                     if op not in (FLOORDIV, MOD) else (a // b if op == FLOORDIV else a % b))
        k += 1
    if len(stack) != 1:
        raise ValueError(f"a malformed dim program {code}")
    return stack[0]


class Program:
    """A dim read back from its program: what ``DimSignature`` needs of a ``Dim`` (names, value, text)."""

    def __init__(self, code: list, dims: list, text: str):
        self.code, self._dims, self._text = [int(w) for w in code], list(dims), text
        names, k = {}, 0
        while k < len(self.code):  # walked word by word: a CONST's value may equal DIM's code
            if self.code[k] == DIM:
                names[self._dims[self.code[k + 1]]] = None
            k += 2 if self.code[k] in (CONST, DIM) else 1
        self.names = tuple(names)

    def evaluate(self, values: dict) -> int:
        return evaluate(self.code, [values.get(d, 0) for d in self._dims])

    def __str__(self) -> str:
        return self._text


class DimSignature:
    """The inputs' declared shapes (name -> ints, dim names and ``past + seq`` texts), each dim's bounds
    (``{dim: (lo, hi or None)}``) and the requirements ``(dim, limit, where)``, dim <= limit at every run
    (``Dim``s, ``Program``s or ints): what binds a symbolic module's dims from a run's inputs."""

    def __init__(self, inputs: dict, bounds: dict, requirements: list = ()):
        self.inputs = {name: tuple(shape) for name, shape in inputs.items()}
        self.bounds = dict(bounds)
        self.requirements = list(requirements)
        # dims the model names by arithmetic of others (``past + seq``), by their text
        self.expressions = {d: dim_expression(d) for shape in self.inputs.values() for d in shape
                            if isinstance(d, str) and dim_expression(d) is not None}

    def bind(self, shapes: dict) -> dict:
        """Each dim's value from the inputs' ``shapes`` (by name), checked: rank and static dims as
        declared, every dim within its bounds and the same in every input carrying it."""
        values: dict = {}
        source: dict = {}
        later: list = []
        for name, shape in self.inputs.items():
            got = tuple(shapes[name])
            if len(got) != len(shape):
                raise InputError(f"input {name!r} must have rank {len(shape)} {shown(shape)}, "
                                 f"got shape {list(got)}")
            for axis, (d, n) in enumerate(zip(shape, got)):
                if isinstance(d, int):
                    if n != d:
                        raise InputError(f"input {name!r} dim {axis} must be {d} {shown(shape)}, got {n}")
                    continue
                if d in self.expressions:  # ``past + seq``: checked once its names are bound
                    later.append((name, axis, d, n))
                    continue
                lo, hi = self.bounds[d]
                if d in values:
                    if n != values[d]:
                        raise InputError(f"input {name!r} dim {axis} ({d}) is {n}, but input {source[d]!r} "
                                         f"has {d} = {values[d]}")
                    continue
                if n < lo or (hi is not None and n > hi):
                    raise InputError(f"input {name!r} dim {axis} ({d}) is {n}, outside its bounds "
                                     f"[{lo}, {'inf' if hi is None else hi}]")
                values[d], source[d] = n, name
        for name, axis, d, n in later:
            want = self.expressions[d].evaluate(values)
            if n != want:
                given = ", ".join(f"{k} = {values[k]} (input {source[k]!r})"
                                  for k in self.expressions[d].names)
                raise InputError(f"input {name!r} dim {axis} ({d}) is {n}, but {given} make it {want}")
        for dim, limit, where in self.requirements:
            got = dim.evaluate(values) if not isinstance(dim, int) else dim
            most = limit.evaluate(values) if not isinstance(limit, int) else limit
            if got > most:
                # either side may be a constant: a slice's constant end over a symbolic axis
                names = dict.fromkeys(n for d in (dim, limit) for n in getattr(d, "names", ()))
                given = ", ".join(f"{n} = {values[n]} (input {source[n]!r})" for n in names)
                raise InputError(f"{where}: {dim} must be at most {most}, and the inputs give {given}")
        return values


def shown(shape) -> str:
    """A declared shape as text for messages: ``(batch, seq, 64)``."""
    return "(" + ", ".join(str(d) for d in shape) + ")"


def describe(signature: DimSignature, dims: list, outputs: list) -> dict:
    """The JSON section an exported symbolic module carries (``Module.export``): the dims in dim-vector
    order with their bounds, each input's declared shape and each output's shape (``(name, shape)`` of
    ints and ``Dim``s) with a ``program`` per axis, and the requirements as programs."""
    def declared(d):
        if isinstance(d, int):
            return d
        return signature.expressions.get(d) or Dim.named(d)

    return {
        "dims": [[d, *signature.bounds[d]] for d in dims],
        "inputs": [{"name": name, "shape": list(shape),
                    "programs": [program(declared(d), dims) for d in shape]}
                   for name, shape in signature.inputs.items()],
        "outputs": [{"name": name, "shape": [d if isinstance(d, int) else str(d) for d in shape],
                     "programs": [program(d, dims) for d in shape]} for name, shape in outputs],
        "requirements": [{"dim": program(dim, dims), "text": str(dim), "limit": program(limit, dims),
                          "where": where} for dim, limit, where in signature.requirements],
    }


def read_description(desc: dict) -> tuple[DimSignature, list, list]:
    """(the signature, the dims in dim-vector order, each output's shape as ``Program``s and ints) of an
    exported symbolic module's section (``describe``); a ``KeyError``/``TypeError``/``ValueError`` where
    it is malformed (the loader reports the file)."""
    dims = [str(d) for d, _, _ in desc["dims"]]
    bounds = {str(d): (int(lo), None if hi is None else int(hi)) for d, lo, hi in desc["dims"]}
    inputs = {str(i["name"]): tuple(d if isinstance(d, int) else str(d) for d in i["shape"])
              for i in desc["inputs"]}
    for shape in inputs.values():
        for d in shape:
            if isinstance(d, str) and d not in bounds and dim_expression(d) is None:
                raise ValueError(f"an input dim {d!r} that the dims do not list")
    requirements = [(Program(r["dim"], dims, r["text"]), Program(r["limit"], dims, ""), str(r["where"]))
                    for r in desc["requirements"]]
    outputs = [[int(code[1]) if len(code) == 2 and code[0] == CONST else Program(code, dims, str(text))
                for code, text in zip(o["programs"], o["shape"], strict=True)] for o in desc["outputs"]]
    upper = {d: hi for d, (_, hi) in bounds.items()}
    for p in [d for shape in outputs for d in shape if isinstance(d, Program)] + [r[0] for r in requirements]:
        p.evaluate(upper)  # a malformed program fails here, at loading, not in a run
    return DimSignature(inputs, bounds, requirements), dims, outputs

"""Greedy decoding with a KV cache: ``nnvm generate`` and ``nnvm.Decoder``.

A decoder exported "with past" (Hugging Face Optimum's names: ``input_ids`` [batch, seq],
``attention_mask`` [batch, past + seq], ``past_key_values.{i}.key|value`` [batch, kv_heads, past,
head_dim] in; ``logits`` and ``present.{i}.key|value`` out; ``position_ids`` [batch, seq] when the model
takes it) compiles once, unbound (``nnvm.compile``: one symbolic module, its kernels take the dims), and
runs every step with it: the prompt with an empty past (``past`` = 0), then one token at a time.

The cache is the model's own ``present`` outputs fed back as the next step's ``past``, with no copy:
each step's outputs are fresh arrays the caller owns, which the module's kernels wrote in place, and the
next step's kernels read them in place as its ``past`` (``Module.run_shaped`` points the kernels'
arguments at the caller's arrays; ``make_plan``'s ``bindable``). The one copy of the cache a step is the
graph's own ``Concat(past, new)`` writing ``present`` (docs/dynamic-shapes.md says what removing it would
take: a preallocated max-length cache the kernels append to).

The same loop drives onnxruntime and OpenVINO (``peer_step``), so ``--compare`` and ``bench/decode.py``
time all three the same way and check that they choose the same tokens.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import numpy as np

import nnvm
from nnvm.bench import onnxruntime_session
from nnvm.dynamic import SymbolicModule
from nnvm.errors import Error, InputError

PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
PRESENT = re.compile(r"^present\.(\d+)\.(key|value)$")


class DecoderSpec:
    """What the loop needs to know of a with-past export: its inputs, the cache's inputs and the outputs
    that feed them, each cache tensor's [kv_heads, head_dim], and which output holds the logits."""

    def __init__(self, where: str, input_shapes: dict, output_names: list[str]):
        names = list(input_shapes)
        past = [n for n in names if PAST.match(n)]
        if "input_ids" not in names or not past:
            raise InputError(f"{where} is not a decoder exported with its KV cache: it needs inputs "
                             f"'input_ids' and 'past_key_values.<i>.key|value', and has "
                             f"{', '.join(map(repr, names))}")
        known = ("input_ids", "attention_mask", "position_ids")
        unknown = [n for n in names if n not in known and n not in past]
        if unknown:
            raise InputError(f"{where}: input {unknown[0]!r} is none of a decoder's inputs (input_ids, "
                             "attention_mask, position_ids, past_key_values.<i>.key|value)")
        by_key = {PRESENT.match(n).groups(): n for n in output_names if PRESENT.match(n)}
        self.feeds: dict = {}  # past input name -> the present output feeding it
        for name in past:
            key = PAST.match(name).groups()
            if key not in by_key:
                raise InputError(f"{where}: input {name!r} has no output 'present.{key[0]}.{key[1]}' to "
                                 "feed it from the previous step")
            self.feeds[name] = by_key[key]
        self.shapes: dict = {}  # past input name -> (kv_heads, head_dim)
        for name in past:
            shape = input_shapes[name]
            if len(shape) != 4 or not isinstance(shape[1], int) or not isinstance(shape[3], int):
                raise InputError(f"{where}: input {name!r} has shape {tuple(shape)}; a KV cache input is "
                                 "[batch, kv_heads, past, head_dim] with static heads and head_dim")
            self.shapes[name] = (shape[1], shape[3])
        self.inputs = names
        self.outputs = list(output_names)
        self.logits = self.outputs.index("logits") if "logits" in self.outputs else 0

    def first_feeds(self, input_ids: np.ndarray, dtype=np.float32) -> dict:
        batch, seq = input_ids.shape
        feeds = {name: np.zeros((batch, h, 0, d), dtype) for name, (h, d) in self.shapes.items()}
        return self._with_ids(feeds, input_ids, 0)

    def _with_ids(self, feeds: dict, ids: np.ndarray, past: int) -> dict:
        batch, seq = ids.shape
        feeds["input_ids"] = ids
        if "attention_mask" in self.inputs:
            feeds["attention_mask"] = np.ones((batch, past + seq), np.int64)
        if "position_ids" in self.inputs:
            feeds["position_ids"] = np.broadcast_to(np.arange(past, past + seq, dtype=np.int64), (batch, seq))
        return feeds

    def next_feeds(self, outs: list, ids: np.ndarray, past: int) -> dict:
        """The next step's inputs: the ``present`` outputs as the ``past``, passed on as they are."""
        by_name = dict(zip(self.outputs, outs))
        return self._with_ids({name: by_name[out] for name, out in self.feeds.items()}, ids, past)


def greedy(step: Callable[[dict], list], spec: DecoderSpec, input_ids, new_tokens: int,
           cache_dtype=np.float32) -> dict:
    """Greedy decoding: the prompt in one step (its last position's argmax is the first new token), then
    ``new_tokens - 1`` steps of one token. Returns the tokens [batch, new_tokens], ``prefill_ms`` and
    ``decode_ms`` (the one-token steps, each timed), ``tokens_per_s`` (one-token steps a second)."""
    ids = np.ascontiguousarray(np.asarray(input_ids, dtype=np.int64))
    if ids.ndim != 2 or ids.shape[1] < 1:
        raise InputError(f"input_ids must be [batch, prompt length] with at least one token, got shape "
                         f"{list(ids.shape)}")
    if new_tokens < 1:
        raise InputError(f"new_tokens must be at least 1, got {new_tokens}")
    t0 = time.perf_counter()
    outs = step(spec.first_feeds(ids, cache_dtype))
    prefill = time.perf_counter() - t0
    token = np.argmax(outs[spec.logits][:, -1, :], axis=-1).astype(np.int64)
    tokens = [token]
    past = ids.shape[1]
    steps = []
    for _ in range(new_tokens - 1):
        t0 = time.perf_counter()
        outs = step(spec.next_feeds(outs, token[:, None], past))
        token = np.argmax(outs[spec.logits][:, -1, :], axis=-1).astype(np.int64)
        steps.append(time.perf_counter() - t0)
        tokens.append(token)
        past += 1
    decode = sum(steps)
    return {"tokens": np.stack(tokens, axis=1), "prefill_ms": 1e3 * prefill,
            "step_ms": [1e3 * s for s in steps], "decode_ms": 1e3 * decode,
            "tokens_per_s": len(steps) / decode if steps else float("nan")}


class Decoder:
    """A with-past decoder compiled once for every batch, prompt and cache length; ``generate`` decodes.

    ``model``: a with-past export (path or in-memory model) or a module ``nnvm.compile`` made of one.
    ``max_length``: the longest cache a run may have (``past + seq``), the ``past`` dims' upper bound."""

    def __init__(self, model, target: str = "llvm", max_length: int = 2048, **compile_kwargs):
        where = model if isinstance(model, str) else type(model).__name__
        if isinstance(model, SymbolicModule):
            mod = model
        elif hasattr(model, "run") and hasattr(model, "plan"):
            raise InputError(f"{where}: the module was compiled with every dim bound; a decoder needs one "
                             "compiled unbound (nnvm.compile without integer shapes for its inputs)")
        else:
            mod = nnvm.compile(model, target=target, **compile_kwargs)
            if not isinstance(mod, SymbolicModule):
                raise InputError(f"{where} has no symbolic dims (batch, seq, past), so it is no decoder "
                                 "exported with its KV cache")
        self.module = mod
        outputs = [d["name"] for d in mod.plan["outputs"]]
        self.spec = DecoderSpec(where, mod.input_shapes, outputs)
        # the cache starts empty: its length dims may be 0, and reach max_length
        for name in self.spec.shapes:
            d = mod.input_shapes[name][2]
            if isinstance(d, str) and d in mod.bounds:
                mod.bounds[d] = (0, max_length)

    def step(self, feeds: dict) -> list:
        """One run; on a GPU target the ``present`` outputs stay on the device (``run_resident``), and
        the next step's kernels read them there as its ``past``."""
        return self.module.run_resident(feeds, keep=self.spec.feeds.values())

    def generate(self, input_ids, new_tokens: int = 64) -> dict:
        """Greedy tokens [batch, new_tokens] and timings (``greedy``), plus ``plans``: the memory plans
        built during the run and the milliseconds they took (one per new binding of the dims)."""
        before = dict(self.module._compile_seconds)
        out = greedy(self.step, self.spec, input_ids, new_tokens)
        built = [s for k, s in self.module._compile_seconds.items() if k not in before or before[k] != s]
        out["plans"] = len(built)
        out["plan_ms"] = 1e3 * sum(built)
        return out


def generate(model, input_ids, new_tokens: int = 64, target: str = "llvm") -> np.ndarray:
    """Greedy decoding of a with-past decoder export: the ``new_tokens`` tokens after ``input_ids``."""
    return Decoder(model, target=target).generate(input_ids, new_tokens)["tokens"]


# -- the same loop on the peers --------------------------------------------------------------------
def peer_step(runtime: str, path: str, threads: int | None):
    """``(step, spec, version)`` for ``runtime`` (onnxruntime or openvino) on the export at ``path``,
    with ``threads`` intra-op threads (read back where the runtime says)."""
    if runtime == "onnxruntime":
        session, version = onnxruntime_session(path, threads)
        shapes = {i.name: [d if isinstance(d, int) else str(d) for d in i.shape]
                  for i in session.get_inputs()}
        outputs = [o.name for o in session.get_outputs()]
        spec = DecoderSpec(path, shapes, outputs)
        return (lambda feeds: session.run(None, feeds)), spec, f"onnxruntime {version}"
    if runtime == "openvino":
        try:
            import openvino as ov
        except ImportError:
            raise Error("--compare openvino needs the openvino package (pip install openvino)") from None
        core = ov.Core()
        config = {"INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": "1", "PERFORMANCE_HINT": "LATENCY"}
        if threads:
            config["INFERENCE_NUM_THREADS"] = str(threads)
        compiled = core.compile_model(core.read_model(path), "CPU", config)
        request = compiled.create_infer_request()
        shapes = {}
        for port in compiled.inputs:
            shapes[port.get_any_name()] = [d.get_length() if d.is_static else "?"
                                           for d in port.get_partial_shape()]
        outputs = [port.get_any_name() for port in compiled.outputs]
        spec = DecoderSpec(path, shapes, outputs)

        def step(feeds):
            request.infer(feeds)
            return [request.get_output_tensor(i).data.copy() for i in range(len(outputs))]

        got = compiled.get_property("INFERENCE_NUM_THREADS")
        return step, spec, f"openvino {ov.__version__.split('-')[0]} ({got} threads)"
    raise Error(f"--compare {runtime!r}: the peers are onnxruntime and openvino")

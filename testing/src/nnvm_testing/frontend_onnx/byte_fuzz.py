"""Byte-level corruption of every file format ``nnvm`` reads, each case in a child process.

A *format* is a small model written by the testing helpers of its frontend (no binaries in git) and
the one file of it that gets corrupted: the ``.onnx``; an MXNet ``-symbol.json`` or ``.params``; a Keras
``.h5`` or ``.keras``; a CoreML ``.mlmodel``, or one file inside an ``.mlpackage`` (NeuralNetwork or ML
Program: the model protobuf, ``weight.bin`` or ``Manifest.json``); an exported module (the CPU ELF with
its footer, the GPU zips); a ``.npy`` input. A *mutant* is that file truncated at a random point, with
bits flipped, a span zeroed or a span overwritten with random bytes, drawn from a seeded
``random.Random``.

Every mutant goes through ``nnvm run FILE --input ... --output out.npz`` in a child process (many cases
per child; a child that dies or hangs is replaced, and the case it was on is the failure), and the
oracle is the issue's rule: exit 0 with a result (the intact model's result, where the format carries a
checksum), or exit 1 with one line ``nnvm: error: ...`` naming the file; never a traceback (exit 2), a
signal or a hang. ``tests/test_fuzz_bytes.py`` runs a few mutants per format; ``scripts/fuzz.py
--bytes --mutants N`` runs many.
"""

from __future__ import annotations

import json
import queue
import random
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

KINDS = ("truncate", "flip", "zero", "overwrite")


def corrupt(rng: random.Random, blob: bytes) -> tuple[str, bytes]:
    """``(what was done, the damaged bytes)``: truncated at a random point, 1 to 8 bits flipped, a span
    zeroed, or a span overwritten with random bytes (spans of 1 byte up to a quarter of the file)."""
    n = len(blob)
    kind = rng.choice(KINDS)
    if kind == "truncate" or n < 2:
        cut = rng.randrange(0, max(n, 1))
        return f"truncated to {cut} of {n} bytes", blob[:cut]
    out = bytearray(blob)
    if kind == "flip":
        spots = sorted(rng.randrange(n) for _ in range(rng.randint(1, 8)))
        for pos in spots:
            out[pos] ^= 1 << rng.randrange(8)
        return f"bits flipped at {spots}", bytes(out)
    size = rng.randint(1, max(1, n // 4))
    start = rng.randrange(0, n - size + 1)
    if kind == "zero":
        out[start:start + size] = bytes(size)
        return f"{size} bytes zeroed at {start}", bytes(out)
    out[start:start + size] = rng.randbytes(size)
    return f"{size} bytes overwritten at {start}", bytes(out)


@dataclass
class Format:
    """One format's intact model: ``root`` (the file or package folder given to ``nnvm``), ``target``
    (the file inside it that gets corrupted; ``root`` itself for a single file), ``inputs`` (name ->
    ``.npy``), and ``checksummed``: the file carries a checksum, so a mutant that runs must give the
    intact result (other formats may legitimately run a model whose weights changed). ``companions``:
    files that go beside ``root`` (an MXNet symbol's ``.params``)."""

    name: str
    root: Path
    target: Path
    inputs: dict
    checksummed: bool = False
    companions: tuple = ()
    reference: list = field(default_factory=list)


def _onnx(folder: Path) -> Format:
    from nnvm_testing.frontend_onnx.fuzz import base_models

    m = base_models(str(folder))
    return Format("onnx", Path(m["path"]), Path(m["path"]), {"x": m["x_npy"]})


def _onnx_mapped(folder: Path) -> Format:
    from nnvm_testing.frontend_onnx.fuzz import mapped_model

    m = mapped_model(str(folder))
    return Format("onnx-mapped", Path(m["path"]), Path(m["path"]), {"x": m["x_npy"]})


def _npy(folder: Path) -> Format:
    from nnvm_testing.frontend_onnx.fuzz import base_models

    m = base_models(str(folder))
    # The model is the root; the input is what is corrupted (``case_argv`` puts it in place).
    return Format("npy", Path(m["path"]), Path(m["x_npy"]), {"x": m["x_npy"]})


def _mxnet(part: str) -> Callable[[Path], Format]:
    def build(folder: Path) -> Format:
        from nnvm_testing.frontend_mxnet.fuzz import base_model

        m = base_model(str(folder))
        target = Path(m["symbol"] if part == "symbol" else m["params"])
        return Format(f"mxnet-{part}", Path(m["symbol"]), target, {"data": m["x_npy"]},
                      companions=(Path(m["params"]),))

    return build


def _keras(ext: str) -> Callable[[Path], Format]:
    def build(folder: Path) -> Format:
        from nnvm_testing.frontend_keras.fuzz import base_models

        m = base_models(str(folder))
        path = Path(m["keras" if ext == "keras" else "h5"])
        return Format(f"keras-{ext}", path, path, {_keras_input(m["config"]): m["x_npy"]})

    return build


def _keras_input(config: dict) -> str:
    return config["config"]["layers"][0]["config"]["name"]


def _coreml(kind: str, member: str | None = None) -> Callable[[Path], Format]:
    def build(folder: Path) -> Format:
        from nnvm_testing.frontend_coreml import fuzz as cfuzz

        m = cfuzz.base_models(str(folder))
        if kind == "mlmodel":
            return Format("coreml-mlmodel", Path(m["mlmodel"]), Path(m["mlmodel"]), {"x": m["x_nn"]})
        if kind == "nn-package":
            pkg = cfuzz.write_package(folder / "nn.mlpackage", m["nn_spec"])
            files = {"model": cfuzz.MODEL_FILE, "manifest": Path("Manifest.json")}
            return Format(f"coreml-nn-package-{member}", pkg, pkg / files[member], {"x": m["x_nn"]})
        pkg = Path(m["mlpackage"])
        files = {"model": cfuzz.MODEL_FILE, "weights": cfuzz.WEIGHT_BIN, "manifest": Path("Manifest.json")}
        return Format(f"coreml-mlprogram-{member}", pkg, pkg / files[member], {"x": m["x_pkg"]})

    return build


def _module(target: str) -> Callable[[Path], Format]:
    def build(folder: Path) -> Format:
        import nnvm
        from nnvm_testing.frontend_onnx.fuzz import base_models

        m = base_models(str(folder))
        path = folder / f"good-{target}.so"
        nnvm.compile(m["path"], target=target).export(str(path))
        return Format(f"module-{target}", path, path, {"x": m["x_npy"]}, checksummed=True)

    return build


FORMATS: dict[str, Callable[[Path], Format]] = {
    "onnx": _onnx,
    "onnx-mapped": _onnx_mapped,
    "mxnet-symbol": _mxnet("symbol"),
    "mxnet-params": _mxnet("params"),
    "keras-h5": _keras("h5"),
    "keras-keras": _keras("keras"),
    "coreml-mlmodel": _coreml("mlmodel"),
    "coreml-nn-package-model": _coreml("nn-package", "model"),
    "coreml-nn-package-manifest": _coreml("nn-package", "manifest"),
    "coreml-mlprogram-model": _coreml("mlprogram", "model"),
    "coreml-mlprogram-weights": _coreml("mlprogram", "weights"),
    "coreml-mlprogram-manifest": _coreml("mlprogram", "manifest"),
    "module-llvm": _module("llvm"),
    "module-opencl": _module("opencl"),
    "module-cuda": _module("cuda"),
    "module-metal": _module("metal"),
    "npy": _npy,
}


@dataclass
class Case:
    """One mutant: where its copy of the model lies, what was done to it, the argv that runs it."""

    index: int
    what: str
    root: Path  # the model given to nnvm (a copy of the format's root)
    file: Path  # the damaged file, which the error must name
    argv: list
    output: Path
    unchanged: bool = False  # the mutation happened to leave the bytes as they were


def make_cases(fmt: Format, folder: Path, mutants: int, seed: int) -> list[Case]:
    """Case 0 is the intact model, then ``mutants`` damaged copies, each in its own folder."""
    rng = random.Random(f"{fmt.name}:{seed}")
    intact = fmt.target.read_bytes()
    cases = []
    for k in range(mutants + 1):
        where = folder / f"case{k}"
        where.mkdir(parents=True)
        what, blob = ("intact", intact) if k == 0 else corrupt(rng, intact)
        if fmt.name == "npy":
            root, file = fmt.root, where / "x.npy"
            inputs = {"x": str(file)}
        else:
            root = where / fmt.root.name
            if fmt.root.is_dir():
                shutil.copytree(fmt.root, root)
            else:
                for path in (fmt.root, *fmt.companions):
                    shutil.copy(path, where / path.name)
            file = root / fmt.target.relative_to(fmt.root) if fmt.root.is_dir() \
                else where / fmt.target.name
            inputs = fmt.inputs
        file.write_bytes(blob)
        output = where / "out.npz"
        argv = ["run", str(root), *[a for name, p in inputs.items() for a in ("--input", f"{name}={p}")],
                "--output", str(output)]
        cases.append(Case(k, what, root, file, argv, output, unchanged=k > 0 and blob == intact))
    return cases


# The child: each case through the CLI's main, reporting when it starts and how it ended.
_CHILD = r"""
import contextlib, io, json, sys
from nnvm.cli import main
for line in sys.stdin:
    k, argv = json.loads(line)
    print(json.dumps({"start": k}), flush=True)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    print(json.dumps({"case": k, "rc": rc, "stderr": err.getvalue()}), flush=True)
"""


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_cases(cases: list[Case], timeout: float = 120) -> dict[int, dict]:
    """``{case index: {"rc", "stderr"}}``, the cases run in a child process, ``timeout`` seconds each. A
    case the child died on is reported with ``rc`` ``"signal N"`` (or the exit status), one it hung on
    with ``"timeout"``; a new child then takes the rest."""
    results: dict[int, dict] = {}
    todo = list(cases)
    while todo:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        lines: queue.Queue = queue.Queue()
        errors: list = []
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        stderr = threading.Thread(target=lambda f, out: out.append(f.read()), args=(proc.stderr, errors),
                                  daemon=True)
        stderr.start()
        for case in todo:
            proc.stdin.write(json.dumps([case.index, case.argv]) + "\n")
        proc.stdin.close()
        current = None
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                proc.kill()
                proc.wait()
                results[current if current is not None else todo[0].index] = {"rc": "timeout", "stderr": ""}
                break
            if line is None:  # the child ended: finished, or died on ``current`` (or before any case)
                status = proc.wait()
                stderr.join(timeout=10)
                dead = todo[0].index if current is None else current
                if dead not in results:
                    rc = f"signal {-status}" if status < 0 else f"child exit {status}"
                    results[dead] = {"rc": rc, "stderr": "".join(errors)[-2000:]}
                break
            report = json.loads(line)
            if "start" in report:
                current = report["start"]
            else:
                results[report["case"]] = {"rc": report["rc"], "stderr": report["stderr"]}
        todo = [c for c in todo if c.index not in results]
    return results


def verdict(fmt: Format, case: Case, result: dict) -> tuple[str, str | None]:
    """``(outcome, problem)``: outcome ``"exit 0"`` or ``"exit 1"`` (or the failure), problem None when
    the case obeys the rule."""
    rc, err = result["rc"], result["stderr"]
    if rc == 0:
        try:
            with np.load(case.output) as z:
                outs = [z[k] for k in z.files]
        except Exception as exc:
            return "exit 0", f"exit 0 but no readable output ({exc})"
        must_match = case.index == 0 or case.unchanged or fmt.checksummed
        if must_match and fmt.reference and not all(
                a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
                for a, b in zip(outs, fmt.reference)):
            return "exit 0", "exit 0 with a result other than the intact model's"
        return "exit 0", None
    if rc == 1:
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("nnvm: note")]
        if len(lines) != 1 or not lines[0].startswith("nnvm: error: ") or "Traceback" in err:
            return "exit 1", f"exit 1 without one error line:\n{err}"
        named = str(case.file) in lines[0] or str(case.root) in lines[0]
        if not named:
            return "exit 1", f"the error does not name the file: {lines[0]}"
        return "exit 1", None
    return str(rc), f"{rc}:\n{err[-3000:]}"


def fuzz_format(name: str, folder: Path, mutants: int, seed: int, timeout: float = 120) -> dict:
    """Build format ``name`` in ``folder``, run its intact model and ``mutants`` mutants; returns the
    counts (``mutants``, ``exit 0``, ``exit 1``, ``other``) and the failures (``(case, problem)``)."""
    base = folder / "base"
    base.mkdir(parents=True)
    fmt = FORMATS[name](base)
    cases = make_cases(fmt, folder / "cases", mutants, seed)
    results = run_cases(cases, timeout)
    counts = {"mutants": mutants, "exit 0": 0, "exit 1": 0, "other": 0}
    failures = []
    intact, problem = verdict(fmt, cases[0], results[0])
    if intact != "exit 0" or problem:
        return {**counts, "failures": [("intact model", problem or results[0]["stderr"])]}
    with np.load(cases[0].output) as z:
        fmt.reference = [z[k] for k in z.files]
    for case in cases[1:]:
        outcome, problem = verdict(fmt, case, results[case.index])
        counts[outcome if outcome in counts else "other"] += 1
        if problem:
            failures.append((f"{name} case {case.index} ({case.what}): nnvm {' '.join(case.argv)}", problem))
    return {**counts, "failures": failures}

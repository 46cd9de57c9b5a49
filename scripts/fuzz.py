"""A long fuzz campaign over every input ``nnvm`` reads, with the generators of the fuzz tests.

    uv run python scripts/fuzz.py --seconds 600 [--seed 1] [--only onnx-bytes,npy,...]
    uv run python scripts/fuzz.py --bytes --mutants 200 [--seed 1] [--only onnx,keras-h5,...]

``--bytes``: byte-level corruption (truncation, bit flips, zeroed and overwritten spans) of every
format, ``--mutants`` per format, each case through ``nnvm run`` in a child process
(``nnvm_testing.frontend_onnx.byte_fuzz``, as ``tests/test_fuzz_bytes.py`` runs a few); prints a table
of the outcomes per format and every failure, and exits 1 if there was one.

Without ``--bytes``:

``tests/test_fuzz_inputs.py`` (and ``test_fuzz_keras.py``, ``test_fuzz_coreml.py``) run the same
generators in ``make test`` with a fixed seed and a small budget; this runs them round-robin, with
fresh random draws, until the time is up, and stops at the first failure (exit 1, the case saved under
``--keep``). A case is a failure when ``nnvm`` exits with anything but 0, or 1 with one line on stderr
(a traceback is exit 2). A hard crash (a signal) ends this script itself;
the case it died on stays in the work folder printed at the start.
Keras (``.keras``, ``.h5``) and CoreML (``.mlmodel``, ``.mlpackage``) cases go through ``nnvm compile
--target llvm``, as in ``tests/test_fuzz_keras.py`` and ``tests/test_fuzz_coreml.py``.
Module files (``.so``) are fuzzed by ``tests/test_fuzz_artifacts.py`` in a child process. GPU module
files (``gpu-artifacts``: the zip ``opencl``, ``cuda`` and ``metal`` export, as in
``tests/test_fuzz_gpu_artifacts.py``) run through ``nnvm run`` in a child process each, so a crash is
reported as a failure, not the end of this script.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

KINDS = ("onnx-bytes", "onnx-fields", "npy", "tuning-log", "keras-bytes", "keras-fields", "coreml-bytes",
         "coreml-package", "gpu-artifacts")


def _one(kind: str, rng: random.Random, models: dict, folder: str) -> list[str] | None:
    """Make one case of ``kind`` in ``folder`` and check it; returns None, or the argv that failed."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from nnvm_testing.frontend_onnx import fuzz

    failed: list = []

    @settings(max_examples=1, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def case(data):
        draw = data.draw
        x = ["--input", f"x={models['x_npy']}"]
        compile_ = ["--target", "llvm", "-o", os.path.join(folder, "m.so")]
        if kind.startswith("keras"):
            from nnvm_testing.frontend_keras import fuzz as kfuzz

            km = models["keras"]
            if kind == "keras-bytes":
                ext = data.draw(st.sampled_from(["keras", "h5"]))
                path = os.path.join(folder, f"case.{ext}")
                with open(path, "wb") as f:
                    f.write(fuzz.mutate_bytes(draw, km[f"{ext}_bytes"], km[f"other_{ext}_bytes"]))
            else:
                config, weights, members = kfuzz.mutate_config(draw, km["config"], km["weights"])
                layout = kfuzz.base_config()
                if members or data.draw(st.booleans()):
                    path = kfuzz.write_keras(os.path.join(folder, "case.keras"), config, weights, members,
                                             layout)
                else:
                    path = kfuzz.write_h5(os.path.join(folder, "case.h5"), config, weights, layout)
            argv = ["compile", path, *compile_]
        elif kind.startswith("coreml"):
            from nnvm_testing.frontend_coreml import fuzz as cfuzz

            cm = models["coreml"]
            if kind == "coreml-bytes":
                path = os.path.join(folder, "case.mlmodel")
                with open(path, "wb") as f:
                    f.write(fuzz.mutate_bytes(draw, cm["mlmodel_bytes"], cm["other_bytes"]))
            else:
                path = str(cfuzz.mutate_package(draw, cm, Path(folder) / "case.mlpackage"))
            argv = ["compile", path, *compile_]
        elif kind == "gpu-artifacts":
            target = draw(st.sampled_from(fuzz.GPU_TARGETS))
            good = open(models["gpu"][target], "rb").read()
            other = open(models["gpu"][draw(st.sampled_from(fuzz.GPU_TARGETS))], "rb").read()
            path = os.path.join(folder, f"case-{target}.so")
            with open(path, "wb") as f:
                f.write(fuzz.mutate_gpu_module(draw, good, other))
            argv = ["run", path, *x]
            reports, died, tail = fuzz.run_in_child([argv], timeout=300)
            if died is not None or fuzz.check_report(reports[0]) is not None:
                failed.append(argv + [f"# {tail if died is not None else fuzz.check_report(reports[0])}"])
                raise AssertionError(failed[0])
            return
        elif kind == "onnx-bytes":
            path = os.path.join(folder, "case.onnx")
            with open(path, "wb") as f:
                f.write(fuzz.mutate_bytes(draw, models["bytes"], models["other_bytes"]))
            argv = ["run", path, *x]
        elif kind == "onnx-fields":
            argv = ["run", fuzz.mutate_model(draw, models["proto"], folder), *x]
        elif kind == "npy":
            path = os.path.join(folder, "case.npy")
            with open(path, "wb") as f:
                f.write(fuzz.npy_bytes(draw))
            argv = ["run", models["path"], "--input", f"x={path}"]
        else:
            import nnvm
            from nnvm.autotune import log

            blob, _ = fuzz.tuning_log_bytes(draw)
            path = os.path.join(folder, "case.jsonl")
            with open(path, "wb") as f:
                f.write(blob)
            try:
                log.read(path)
            except nnvm.Error as exc:
                assert "\n" not in str(exc)
            return
        try:
            fuzz.check_cli(argv)
        except AssertionError:
            failed.append(argv)
            raise

    try:
        case()
    except Exception:  # the failing case, or a generator error: both are reported
        return failed[0] if failed else ["(generator)", kind]
    return None


def byte_campaign(formats: list[str], mutants: int, seed: int, keep: str) -> int:
    """``--bytes``: every format's mutants; a Markdown table of outcomes, then the failures."""
    from nnvm_testing.frontend_onnx.byte_fuzz import fuzz_format

    work = Path(tempfile.mkdtemp(prefix="nnvm-bytefuzz-"))
    print(f"byte-level corruption, {mutants} mutants per format, seed {seed}, in {work}", flush=True)
    print("| format | mutants | exit 0 | exit 1 | other (traceback, crash, hang) | failures | seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|", flush=True)
    failures = []
    for name in formats:
        start = time.monotonic()
        report = fuzz_format(name, work / name, mutants, seed)
        bad = len(report["failures"])
        cells = [name, report["mutants"], report["exit 0"], report["exit 1"], report["other"], bad,
                 f"{time.monotonic() - start:.0f}"]
        print("| " + " | ".join(map(str, cells)) + " |", flush=True)
        failures += report["failures"]
        if bad:
            shutil.copytree(work / name, Path(keep) / name, dirs_exist_ok=True)
        shutil.rmtree(work / name, ignore_errors=True)
    for case, problem in failures:
        print(f"\nFAILED {case}\n{problem}", file=sys.stderr)
    if failures:
        print(f"{len(failures)} failures; their files are kept in {keep}", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300, help="time budget (default 300)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the kind order (default: random)")
    ap.add_argument("--only", default=None, help=f"comma-separated subset of {', '.join(KINDS)} (with "
                    "--bytes: of the formats of byte_fuzz.FORMATS)")
    ap.add_argument("--keep", default="fuzz-failures", help="folder for a failing case's files")
    ap.add_argument("--bytes", action="store_true", help="byte-level corruption of every format")
    ap.add_argument("--mutants", type=int, default=200, help="with --bytes: mutants per format (default 200)")
    args = ap.parse_args()
    if args.bytes:
        from nnvm_testing.frontend_onnx.byte_fuzz import FORMATS

        formats = [f for f in (args.only or ",".join(FORMATS)).split(",") if f]
        unknown = set(formats) - set(FORMATS)
        if unknown:
            ap.error(f"unknown formats: {', '.join(sorted(unknown))} (known: {', '.join(FORMATS)})")
        return byte_campaign(formats, args.mutants, 1 if args.seed is None else args.seed, args.keep)
    kinds = [k for k in (args.only or ",".join(KINDS)).split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    from nnvm_testing.frontend_onnx.fuzz import base_models

    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="nnvm-fuzz-")
    models = base_models(work)
    if any(k.startswith("keras") for k in kinds):
        from nnvm_testing.frontend_keras.fuzz import base_models as keras_models

        models["keras"] = keras_models(tempfile.mkdtemp(dir=work))
    if any(k.startswith("coreml") for k in kinds):
        from nnvm_testing.frontend_coreml.fuzz import base_models as coreml_models

        models["coreml"] = coreml_models(tempfile.mkdtemp(dir=work))
    if "gpu-artifacts" in kinds:
        from nnvm_testing.frontend_onnx.fuzz import gpu_modules

        models["gpu"] = gpu_modules(tempfile.mkdtemp(dir=work), models)
    print(f"fuzzing {', '.join(kinds)} for {args.seconds:g} s in {work}", flush=True)
    end = time.monotonic() + args.seconds
    done = {k: 0 for k in kinds}
    while time.monotonic() < end:
        kind = rng.choice(kinds)
        folder = tempfile.mkdtemp(dir=work)
        failed = _one(kind, rng, models, folder)
        done[kind] += 1
        if failed is not None:
            os.makedirs(args.keep, exist_ok=True)
            kept = shutil.copytree(folder, os.path.join(args.keep, os.path.basename(folder)))
            print(f"FAILED ({kind}): nnvm {' '.join(failed)}\n  files kept in {kept}", file=sys.stderr)
            return 1
        shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    print("no failures: " + ", ".join(f"{k} {n}" for k, n in done.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Exported modules given to ``nnvm run``/``nnvm.load`` truncated, corrupted or tampered with (issue 20):
each is a result or one sentence, never a traceback and never a crash of the process.

``nnvm.load`` checks the file's footer (format, target, CRC-32, ``runtime/artifact.py``) before
``dlopen``, and the ``Module`` constructor checks every location of the execution plan; what gets past
both runs. Because a bad file that did reach ``dlopen`` or a kernel could kill the process rather than
raise, the cases run in one child process that reports each case's exit status, and a crash names the
case it died on.
"""

from __future__ import annotations

import os
import random

import pytest

import nnvm
from nnvm.runtime import artifact
from nnvm_testing.frontend_onnx.fuzz import base_models, check_report, run_in_child

SEED = 2024
CASES = 40

@pytest.fixture(scope="module")
def artifact_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz-artifacts")
    models = base_models(str(folder))
    mod = nnvm.compile(models["path"], target="llvm")
    good = folder / "good.so"
    mod.export(str(good))
    return mod, good, models["x_npy"], folder


def _byte_cases(good, folder, rng: random.Random) -> list[tuple[str, str]]:
    """(description, path) of damaged copies of ``good``."""
    data = good.read_bytes()
    n = len(data)
    cases = []

    def write(desc: str, blob: bytes):
        path = folder / f"case{len(cases)}.so"
        path.write_bytes(blob)
        cases.append((desc, str(path)))

    write("empty", b"")
    write("footer only", data[-64:])
    write("ELF header only", data[:64])
    write("no footer", data[:-64])
    for _ in range(CASES):
        kind = rng.choice(["truncate", "flip", "footer", "append", "splice"])
        if kind == "truncate":
            cut = rng.randrange(1, n)
            write(f"truncated at {cut}", data[:cut])
        elif kind == "flip":
            pos = rng.randrange(0, n - 64)
            write(f"byte {pos} flipped", data[:pos] + bytes([data[pos] ^ 0x5A]) + data[pos + 1:])
        elif kind == "footer":
            pos = n - 64 + rng.randrange(0, 64)
            write(f"footer byte {pos} changed", data[:pos] + bytes([rng.randrange(256)]) + data[pos + 1:])
        elif kind == "append":
            write("junk appended", data + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 100))))
        else:
            cut = rng.randrange(1, n)
            write(f"spliced at {cut}", data[:cut] + data[rng.randrange(0, n):])
    return cases


def _plan_cases(mod, folder) -> list[tuple[str, str]]:
    """Modules whose execution plan was tampered with, then exported and sealed like a real one: the
    footer's checksum is right, so only the plan check stands between them and a kernel."""
    import copy

    cases = []
    plan = mod.plan
    arena = plan["arena_bytes"]
    tampers = {
        "kernel argument past the arena": lambda p: p["calls"][0]["args"][-1].update(arena=arena + 4096),
        "negative offset": lambda p: p["calls"][-1]["args"][0].update(arena=-64),
        "output larger than its location": lambda p: p["outputs"][0].update(shape=[1, 1 << 20]),
        "arena shrunk": lambda p: p.update(arena_bytes=64),
        "missing weight": lambda p: p["calls"][0]["args"].__setitem__(1, {"param": "nope"}),
        "no calls key": lambda p: p.pop("calls"),
        "shape of text": lambda p: p["inputs"][0].update(shape="abc"),
    }
    for desc, tamper in tampers.items():
        bad = copy.deepcopy(plan)
        tamper(bad)
        saved = mod.plan
        mod.plan = bad
        path = folder / f"plan{len(cases)}.so"
        try:
            mod.export(str(path))
        except (nnvm.Error, KeyError, TypeError, ValueError):
            continue  # the export cannot even write it (the C entry point embeds the plan)
        finally:
            mod.plan = saved
        cases.append((desc, str(path)))
    assert len(cases) >= 4, cases
    return cases


def _run_cases(cases, x_npy) -> list[dict]:
    reports, died, tail = run_in_child([["run", path, "--input", f"x={x_npy}"] for _, path in cases])
    if died is not None:
        pytest.fail(f"the process died on case {died} ({cases[died][0] if died >= 0 else '?'}): {tail}")
    return reports


def _check(cases, reports):
    assert len(reports) == len(cases)
    for (desc, _), r in zip(cases, reports):
        problem = check_report(r)
        assert problem is None, f"{desc}: {problem}"


def test_damaged_module_files(artifact_files):
    _, good, x_npy, folder = artifact_files
    cases = [("intact", str(good))] + _byte_cases(good, folder, random.Random(SEED))
    reports = _run_cases(cases, x_npy)
    _check(cases, reports)
    assert reports[0]["rc"] == 0  # the intact file runs
    # Everything but appended junk changes the checksummed bytes or the footer: all refused.
    refused = [desc for (desc, _), r in zip(cases, reports) if r["rc"] == 1]
    assert len(refused) >= len(cases) - 1 - sum(desc == "junk appended" for desc, _ in cases)


def test_tampered_plans_are_refused(artifact_files):
    mod, _, x_npy, folder = artifact_files
    cases = _plan_cases(mod, folder)
    reports = _run_cases(cases, x_npy)
    _check(cases, reports)
    for (desc, _), r in zip(cases, reports):
        assert r["rc"] == 1 and ("execution plan" in r["stderr"] or "corrupt" in r["stderr"]), (desc, r)


def test_footer_is_what_the_loader_checks(artifact_files):
    """A sanity check of the fixture: the exported file carries the footer the cases damage."""
    _, good, _, _ = artifact_files
    assert artifact.check(str(good))["target"] == "llvm"
    assert os.path.getsize(good) > 64

"""Tint, the browsers' WGSL compiler, over WGSL modules: Dawn for Node (npm ``webgpu``, on Dawn's null
backend, no GPU needed; ``make install`` puts it in the cache) runs ``tint_check.mjs`` beside this module.
Tint checks more than naga, wgpu's compiler (uniformity around barriers, constant expressions that
overflow), so a module naga accepts may still be refused in a browser.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from nnvm.environment import cache_dir

SCRIPT = Path(__file__).with_name("tint_check.mjs")
# Dawn for Node aborts now and then ("std::system_error", a robust mutex's owner died), or hangs, once a
# process has compiled a few hundred kB of WGSL, before it prints; one module alone never did here. A few
# small modules a process (or one large one), and a batch that dies or hangs run again, keep it reliable
# and fast (a process takes about 0.1 s; 3 x 28 processes over every module gave no failure here).
BATCH_BYTES, BATCH_FILES, TRIES, TIMEOUT = 60_000, 6, 4, 30


def dawn_or_skip() -> Path:
    """Dawn for Node's ``index.js``; a test skips without it, but under ``CI=true``, where it fails."""
    import pytest

    dawn = cache_dir() / "tools" / "dawn" / "node_modules" / "webgpu" / "index.js"
    if not dawn.exists() or shutil.which("node") is None:
        why = f"Dawn for Node is not installed ({dawn}, and node): run make install"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return dawn


def tint_errors(sources: dict, folder) -> dict:
    """{name: Tint's error messages} for the WGSL modules ``sources`` ({name: text}), written to ``folder``;
    an empty list where Tint accepts the module."""
    dawn = dawn_or_skip()
    files = {name: Path(folder) / f"{name}.wgsl" for name in sources}
    for name, text in sources.items():
        files[name].write_text(text)
    batches: list = [[]]
    for name, path in files.items():
        batch = batches[-1]
        if batch and (len(batch) == BATCH_FILES or sum(len(sources[n]) for n, _ in batch) + len(
                sources[name]) > BATCH_BYTES):
            batches.append(batch := [])
        batch.append((name, str(path)))
    found: dict = {}
    for batch in batches:
        batch = [path for _, path in batch]
        for _ in range(TRIES):
            try:
                proc = subprocess.run(["node", str(SCRIPT), str(dawn), *batch], capture_output=True,
                                      text=True, timeout=TIMEOUT)
            except subprocess.TimeoutExpired:  # it hangs where it would abort, now and then
                failure = f"no answer in {TIMEOUT} s"
                continue
            if proc.returncode == 0:
                break
            failure = proc.stderr[-2000:]
        else:
            raise AssertionError(f"Tint's run over {batch} failed {TRIES} times: {failure}")
        found.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {name: found[str(path)] for name, path in files.items()}


def refusals(sources: dict, folder) -> list:
    """One line per module Tint refuses: its name, the kernels (entry points) its errors fall in, the
    errors; empty where Tint accepts them all."""
    lines = []
    for name, errors in tint_errors(sources, folder).items():
        if errors:
            text = sources[name].splitlines()
            kernels = sorted({_kernel_at(text, e) for e in errors})
            lines.append(f"{name}: kernel(s) {', '.join(kernels)}: {'; '.join(errors[:5])}")
    return lines


def _kernel_at(lines: list, error: str) -> str:
    """The function of the WGSL line an error of ``tint_check.mjs`` (``"LINE: message"``) points at."""
    try:
        number = int(error.split(":", 1)[0])
    except ValueError:
        return "?"
    for line in reversed(lines[:number]):
        if line.startswith("fn "):
            return line[3:].split("(", 1)[0]
    return "(module scope)"

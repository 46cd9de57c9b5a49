"""GPU module files (``opencl``, ``cuda``, ``metal``, ``webgpu``: one zip each, ``nnvm.gpu.library``) given to
``nnvm run`` truncated, corrupted, spliced, or with the manifest's launch tables, the execution plan or a
member changed and re-zipped with valid CRCs (issue 20): each is a result or one sentence, never a
traceback and never a crash. Here the kernels run on PoCL or the CPU fiber runner, where a launch table
that lies would write out of bounds, so the cases run in one child process that names the case it died on.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from nnvm_testing.frontend_onnx.fuzz import (
    GPU_TARGETS,
    base_models,
    check_report,
    gpu_modules,
    mutate_gpu_module,
    run_in_child,
)

SEED = 2026
CASES = 40  # per target; the whole test stays well under a minute on one core


@pytest.fixture(scope="module")
def gpu_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz-gpu")
    models = base_models(str(folder))
    return gpu_modules(str(folder), models), models["x_npy"], folder


def _cases(target: str, modules: dict, folder) -> list[str]:
    good = open(modules[target], "rb").read()
    other = open(modules[GPU_TARGETS[(GPU_TARGETS.index(target) + 1) % len(GPU_TARGETS)]], "rb").read()
    paths: list[str] = []

    @seed(SEED)
    @settings(max_examples=CASES, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def make(data):
        path = folder / f"{target}-{len(paths)}.so"
        path.write_bytes(mutate_gpu_module(data.draw, good, other))
        paths.append(str(path))

    make()
    return paths


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_damaged_gpu_module_files(gpu_files, target):
    modules, x_npy, folder = gpu_files
    paths = [modules[target]] + _cases(target, modules, folder)
    reports, died, tail = run_in_child([["run", p, "--input", f"x={x_npy}"] for p in paths])
    assert died is None, f"the process died on {paths[died] if died >= 0 else '?'}: {tail}"
    assert len(reports) == len(paths)
    assert reports[0]["rc"] == 0, reports[0]  # the intact file runs
    problems = [(p, check_report(r)) for p, r in zip(paths, reports) if check_report(r)]
    assert not problems, problems
    assert sum(r["rc"] == 1 for r in reports) >= len(paths) // 3  # most damage is refused, not ignored


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_launch_sizes_changed_after_export_are_refused(gpu_files, target):
    """A grid or block larger than the kernel was written for ran past its buffers (a segfault on PoCL
    and the fiber runner) before the export carried a content digest."""
    import io
    import json
    import zipfile

    modules, x_npy, folder = gpu_files
    with zipfile.ZipFile(modules[target]) as z:
        members = {name: z.read(name) for name in z.namelist()}
    manifest = json.loads(members["manifest.json"])
    manifest["functions"][0]["launches"][0]["grid"] = [64, 1, 1]
    members["manifest.json"] = json.dumps(manifest)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    path = folder / f"grid-{target}.so"
    path.write_bytes(out.getvalue())
    reports, died, tail = run_in_child([["run", str(path), "--input", f"x={x_npy}"]])
    assert died is None, tail
    assert reports[0]["rc"] == 1 and "checksum" in reports[0]["stderr"], reports[0]
    assert check_report(reports[0]) is None

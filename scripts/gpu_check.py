"""The GPU check: nnvm's CUDA backend natively on an NVIDIA GPU, in one bounded run (``make gpu-check``).

    bash scripts/gpu_check.sh [--out DIR] [--budget S] [--tune-seconds S]   # on the GPU machine
    bash scripts/gpu_check.sh --rehearse --torch-python PY                   # here, on the CPU runner

``gpu_check.sh`` installs nnvm from the tree and runs this file under the device image's python3. Steps,
each timed, each a pass/fail/unavailable row of the report:

1. ``environment``: the GPU (``nvidia-smi``), the driver as the CUDA backend opens it, NVRTC, packages;
   natively, no GPU is a failure (the point is not to fall back to the CPU runner);
2. ``conformance``: ``nnvm conformance --targets cuda -arch=<the GPU's>``: every standard operator and the
   suite's models; natively, a CPU-runner line on its stderr is a failure;
3. ``models``: ResNet-18, MobileNetV2, ShuffleNet (grouped 1x1), a transformer encoder and a depthwise
   net compiled for ``cuda -arch=sm_90`` against onnxruntime on the CPU;
4. ``bench``: ``bench/cuda_vs_torch.py``: nnvm against PyTorch eager (cuDNN) and ``torch.compile`` on the
   same weights, batch 1 and 32;
5. ``opencl``: the OpenCL backend on NVIDIA's OpenCL, where the image has it (else ``unavailable``);
6. ``tune`` (``--tune-seconds``): ``nnvm tune --target cuda`` on the GPU's conv and dense kernels, the log
   written for shipping.

``--out`` (default ``$OUT``) receives ``gpu_check.json`` and ``gpu_check.md``. ``--rehearse`` runs the same
steps with the CUDA backend's CPU runner at sizes a CPU finishes (what ``make test`` checks). Exit 1 when
a step failed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("numpy", "onnx", "onnxruntime", "pluggy", "llvmlite", "h5py", "cuda-bindings",
            "cuda-pathfinder", "nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime",
            "torch", "onnxscript", "pyopencl", "scikit-learn", "hypothesis", "nnvm", "nnvm-backend-cuda")
# The CPU runner says this once per process (nnvm_backend_cuda.library.CPU_NOTE's start).
CPU_RUNNER_NOTE = "no NVIDIA GPU here"
MODEL_ARCH = "sm_90"  # the models step compiles for Hopper, as the issue asks, whatever the GPU


class Unavailable(Exception):
    """What a step needs is not on this machine (reported, not a failure: NVIDIA's OpenCL, say)."""


class Check:
    """The run's state: options, the deadline, and the report the steps fill."""

    def __init__(self, args):
        self.args = args
        self.rehearse = args.rehearse
        self.start = time.monotonic()
        self.deadline = self.start + args.budget
        self.report = {"mode": "rehearse" if self.rehearse else "native", "steps": {},
                       "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        self.arch = MODEL_ARCH
        # a child that crashes (SIGSEGV in a driver) leaves its Python stack on stderr
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, cmd: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        """One child process, limited as ``run_all``'s (killed at its limit: exit -9, said on stderr)."""
        return self.run_all([cmd], timeout)[0]

    def run_all(self, cmds: list[list[str]], timeout: float | None = None) -> list:
        """Child processes side by side (the GPU machine has 16 cores), each limited to ``timeout`` or the
        time left; one still running then is killed and reported with exit -9 (a hung driver must not eat
        the lease, nor hide the others' results)."""
        limit = max(10.0, self.left() if timeout is None else min(timeout, self.left()))
        logs = [tempfile.TemporaryFile("w+") for _ in cmds]
        errs = [tempfile.TemporaryFile("w+") for _ in cmds]
        for cmd in cmds:
            print(f"  $ {' '.join(cmd)}  (limit {limit:.0f} s)", flush=True)
        procs = [subprocess.Popen(cmd, stdout=o, stderr=e, text=True, env=self.env, cwd=ROOT)
                 for cmd, o, e in zip(cmds, logs, errs)]
        end = time.monotonic() + limit
        done = []
        for cmd, proc, o, e in zip(cmds, procs, logs, errs):
            try:
                proc.wait(timeout=max(1.0, end - time.monotonic()))
                late = ""
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                late = f"\ntimed out after {limit:.0f} s and killed"
            o.seek(0)
            e.seek(0)
            done.append(subprocess.CompletedProcess(cmd, proc.returncode, o.read(), e.read() + late))
        return done


def _versions() -> dict:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def _nvidia_smi() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    proc = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                           "--format=csv,noheader"], capture_output=True, text=True)
    return proc.stdout.strip() or proc.stderr.strip()


# -- steps ------------------------------------------------------------------------------------------
def step_environment(check: Check) -> dict:
    from nnvm_backend_cuda import compiler, native

    dev = native.open_device()
    out = {"python": platform.python_version(), "machine": platform.machine(), "packages": _versions(),
           "nvidia_smi": _nvidia_smi(), "nvrtc": ".".join(map(str, compiler.nvrtc_version())),
           "cpus": os.cpu_count(), "device_arch": dev.arch if dev is not None else None}
    if dev is not None and dev.arch in compiler.ARCHS:
        check.arch = dev.arch
    if dev is None and not check.rehearse:
        raise RuntimeError("the CUDA driver found no GPU (cuInit failed or no device): a native check "
                           "needs one; the rehearsal (--rehearse) is the CPU runner's")
    if dev is not None and check.rehearse:
        raise RuntimeError("a GPU is here: run the native check, not the rehearsal")
    return out


def _conformance(check: Check, target: str, ops: list[str] | None, models: str | None,
                 jobs: int = 1) -> dict:
    """``nnvm conformance --targets target --json`` over ``ops`` (None: every operator) and ``models``
    ("": none, None: the suite's), split over ``jobs`` processes running side by side."""
    if ops is None:
        from nnvm_conformance.cases import all_cases

        ops = sorted(all_cases())
    chunks = [ops[i::jobs] for i in range(jobs)]
    base = [sys.executable, "-m", "nnvm.cli", "conformance", "--targets", target, "--json", "--quiet"]
    cmds = [[*base, "--ops", ",".join(chunk), "--no-models"] for chunk in chunks if chunk]
    if models != "":
        cmds.append([*base, "--ops", ops[0], *(["--models", models] if models else [])])
    procs = check.run_all(cmds)
    rows, codes = [], []
    for cmd, proc in zip(cmds, procs):
        if not check.rehearse and CPU_RUNNER_NOTE in proc.stderr:
            raise RuntimeError(f"{target} fell back to the CPU runner: {proc.stderr.strip()[-500:]}")
        if proc.returncode < 0 and "--no-models" in cmd:  # a crash: which operators, one process each
            rows += _crashed(check, base, cmd[cmd.index("--ops") + 1].split(","), proc)
            codes.append(proc.returncode)
            continue
        try:
            rows += json.loads(proc.stdout)["results"]
        except json.JSONDecodeError:
            raise RuntimeError(f"nnvm conformance exit {proc.returncode}: "
                               f"{(proc.stdout + proc.stderr)[-2000:]}") from None
        codes.append(proc.returncode)
    rows = list({(r["name"], r["kind"]): r for r in rows}.values())  # ops[0] ran twice
    failures = [f"{r['name']} ({r['status']}: {r['message'][:200]})" for r in rows if r["status"] != "pass"]
    summary = {"cases": len(rows), "passed": len(rows) - len(failures), "failed": len(failures),
               "failures": failures, "exits": codes,
               "slowest": sorted(((round(r["seconds"], 2), r["name"]) for r in rows), reverse=True)[:5],
               "models": {r["name"]: r["max_error"] for r in rows if r["kind"] == "model"}}
    if any(codes) or failures:
        raise StepFailed(summary, f"nnvm conformance --targets {target}: exits {codes}, "
                                  f"{len(failures)} not passing: {'; '.join(failures[:15])}")
    return summary


def _crashed(check: Check, base: list, ops: list[str], crash) -> list[dict]:
    """The rows of ``ops`` after their process crashed (a driver's SIGSEGV): each operator again in a
    process of its own, the ones that crash alone reported as ``crash`` with the fault handler's stack."""
    rows = []
    cmds = [[*base, "--ops", op, "--no-models"] for op in ops]
    for op, proc in zip(ops, check.run_all(cmds, timeout=120)):
        if proc.returncode >= 0:
            try:
                rows += json.loads(proc.stdout)["results"]
                continue
            except json.JSONDecodeError:
                pass
        rows.append({"name": op, "kind": "op", "status": "crash", "max_error": None, "seconds": 0.0,
                     "message": f"exit {proc.returncode}: {(proc.stderr or crash.stderr)[-1200:]}"})
    return rows


class StepFailed(Exception):
    """A step ran and found something wrong; ``result`` is its report row all the same."""

    def __init__(self, result: dict, message: str):
        super().__init__(message)
        self.result = result


def step_conformance(check: Check) -> dict:
    if check.rehearse:  # the CPU runner: a few operators and no models (the suite runs them all elsewhere)
        return _conformance(check, f"cuda -arch={check.arch}", ["relu", "conv2d", "dense", "softmax"], "", 2)
    return _conformance(check, f"cuda -arch={check.arch}", None, None, jobs=12)


def _rel_err(got, want) -> float:
    import numpy as np

    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def _logits(model):
    """The model without a final Softmax: over random weights a softmax is nearly one-hot, and a
    comparison of it says little; the logits carry the signal."""
    last = model.graph.node[-1]
    if last.op_type == "Softmax":
        out = model.graph.output[0]
        del model.graph.node[-1]
        out.name = last.input[0]
        out.type.tensor_type.ClearField("shape")
    return model


def step_models(check: Check) -> dict:
    names = ["transformer_encoder", "depthwise_net"] if check.rehearse else \
        ["resnet18", "mobilenet_v2", "shufflenet", "transformer_encoder", "depthwise_net", "resnet18_qdq"]
    work = Path(tempfile.mkdtemp(prefix="nnvm-gpu-models-"))
    out, bad = {}, []
    for name in names:  # each on its own: one model's failure does not hide the others' results
        try:
            out[name] = _one_model(name, work)
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:1500]}"}
            bad.append(f"{name} ({out[name]['error'][:300]})")
            continue
        print(f"  {name}: max relative error {out[name]['max_rel_err']:.2e} against onnxruntime, compile "
              f"{out[name]['compile_s']:.1f} s", flush=True)
        if "max_err_steps" in out[name]:  # int8: within one output quantization step of onnxruntime's int8
            if not (out[name]["max_err_steps"] <= 1 + 1e-6 and out[name]["same_top1"]):
                bad.append(f"{name} ({out[name]['max_err_steps']:.2f} steps)")
        elif not out[name]["max_rel_err"] < 1e-4:
            bad.append(f"{name} ({out[name]['max_rel_err']:.1e})")
    if bad:
        raise StepFailed(out, f"against onnxruntime: {'; '.join(bad)}")
    return out


def _one_model(name: str, work: Path) -> dict:
    """One model compiled for ``cuda -arch=sm_90`` and run, against onnxruntime on the CPU (``<name>_qdq``:
    the model quantized by onnxruntime, QDQ, against onnxruntime's int8 execution of it)."""
    if name.endswith("_qdq"):
        return _one_quantized_model(name.removesuffix("_qdq"))
    import numpy as np
    import onnx
    import onnxruntime as ort

    import nnvm
    from nnvm_testing.frontend_onnx import models as zoo
    from nnvm_testing.frontend_onnx.shape_models import SHAPE_MODELS

    if name in SHAPE_MODELS:
        path = str(work / f"{name}.onnx")
        onnx.save(SHAPE_MODELS[name](seed=0), path)
    elif name in zoo.BUILDERS:
        path = zoo.cached_model_path(name)
    else:  # a light model of the ONNX zoo (ShuffleNet's grouped 1x1s), random weights, its logits
        path = str(work / f"{name}.onnx")
        onnx.save(_logits(zoo.light_model(name)), path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(1).standard_normal(inp.shape).astype("float32")
    want = sess.run(None, {inp.name: x})[0]
    t = time.perf_counter()
    mod = nnvm.compile(path, target=f"cuda -arch={MODEL_ARCH}")
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    got = mod.run(x)[0]
    first_run_s = time.perf_counter() - t
    stats = mod.stats()
    return {"max_rel_err": _rel_err(got, want), "output_std": float(np.std(want)),
            "compile_s": round(compile_s, 2), "first_run_s": round(first_run_s, 3),
            "kernels": len(stats.get("cuda_kernels", {})), "spills": stats.get("cuda_spills", [])}


def _one_quantized_model(name: str) -> dict:
    import numpy as np

    import nnvm
    from nnvm_testing.frontend_onnx import quantized

    path = quantized.quantized_model_path(name, "qdq")
    feeds = quantized.calibration_inputs(path, count=1, seed=1)[0]
    (want,) = quantized.onnxruntime_int8(path, feeds)
    t = time.perf_counter()
    mod = nnvm.compile(path, target=f"cuda -arch={MODEL_ARCH}")
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    got = mod.run(**feeds)[0]
    first_run_s = time.perf_counter() - t
    return {"max_rel_err": _rel_err(got, want), "max_err_steps": float(np.abs(got - want).max())
            / quantized.output_step(path), "same_top1": bool(got.argmax() == want.argmax()),
            "compile_s": round(compile_s, 2), "first_run_s": round(first_run_s, 3),
            "dp4a": "dp4a" in mod.library.compiled.ptx.decode()}


def step_bench(check: Check) -> dict:
    torch_python = check.args.torch_python
    if not torch_python:
        raise Unavailable("no --torch-python: no PyTorch to compare with")
    json_path = Path(tempfile.mkdtemp(prefix="nnvm-gpu-bench-")) / "bench.json"
    # PyTorch's side gets two thirds of the time left; nnvm's compiles and runs what it measured by then
    cmd = [sys.executable, str(ROOT / "bench" / "cuda_vs_torch.py"), "--torch-python", torch_python,
           "--json", str(json_path), "--torch-timeout", f"{check.left() * 2 / 3:.0f}"]
    if check.rehearse:
        cmd += ["--models", "mobilenet_v2", "--batches", "1", "--repeat", "1", "--warmup", "0",
                "--no-compile", "--allow-cpu"]
    else:
        cmd += ["--models", "resnet18,mobilenet_v2", "--batches", "1,32", "--repeat", "30"]
    proc = check.run(cmd)
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0 and json_path.exists():  # rows measured, something short: keep them
        raise StepFailed(json.loads(json_path.read_text()), f"bench/cuda_vs_torch.py exit {proc.returncode}: "
                                                             f"{proc.stderr[-2000:]}")
    if proc.returncode != 0:
        raise RuntimeError(f"bench/cuda_vs_torch.py exit {proc.returncode}: "
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    return json.loads(json_path.read_text())


def _nvidia_opencl() -> str | None:
    """The NVIDIA OpenCL driver library, if the machine has one."""
    for d in ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"):
        for name in ("libnvidia-opencl.so.1", "libnvidia-opencl.so"):
            if os.path.exists(os.path.join(d, name)):
                return os.path.join(d, name)
    return None


def step_opencl(check: Check) -> dict:
    if check.rehearse:  # PoCL's CPU device stands in for NVIDIA's, to prove the step itself
        return _conformance(check, "opencl -device=cpu", ["relu", "conv2d", "softmax"], "")
    lib = _nvidia_opencl()
    if lib is None:
        raise Unavailable("no libnvidia-opencl.so on this machine: the image has no NVIDIA OpenCL driver")
    vendors = Path(tempfile.mkdtemp(prefix="nnvm-ocl-vendors-"))
    (vendors / "nvidia.icd").write_text(lib + "\n")
    check.env["OCL_ICD_VENDORS"] = str(vendors)  # the ICD loader looks here instead of /etc/OpenCL
    probe = check.run([sys.executable, "-c", OPENCL_PROBE], timeout=60)
    said = (probe.stdout + probe.stderr)[-3000:]
    if probe.returncode != 0:
        raise StepFailed({"icd": lib, "probe_exit": probe.returncode, "probe": said},
                         f"listing NVIDIA's OpenCL devices ({lib}) failed, exit {probe.returncode}: {said}")
    result = _conformance(check, "opencl -device=gpu", None, "resnet18,mobilenet_v2", jobs=8)
    result.update(icd=lib, devices=probe.stdout.strip())
    return result


# The platforms and devices the ICD loader finds, one line each, before nnvm touches them.
OPENCL_PROBE = """
import pyopencl as cl
for p in cl.get_platforms():
    print(p.name, p.version, [(d.name, cl.device_type.to_string(d.type), d.version) for d in p.get_devices()])
"""


def step_tune(check: Check) -> dict:
    if check.args.tune_seconds <= 0:
        raise Unavailable("not asked (--tune-seconds 0)")
    seconds = min(check.args.tune_seconds, check.left() - 15)
    if seconds <= 30:
        raise Unavailable(f"{check.left():.0f} s left: too little to tune")
    import onnx

    from nnvm_testing.frontend_onnx import models as zoo
    from nnvm_testing.frontend_onnx.shape_models import SHAPE_MODELS

    log = Path(check.args.out) / f"cuda_{check.arch}.jsonl"
    if check.rehearse:  # the CPU runner measures slowly: one small net
        path = str(Path(tempfile.mkdtemp(prefix="nnvm-gpu-tune-")) / "depthwise_net.onnx")
        onnx.save(SHAPE_MODELS["depthwise_net"](seed=0), path)
        paths = {"depthwise_net": path}
    else:
        paths = {name: zoo.cached_model_path(name) for name in ("resnet18", "mobilenet_v2")}
    out = {}
    for name, path in paths.items():
        budget = min(seconds / len(paths), check.left() - 15)
        if budget <= 20:
            break
        cmd = [sys.executable, "-m", "nnvm.cli", "tune", path, "--target", f"cuda -arch={check.arch}",
               "--trials", str(check.args.tune_trials), "--log", str(log), "--quiet", "--json"]
        proc = check.run(cmd, timeout=budget)  # stopped at its limit, the log keeps what was measured
        out[name] = {"exit": proc.returncode, "tail": (proc.stdout + proc.stderr)[-1500:]}
    out["log"] = str(log)
    out["records"] = sum(1 for _ in open(log)) if log.exists() else 0
    if out["records"] == 0:
        raise StepFailed(out, "tuning measured nothing")
    return out


STEPS = (("environment", step_environment), ("conformance", step_conformance), ("models", step_models),
         ("bench", step_bench), ("opencl", step_opencl), ("tune", step_tune))


# -- report -----------------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    lines = [f"# nnvm GPU check ({report['mode']}, {report['started']})", "",
             "| step | status | seconds | summary |", "| --- | --- | ---: | --- |"]
    for name, row in report["steps"].items():
        lines.append(f"| {name} | {row['status']} | {row['seconds']:.1f} | {_summary(name, row)} |")
    bench = report["steps"].get("bench", {}).get("result")
    if bench and bench.get("rows"):
        lines += ["", "| model | batch | nnvm ms | torch eager ms | torch eager TF32 ms | torch.compile ms | "
                  "eager / nnvm | compile / nnvm | max rel err vs torch |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in bench["rows"]:
            def f(v, spec=".3f"):
                return "-" if v is None else format(v, spec)
            cells = [r["model"], r["batch"], f(r["nnvm_ms"]), f(r.get("eager_ms")), f(r.get("eager_tf32_ms")),
                     f(r.get("compile_ms")), f(r.get("eager_speedup"), ".2f"),
                     f(r.get("compile_speedup"), ".2f"), f(r.get("max_rel_err"), ".1e")]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


def _summary(name: str, row: dict) -> str:
    if row["status"] != "pass":
        return row.get("error", "").splitlines()[0][:200] if row.get("error") else ""
    r = row.get("result") or {}
    if name == "environment":
        gpu = r.get("nvidia_smi") or "no nvidia-smi"
        return f"{gpu}; arch {r.get('device_arch')}; NVRTC {r.get('nvrtc')}"
    if "cases" in r:
        return f"{r['passed']} of {r['cases']} cases pass"
    if name == "models":
        return "; ".join(f"{k} {v['max_rel_err']:.1e}" if "max_rel_err" in v else f"{k} error"
                         for k, v in r.items())
    if name == "tune":
        return f"{r.get('records', 0)} measurements in {Path(r.get('log', '')).name}"
    return ""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu-check-out", help="report folder ($OUT)")
    p.add_argument("--budget", type=float, default=480, help="seconds for the whole check (default 480)")
    p.add_argument("--rehearse", action="store_true", help="no GPU: the CPU runner, small sizes")
    p.add_argument("--torch-python", help="an interpreter with PyTorch (default on a GPU: this one)")
    p.add_argument("--tune-seconds", type=float, help="seconds of tuning at the end, within the budget "
                   "(default 0; the rehearsal's 60)")
    p.add_argument("--tune-trials", type=int, help="configs per kernel (default 16; the rehearsal's 2)")
    p.add_argument("--only", help="comma-separated steps to run (environment always runs)")
    args = p.parse_args(argv)
    if args.torch_python is None and not args.rehearse:
        args.torch_python = sys.executable
    if args.tune_seconds is None:
        args.tune_seconds = 60 if args.rehearse else 0
    if args.tune_trials is None:
        args.tune_trials = 2 if args.rehearse else 16
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    check = Check(args)
    wanted = set(args.only.split(",")) | {"environment"} if args.only else None
    failed = False
    for name, fn in STEPS:
        if wanted is not None and name not in wanted:
            continue
        print(f"gpu-check: {name} ({check.left():.0f} s left)", flush=True)
        t = time.monotonic()
        row: dict = {}
        try:
            row = {"status": "pass", "result": fn(check)}
        except Unavailable as exc:
            row = {"status": "unavailable", "error": str(exc)}
        except StepFailed as exc:
            row = {"status": "fail", "error": str(exc), "result": exc.result}
        except Exception as exc:  # a step's crash is its failure; the others still run
            row = {"status": "fail", "error": f"{type(exc).__name__}: {exc}",
                   "traceback": traceback.format_exc()[-4000:]}
        row["seconds"] = round(time.monotonic() - t, 2)
        check.report["steps"][name] = row
        failed |= row["status"] == "fail"
        print(f"gpu-check: {name}: {row['status']} in {row['seconds']:.1f} s"
              + (f": {row['error'][:1500]}" if row.get("error") else ""), flush=True)
        (out / "gpu_check.json").write_text(json.dumps(check.report, indent=1, default=str))
        if name == "environment" and row["status"] == "fail":
            break
    check.report["seconds"] = round(time.monotonic() - check.start, 1)
    (out / "gpu_check.json").write_text(json.dumps(check.report, indent=1, default=str))
    (out / "gpu_check.md").write_text(markdown(check.report))
    spent = ", ".join(f"{k} {v['seconds']:.0f} s" for k, v in check.report["steps"].items())
    print(f"\ngpu-check: where the time went: {spent}; total {check.report['seconds']:.0f} s")
    print(markdown(check.report))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

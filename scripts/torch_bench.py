"""PyTorch's side of ``bench/cuda_vs_torch.py``: export each model, keep its reference output, time it.

Runs under an interpreter with torch (on the GPU machine, the image's python3; here, the torch venv of
``nnvm_testing.frontend_onnx.torch_models``); the nnvm side never imports torch. For each model and batch:
the seeded network of ``scripts/torch_zoo.py`` is exported to ONNX (what nnvm then compiles: the same
weights), run on a seeded input whose output is saved as the reference, and timed

- ``eager``: float32 with cuDNN's TF32 off, so both sides compute in float32;
- ``eager_tf32``: PyTorch's default on this GPU (cuDNN convolutions in TF32), for reference;
- ``compile``: ``torch.compile`` (inductor, default mode) in float32; its first call is timed apart.

Eager runs come first for every model, then ``torch.compile``'s slow builds; ``torch.json`` is
rewritten after each, so a run cut short keeps what it measured. Each time is the median of ``--repeat``
runs after ``--warmup``, from the host array in to the host array out (the input copied to the device
and the output back, synchronised), as ``nnvm``'s ``mod.run`` does.

    python scripts/torch_bench.py resnet18,mobilenet_v2 1,32 OUTDIR [--repeat 30] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch_export
import torch_zoo


def median_ms(fn, repeat: int, warmup: int, sync) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def run(net, host: torch.Tensor, device):
    """One run as nnvm's ``mod.run``: the host input to the device, the output back to the host."""
    return lambda: net(host.to(device)).cpu()


def float32(strict: bool) -> None:
    """``strict``: float32 throughout (cuDNN's TF32 off); else PyTorch's default on Ampere and newer."""
    torch.backends.cudnn.allow_tf32 = not strict
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True


def save(out: Path, report: dict) -> None:
    """After every row, so a run stopped by its time limit still leaves what it measured."""
    tmp = out / "torch.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(out / "torch.json")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models")
    p.add_argument("batches")
    p.add_argument("out")
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to build on a CPU)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    report = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if cuda else "cpu",
              "models": {}}
    models = {}
    for name in args.models.split(","):  # first every model eager, then torch.compile's slow builds
        for batch in (int(b) for b in args.batches.split(",")):
            stem = out / f"{name}_b{batch}"
            t = time.perf_counter()
            torch_zoo.export(name, f"{stem}.onnx", batch)
            export_s = time.perf_counter() - t
            torch_export.MODELS.setdefault(name, torch_zoo.MODELS[name])
            model = torch_export.build(name).to(device)  # seeded: the weights just exported
            x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype("float32")
            np.save(f"{stem}.input.npy", x)
            row = {"onnx": f"{stem}.onnx", "input": f"{stem}.input.npy", "output": f"{stem}.output.npy",
                   "export_s": round(export_s, 2)}
            fn = run(model, torch.from_numpy(x), device)
            with torch.no_grad():
                float32(True)
                np.save(row["output"], fn().numpy())
                row["eager_ms"] = median_ms(fn, args.repeat, args.warmup, sync)
                if cuda:
                    float32(False)
                    row["eager_tf32_ms"] = median_ms(fn, args.repeat, args.warmup, sync)
                    float32(True)
            models[(name, batch)] = (model, x)
            report["models"].setdefault(name, {})[str(batch)] = row
            save(out, report)
            print(f"torch {name} b{batch}: eager {row['eager_ms']:.3f} ms", flush=True)
    for (name, batch), (model, x) in ([] if args.no_compile else models.items()):
        row = report["models"][name][str(batch)]
        fn = run(torch.compile(model), torch.from_numpy(x), device)
        with torch.no_grad():
            float32(True)
            t = time.perf_counter()
            fn()
            row["compile_s"] = round(time.perf_counter() - t, 1)
            row["compile_ms"] = median_ms(fn, args.repeat, args.warmup, sync)
        save(out, report)
        print(f"torch {name} b{batch}: compiled {row['compile_ms']:.3f} ms (built in {row['compile_s']} s)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One unbound module against one module per exact shape (issue 39: symbolic kernels at bound speed).

    uv run python bench/dynamic.py                                   # BERT-base and DistilBERT-base
    uv run python bench/dynamic.py --models bert --shapes 1x1,1x128 --threads 1 --cpu-time
    uv run python bench/dynamic.py --models resnet18,densenet121 --batches 1,8 --threads 1 --cpu-time
    uv run python bench/dynamic.py --target "opencl -device=cpu" --small --shapes 1x1,1x7,4x33

CNNs (``resnet18``, ``resnet50``, ``mobilenet_v2``, ``squeezenet``, ``densenet121``: the torchvision
architectures of ``nnvm_testing.frontend_onnx.models``, seeded random weights): compiled once with a
symbolic batch (``shapes={"data": ("batch", 3, 224, 224)}``) and once per batch of ``--batches`` from a
file exported at that batch; onnxruntime runs a copy declaring dim_param ``batch``. ``zoo:NAME`` (a CNN
of ``bench/zoo.py``'s zoo, ``torch_models.ZOO_CNNS``): exported by PyTorch with a dynamic batch
(``zoo_model_path(..., dynamic_batch=True)``), that file compiled once and run by onnxruntime, against
the zoo's exports at each fixed batch.
    uv run python bench/dynamic.py --models roberta,t5-encoder,vit --exporter dynamo

Models: any of ``MODELS`` (scripts/hf_export.py's set) at its default config, seeded random weights,
exported with dynamic ``batch`` and ``seq`` axes (``nnvm_testing.frontend_onnx.torch_models.hf_model_path``
with ``dynamic=True``; ``--exporter`` picks torch's exporter). Per model, in one child process (so the
thread count holds from the start): the model compiled once unbound (``nnvm.compile`` keeps its dim_params:
a ``SymbolicModule`` whose kernels take the dims) and once per shape with every dim bound. At each
(batch, seq) the unbound module's output is compared with onnxruntime's on the same file (token ids, a
mask with the rows after the first padded from the middle), then the two modules are timed in blocks of
their own, alternated ``--rounds`` times (``nnvm.bench.blocks_times``), and the ratio unbound / bound of
the medians printed. ``--cpu-time`` times each run by the process's CPU time instead of the wall clock:
with ``--threads 1`` on a shared machine it counts only the time the run itself was on a core.
``--target`` compiles both for another target (a GPU one: its symbolic kernels against its bound ones);
``--small`` takes the tests' 2-layer, width-64 transformer configs instead of the default sizes;
``--cpu-switch NAME=VALUE`` compiles both modules with that ``cpu_switches`` entry (``dense_few_rows=0``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODELS = {"bert": "BERT-base", "distilbert": "DistilBERT-base", "gpt2": "GPT-2 small", "vit": "ViT-B/16",
          "roberta": "RoBERTa-base", "albert": "ALBERT-xxlarge", "electra": "ELECTRA-small",
          "deberta-v2": "DeBERTa-v3-base", "mpnet": "MPNet-base", "gpt-neo": "GPT-Neo 125M",
          "llama": "Llama-style 150M", "qwen2": "Qwen2-style 230M", "mistral": "Mistral-style 150M",
          "t5-encoder": "T5-small encoder", "bart-encoder": "BART-large encoder", "clip-text": "CLIP text",
          "clip-vision": "CLIP ViT-B/32", "swin": "Swin-T",
          "convnext": "ConvNeXt-T"}  # scripts/hf_export.py's ARCHS at their sizes
DEFAULT_MODELS = "bert,distilbert"
# pixel_values: the batch alone is dynamic (a shape's seq is ignored)
IMAGES = ("vit", "clip-vision", "swin", "convnext")
CNNS = {"resnet18": "ResNet-18", "resnet50": "ResNet-50", "mobilenet_v2": "MobileNetV2",
        "squeezenet": "SqueezeNet 1.1", "densenet121": "DenseNet-121"}
BUILDS = {"squeezenet": "squeezenet1_1"}  # CNN name -> nnvm_testing.frontend_onnx.models builder
SHAPES = "1x1,1x7,1x128,4x33,8x512"  # the (batch, seq)


def _feeds(names: list, batch: int, seq: int):
    import numpy as np

    rng = np.random.default_rng(batch * 1000 + seq)
    if "pixel_values" in names:
        return {"pixel_values": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq // 2 + 1:] = 0  # padded rows after the first
    # ids below every vocabulary of the set (ALBERT's 30000)
    feeds = {"input_ids": rng.integers(0, 30000, (batch, seq)).astype(np.int64), "attention_mask": mask}
    return {k: v for k, v in feeds.items() if k in names}


def _timed(fn, cpu: bool):
    clock = time.process_time if cpu else time.perf_counter

    def run():
        start = clock()
        fn()
        return clock() - start

    return run


def _cnn(name: str, batch: int = 1) -> str:
    from nnvm_testing.frontend_onnx import models, torch_models

    if name.startswith("zoo:"):
        return torch_models.zoo_model_path(name[4:], batch)
    return models.cached_model_path(BUILDS.get(name, name), batch=batch)


def _is_cnn(name: str) -> bool:
    from nnvm_testing.frontend_onnx import torch_models

    return name in CNNS or (name.startswith("zoo:") and name[4:] in torch_models.ZOO_CNNS)


def measure(path: str, shapes: list, threads: int, repeat: int, rounds: int, cpu: bool,
            target: str = "llvm", switches: dict | None = None) -> dict:
    """Everything for one model (in the child process; see the module docstring). ``path``: a file, or
    ``cnn:NAME`` (``shapes`` then holds ``(batch,)`` tuples); ``switches``: both modules' ``cpu_switches``."""
    os.environ["NNVM_NUM_THREADS"] = str(threads)
    import numpy as np
    import onnx

    import nnvm
    from nnvm.bench import onnxruntime_session

    cnn = path[4:] if path.startswith("cnn:") else None
    options = nnvm.Options(tuning_log=False, cpu_switches=switches or {})
    t0 = time.perf_counter()
    if cnn:
        from nnvm_testing.frontend_onnx import models

        fixed = _cnn(cnn)
        path, inp, chw = models.dynamic_batch_copy(fixed, fixed[:-len(".onnx")] + "-dynamic-batch.onnx")
        if cnn.startswith("zoo:"):  # the export with a dynamic batch, compiled and run as it is
            from nnvm_testing.frontend_onnx import torch_models

            path = fixed = torch_models.zoo_model_path(cnn[4:], dynamic_batch=True)
        unbound = nnvm.compile(fixed, target=target, shapes={inp: ("batch", *chw[1:])}, options=options)
    else:
        image = "pixel_values" in {i.name for i in onnx.load(path, load_external_data=False).graph.input}
        if image:  # a leading "batch" binds to 1 unless named symbolic; the seq of a shape means nothing
            shapes = list(dict.fromkeys((b, 1) for b, _ in shapes))
        unbound = nnvm.compile(path, target=target, options=options,
                               shapes={"pixel_values": ("batch", 3, 224, 224)} if image else None)
    result = {"compile_s": time.perf_counter() - t0, "mode": unbound.stats()["symbolic"]["mode"],
              "why": unbound.stats()["symbolic"]["why_per_binding"], "threads": threads, "shapes": {},
              "batch_loop_kernels": unbound.stats().get("batch_loop_kernels"),
              "distinct_kernels": unbound.stats()["distinct_kernels"]}
    sess, _ = onnxruntime_session(path, threads)
    names = [i.name for i in sess.get_inputs()]
    for shape in shapes:
        if cnn:
            (batch,), seq = shape, None
            rng = np.random.default_rng(batch)
            feeds = {inp: rng.standard_normal([batch, *chw[1:]]).astype(np.float32)}
            bound = nnvm.compile(_cnn(cnn, batch), target=target, options=options)
        else:
            batch, seq = shape
            feeds = _feeds(names, batch, seq)
            bound = nnvm.compile(path, target=target, options=options,
                                 shapes={k: v.shape for k, v in feeds.items()})
        want = sess.run(None, feeds)[0]
        outs = unbound.run(**feeds)
        err = float(np.abs(outs[0] - want).max() / np.abs(want).max())
        values = unbound.bind_dims(feeds)
        one = unbound.specialised(values)  # the binding's plan, made once
        if one.plan.get("dims") is not None and one.runs_shaped:  # a bucket's plan (seq 7 runs in 8's)
            args = ([feeds[n] for n in one.input_names], values, [o.shape for o in outs])
            first = lambda m=one, a=args: m.run_shaped(*a)  # noqa: E731
        else:
            first = lambda m=one, f=feeds: m.run(**f)  # noqa: E731
        fns = [first, lambda m=bound, f=feeds: m.run(**f)]
        start = time.perf_counter()
        fns[1]()
        n = max(3, min(repeat, round(0.5 / max(time.perf_counter() - start, 1e-4))))
        load = os.getloadavg()[0]
        per = [[], []]
        for _ in range(rounds):
            for k, fn in enumerate(fns):
                run = _timed(fn, cpu)
                for _ in range(2):
                    run()
                per[k].append(statistics.median(run() for _ in range(n)))
        ms = [1e3 * statistics.median(p) for p in per]
        result["shapes"][f"{batch}" if cnn else f"{batch}x{seq}"] = {
            "unbound_ms": ms[0], "bound_ms": ms[1], "ratio": ms[0] / ms[1], "max_rel_err": err,
            "repeat": n, "load": sorted((load, os.getloadavg()[0]))}
        del bound
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help=f"comma-separated, of {','.join([*MODELS, *CNNS])}")
    parser.add_argument("--shapes", default=SHAPES, help="comma-separated BATCHxSEQ (transformers)")
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes (CNNs)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20, help="most runs in one block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks of each module, alternated")
    parser.add_argument("--cpu-time", action="store_true", help="time runs by the process's CPU time")
    parser.add_argument("--exporter", default="torchscript", choices=("dynamo", "torchscript"))
    parser.add_argument("--target", default="llvm", help="the target both modules are compiled for")
    parser.add_argument("--small", action="store_true", help="2 layers, width 64, 2 heads (the tests')")
    parser.add_argument("--cpu-switch", action="append", default=[], metavar="NAME=VALUE",
                        help="a cpu_switches entry both modules are compiled with (A/B runs)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s]
        assert all(len(s) == 2 and min(s) >= 1 for s in shapes)
    except (ValueError, AssertionError):
        print(f"--shapes {args.shapes!r}: expected comma-separated BATCHxSEQ, such as 1x128,4x33",
              file=sys.stderr)
        return 1
    try:
        batches = [(int(b),) for b in args.batches.split(",") if b]
        assert batches and all(b[0] >= 1 for b in batches)
    except (ValueError, AssertionError):
        print(f"--batches {args.batches!r}: expected comma-separated batch sizes, such as 1,8",
              file=sys.stderr)
        return 1
    if args.child:
        child_shapes = batches if args.child.startswith("cnn:") else shapes
        print(json.dumps(measure(args.child, child_shapes, args.threads, args.repeat, args.rounds,
                                 args.cpu_time, args.target,
                                 dict(s.split("=", 1) for s in args.cpu_switch))))
        return 0
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS and not _is_cnn(m)]
    if unknown:
        print(f"unknown model {unknown[0]!r}; known: {', '.join([*MODELS, *CNNS])}, zoo:NAME (a zoo CNN)",
              file=sys.stderr)
        return 1
    from nnvm_testing.frontend_onnx import torch_models

    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    lines = ["| model | (batch, seq) or (batch) | unbound ms | bound ms | unbound / bound "
             "| max rel err vs onnxruntime | load |", "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    for name in names:
        if _is_cnn(name):
            path = f"cnn:{name}"
            for b in batches:  # exported here, once, so the child only reads them
                _cnn(name, b[0])
            if name.startswith("zoo:"):
                torch_models.zoo_model_path(name[4:], dynamic_batch=True)
        else:
            small = {"layers": 2, "width": 64, "heads": 2} if args.small else {}
            path = torch_models.hf_model_path(name, 1, 16 if args.small else 128, dynamic=True,
                                              exporter=args.exporter, **small)
        cmd = [sys.executable, os.path.abspath(__file__), "--child", path, "--shapes", args.shapes,
               "--batches", args.batches, "--threads", str(args.threads), "--repeat", str(args.repeat),
               "--rounds", str(args.rounds), "--target", args.target]
        if args.cpu_time:
            cmd.append("--cpu-time")
        cmd += [f"--cpu-switch={s}" for s in args.cpu_switch]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not proc.stdout.strip():
            err = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()] or ["no output"]
            print(f"{name}: {err[-1]}", flush=True)
            lines.append(f"| {MODELS.get(name) or CNNS.get(name, name)} | {err[-1]} |")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps({name: r}), flush=True)
        title = MODELS.get(name) or CNNS.get(name, name)
        title = f"{name} (2 layers, width 64)" if args.small and name in MODELS else title
        for shape, s in r["shapes"].items():
            lines.append(f"| {title} | ({shape.replace('x', ', ')}) | {s['unbound_ms']:.2f} | "
                         f"{s['bound_ms']:.2f} | {s['ratio']:.2f} | {s['max_rel_err']:.1e} | "
                         f"{s['load'][0]:.1f}-{s['load'][1]:.1f} |")
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

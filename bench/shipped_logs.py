"""The shipped tuning logs against the fallbacks: nnvm untuned, nnvm with the logs the backend ships
(nearest CPU, nearest batch size) and onnxruntime, alternated run by run in one process.

    uv run python bench/shipped_logs.py --models resnet18,mobilenet_v2 --batch 8 --runs 7

One thread by default (``--threads``): the clean view on a shared host. Prints the medians and the ratios;
compile times too. The zoo models come from ``nnvm_testing.frontend_onnx.torch_models`` (cached).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2,resnet50,squeezenet")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    os.environ["NNVM_NUM_THREADS"] = str(args.threads)
    import nnvm
    from nnvm.bench import alternate_times, onnxruntime_session, seeded_inputs
    from nnvm_testing.frontend_onnx.torch_models import zoo_model_path

    print(f"batch {args.batch}, {args.threads} thread(s), load average {os.getloadavg()[0]:.2f}")
    for name in args.models.split(","):
        path = zoo_model_path(name, args.batch)
        mods, compile_s = {}, {}
        for how, log in (("untuned", False), ("shipped", None)):
            start = time.perf_counter()
            mods[how] = nnvm.compile(path, target="llvm", tuning_log=log)
            compile_s[how] = time.perf_counter() - start
        session, _ = onnxruntime_session(path, args.threads)
        feeds = seeded_inputs(mods["untuned"])
        ort_feeds = {i.name: feeds[i.name] for i in session.get_inputs()}
        calls = [lambda m=mods["untuned"], f=feeds: m.run(**f), lambda m=mods["shipped"], f=feeds: m.run(**f),
                 lambda s=session, f=ort_feeds: s.run(None, f)]
        runs = alternate_times(calls, args.runs, warmup=2)
        untuned, shipped, ort = (statistics.median(r) for r in runs)
        stats = mods["shipped"].stats()
        print(f"{name}: untuned {untuned:.2f} ms, shipped logs {shipped:.2f} ms "
              f"({stats['tuned_kernels']}/{stats['distinct_kernels']} kernels from logs), ort {ort:.2f} ms; "
              f"untuned/ort {untuned / ort:.2f}, shipped/ort {shipped / ort:.2f}, shipped/untuned "
              f"{shipped / untuned:.2f}; compile {compile_s['untuned']:.1f} / {compile_s['shipped']:.1f} s",
              flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

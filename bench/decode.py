"""Greedy decoding with a KV cache against onnxruntime and OpenVINO (issue 39): tokens/s and prefill.

GPT-2 small and the Llama-style GQA decoder (~150M: hidden 768, 12 layers, 12 heads, 4 KV heads,
vocabulary 32000), both exported with their cache by ``scripts/hf_export.py --with-past`` (seeded random
weights; ``nnvm_testing.frontend_onnx.torch_models.hf_decoder_path``). Every runtime reads the same
dynamic ONNX file and runs the same loop (``nnvm.generate.greedy``): a ``--prompt-len`` prompt of seeded
random tokens with an empty past (prefill), then ``--new-tokens - 1`` one-token steps, ``present`` fed
back as ``past``. nnvm compiles once, unbound. Rounds alternate the runtimes (rotated), ``--threads``
each (OpenVINO: one stream, latency hint, f32, read back); medians are reported, with whether each
peer chose the same tokens as nnvm. The machine's load is printed: a shared machine skews all three.

    uv run --no-sync python bench/decode.py [--models gpt2,llama] [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="nnvm's slowest kernels in a decode step")
    args = parser.parse_args(argv)
    os.environ["NNVM_NUM_THREADS"] = str(args.threads)  # before nnvm starts its thread pool

    import numpy as np

    from nnvm.generate import Decoder, greedy, peer_step
    from nnvm_testing.frontend_onnx import torch_models

    print(f"load before: {os.getloadavg()}; threads {args.threads}; prompt {args.prompt_len}, "
          f"{args.new_tokens} new tokens; {args.rounds} rounds")
    for name in args.models.split(","):
        path = torch_models.hf_decoder_path(name)
        t0 = time.perf_counter()
        dec = Decoder(path)
        compile_s = time.perf_counter() - t0
        runners = {"nnvm": (dec.step, dec.spec)}
        versions = {"nnvm": f"nnvm ({dec.module.stats()['symbolic']['mode']}, compiled in {compile_s:.0f} s)"}
        for peer in ("onnxruntime", "openvino"):
            step, spec, version = peer_step(peer, path, args.threads)
            runners[peer], versions[peer] = (step, spec), version
        ids = np.random.default_rng(0).integers(0, 1000, (1, args.prompt_len))
        results: dict = {k: [] for k in runners}
        for step, spec in runners.values():
            greedy(step, spec, ids, 3)  # warm-up: weights paged in, plans built
        order = list(runners)
        for r in range(args.rounds):
            for k in order[r % len(order):] + order[:r % len(order)]:
                results[k].append(greedy(runners[k][0], runners[k][1], ids, args.new_tokens))
        plans = dec.generate(ids, args.new_tokens)
        print(f"\n{name} ({path})")
        base = results["nnvm"][0]["tokens"]
        for k, rs in results.items():
            tps = statistics.median(x["tokens_per_s"] for x in rs)
            pre = statistics.median(x["prefill_ms"] for x in rs)
            agree = all(np.array_equal(x["tokens"], base) for x in rs)
            same = "" if k == "nnvm" else " same tokens" if agree else " DIFFERENT tokens"
            print(f"  {versions[k]:<44} prefill {pre:8.1f} ms  {tps:7.2f} tokens/s{same}")
        print(f"  nnvm memory plans built in one more {args.new_tokens}-token decode: {plans['plans']} "
              f"({plans['plan_ms']:.1f} ms); step ms min/median/max "
              f"{min(plans['step_ms']):.1f}/{statistics.median(plans['step_ms']):.1f}/{max(plans['step_ms']):.1f}")
        plan = dec.module.plan  # the last step's: which inputs and outputs the kernels used where they are
        read, written = (sum("uses" in d for d in plan[k]) for k in ("inputs", "outputs"))
        print(f"  nnvm cache fed back in place (make_plan's uses): {read} of {len(plan['inputs'])} inputs "
              f"read where the caller has them, {written} of {len(plan['outputs'])} outputs written where "
              "they are returned")
        built = [(x["dims"], 1e3 * x["seconds"]) for x in dec.module.stats()["symbolic"]["specialisations"]
                 if x["dims"] is not None]
        print("  nnvm plans kept (bucket dims: ms to build): "
              + "; ".join(f"{dims}: {ms:.1f}" for dims, ms in built))
        if args.profile:
            first = dec.spec.first_feeds(ids)
            outs = dec.step(first)
            token = np.argmax(outs[dec.spec.logits][:, -1], -1)[:, None]
            step_feeds = dec.spec.next_feeds(outs, token, len(ids[0]))
            for what, feeds in (("prefill", first), ("a decode step", step_feeds)):
                _profile(dec.module, feeds, what)
    print(f"\nload after: {os.getloadavg()}")
    return 0


def _profile(module, feeds: dict, what: str) -> None:
    """nnvm's kernels in ``what`` (at its plan's dims), summed by kernel, slowest first."""
    from collections import defaultdict

    from nnvm.bench import profile

    mod = module.specialised(module.bind_dims(feeds))
    rows = profile(mod, _padded(mod), 3)
    total = sum(r["ms"] for r in rows)
    by_kernel: dict = defaultdict(lambda: [0.0, 0, None])
    for r in rows:
        entry = by_kernel[r["kernel"]]
        entry[0] += r["ms"]
        entry[1] += 1
        entry[2] = entry[2] or r["group"]
    print(f"  nnvm's kernels in {what} (dims {mod.plan.get('dims')}; {total:.1f} ms in all, "
          "summed by kernel):")
    for kernel, (ms, n, group) in sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:8]:
        print(f"    {ms:8.2f} ms {100 * ms / total:5.1f}%  {n:3d} calls  {kernel[:40]}  "
              f"e.g. {', '.join(group)[:60]}")


def _padded(mod):
    """Inputs of the shapes ``mod``'s plan was made for (a bucket): zeros, for timing its kernels."""
    import numpy as np

    return {d["name"]: np.zeros(d["shape"], np.dtype(d["dtype"])) for d in mod.plan["inputs"]}


if __name__ == "__main__":
    sys.exit(main())

"""Greedy decoding on a GPU target with the KV cache kept on the device (issue 39): bytes moved and speed.

    uv run --no-sync python bench/gpu_decode_cache.py [--targets "opencl -device=cpu,webgpu"]
        [--model gpt2] [--small] [--prompt-len 16] [--new-tokens 16] [--rounds 3]

For each target, one compile of the with-past export (``nnvm.generate.Decoder``) decodes the same prompt
three ways, in blocks alternated ``--rounds`` times: ``resident`` (``Decoder.step``: ``present`` kept on the
device as ``DeviceTensor``s and read there as the next ``past``), ``copied`` (``SymbolicModule.run``: the
cache copied out of the device after each step and into it before the next, what every GPU step did
before) and onnxruntime (CPU) on the same file. Per one-token step it prints the bytes each nnvm way moves
to and from the device (``bytes_to_device`` / ``bytes_from_device``: counted, so exact), and tokens/s with
the ratios resident / copied and resident / onnxruntime. Here the "device" is PoCL or lavapipe on the
same CPU, where a copy is a memcpy: the bytes are what a real GPU would move over its bus, the times only
show that keeping the cache costs nothing here. ``--small``: the 2-layer, width-64 test decoder.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def measure(target: str, path: str, ids, peer, peer_spec, args) -> tuple:
    """(target, compile seconds, median bytes in / out per one-token step by way, median tokens/s by
    way, whether each way chose onnxruntime's tokens) for one target."""
    import numpy as np

    from nnvm.generate import Decoder, greedy

    t0 = time.perf_counter()
    dec = Decoder(path, target=target, tuning_log=False, max_length=args.prompt_len + args.new_tokens)
    compile_s = time.perf_counter() - t0
    lib = dec.module._whole.library  # every bucket's module shares it
    moved: dict = {}

    def counted(name, step):
        def run(feeds):
            before = (lib.bytes_to_device, lib.bytes_from_device)
            outs = step(feeds)
            if feeds["input_ids"].shape[1] == 1:  # a one-token step
                moved.setdefault(name, []).append((lib.bytes_to_device - before[0],
                                                   lib.bytes_from_device - before[1]))
            return outs
        return run

    def copied(feeds):
        return dec.module.run(**{k: np.asarray(v) for k, v in feeds.items()})

    ways = {"resident": counted("resident", dec.step), "copied": counted("copied", copied)}
    tokens = {name: greedy(step, dec.spec, ids, args.new_tokens)["tokens"] for name, step in ways.items()}
    want = greedy(peer, peer_spec, ids, args.new_tokens)["tokens"]
    same = {name: bool(np.array_equal(t, want)) for name, t in tokens.items()}
    speed: dict = {name: [] for name in [*ways, "onnxruntime"]}
    for _ in range(args.rounds):  # blocks alternated
        for name, step in [*ways.items(), ("onnxruntime", peer)]:
            spec = peer_spec if name == "onnxruntime" else dec.spec
            speed[name].append(greedy(step, spec, ids, args.new_tokens)["tokens_per_s"])
    med = {name: statistics.median(v) for name, v in speed.items()}
    per_step = {name: tuple(statistics.median(m[k] for m in moved[name]) for k in (0, 1)) for name in ways}
    return target, compile_s, per_step, med, same


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", default="opencl -device=cpu,webgpu")
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--small", action="store_true", help="the 2-layer, width-64 test decoder")
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    os.environ["NNVM_NUM_THREADS"] = str(args.threads)  # before nnvm starts its thread pool

    import numpy as np

    from nnvm.generate import peer_step
    from nnvm_testing.frontend_onnx import torch_models

    small = {"layers": 2, "width": 64, "heads": 2} if args.small else {}
    path = torch_models.hf_decoder_path(args.model, **small)
    ids = np.random.default_rng(0).integers(0, 1000, (1, args.prompt_len))
    peer, peer_spec, _ = peer_step("onnxruntime", path, args.threads)
    print(f"model {os.path.basename(path)}; prompt {args.prompt_len}, new tokens {args.new_tokens}; "
          f"threads {args.threads}; load before: {os.getloadavg()}")
    rows = [measure(target, path, ids, peer, peer_spec, args) for target in args.targets.split(",")]
    print(f"load after: {os.getloadavg()}\n")
    print("| target | compile s | resident: bytes in / out a step | copied: bytes in / out a step | "
          "tokens/s resident | copied | onnxruntime | resident / copied | resident / onnxruntime | "
          "same tokens as onnxruntime |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for target, compile_s, per_step, med, same in rows:
        r, c = per_step["resident"], per_step["copied"]
        print(f"| {target} | {compile_s:.1f} | {r[0]:,.0f} / {r[1]:,.0f} | {c[0]:,.0f} / {c[1]:,.0f} | "
              f"{med['resident']:.1f} | {med['copied']:.1f} | {med['onnxruntime']:.1f} | "
              f"{med['resident'] / med['copied']:.2f}x | {med['resident'] / med['onnxruntime']:.2f}x | "
              f"{same['resident'] and same['copied']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

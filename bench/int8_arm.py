"""Int8 on Arm (issue 40): what the 8-bit convolution kernels execute per target, and a qemu run for scale.

    uv run python bench/int8_arm.py                                   # ResNet-18 and MobileNetV2
    uv run python bench/int8_arm.py --models resnet18 --rounds 0      # instruction counts only

Each model is onnxruntime's QDQ quantization of the generated network (``quantized_model_path``), compiled
with ``opt_level=3`` for each target (``--targets``) two ways: as nnvm compiles it now (the blocked int8
kernels on the Arm form of ``dot_u8s8``), and as Arm compiled it before them (``generic``: the layout pass
off, ``disabled_passes=["alter_op_layout"]``, which is what the Arm backend's answer "no blocked layout"
made of every 8-bit operator: ``qconv2d`` by the generic schedule, vectorized by LLVM).

qemu-user cannot time Arm hardware (each guest instruction becomes host code; a dot product is a helper
call), so what means something is static. Per compiled module, for every convolution kernel (``qconv2d*``
in its name): the hot loop, the innermost loop with the most multiply instructions (``sdot``, ``sudot``,
``mul``, ``sadalp``, ``vpadal`` ...); its instructions, its multiply instructions, and the stack accesses
in it (spills). The table sums them over the kernels: multiply-accumulates per hot-loop instruction
(``macs``: a dot product is 16, ``mul v.8h`` 8, a scalar ``madd`` 1; ``sdot``'s correction dot products,
one per weight vector and step, count as 16 too, so ``sdot`` rows overstate by up to 1/(m+1)), and which
multiply instructions they are. ``--rounds N`` also times one inference per module
under qemu, N rounds alternated (new, generic), for scale only.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections import Counter

TARGETS = ("aarch64 -mcpu=neoverse-n1", "aarch64 -mcpu=neoverse-n2", "aarch64", "armv7")
# the instructions that multiply (base mnemonic, before any ``.s16`` suffix), AArch64 and ARMv7
MULTIPLIES = {"sdot", "udot", "usdot", "sudot", "mul", "mla", "smull", "smull2", "smlal", "smlal2", "umull",
              "umull2", "umlal", "umlal2", "sadalp", "madd", "smaddl", "vmul", "vmla", "vmull", "vmlal",
              "vpadal", "smlabb", "smulbb", "fmla", "fmadd"}
ACCUMULATES = {"sadalp", "uadalp", "vpadal"}  # the NEON form's pairwise adds: no products of their own
LABEL = re.compile(r"^(\.?[\w$.]+):")
BRANCH = re.compile(r"^\s+(b\.\w+|b\w*|cbn?z|tbn?z)\s+(?:.*,\s*)?(\.L\w+)\s*$")


def macs(line: str) -> int:
    """Multiply-accumulates of one instruction: a dot product 4 per 32-bit lane, a vector multiply one per
    lane (AArch64 ``v0.8h``; ARMv7 ``vmul.i16 q0``: 128 / 16 bits), a scalar one 1."""
    mnemonic, _, operands = line.strip().replace("\t", " ").partition(" ")
    base = mnemonic.split(".")[0]
    if base not in MULTIPLIES or base in ACCUMULATES:
        return 0
    lanes = re.search(r"v\d+\.(\d+)([bhsd])", operands)
    if lanes:
        count = int(lanes.group(1))
        return 4 * count if base.endswith("dot") else count
    bits = re.search(r"\.[isuf](8|16|32|64)$", mnemonic)
    if bits:
        width = 128 if re.search(r"\bq\d+", operands) else 64
        return width // int(bits.group(1))
    return 1


def kernels(asm: str) -> dict:
    """{function name: [lines]} of every kernel function in ``asm``."""
    out, name = {}, None
    for line in asm.splitlines():
        m = LABEL.match(line)
        if m and not m.group(1).startswith("."):
            name = m.group(1)
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return out


def hot_loop(lines: list) -> dict | None:
    """The innermost loop (a label and the backward branch to it) with the most multiply instructions."""
    labels, instructions = {}, []
    for line in lines:
        m = LABEL.match(line)
        if m:
            labels[m.group(1)] = len(instructions)
        elif line.startswith(("\t", " ")) and line.strip() and not line.strip().startswith((".", "@", "//")):
            instructions.append(line)
    loops = []
    for end, line in enumerate(instructions):
        m = BRANCH.match(line)
        if m and m.group(2) in labels and labels[m.group(2)] <= end:
            loops.append((labels[m.group(2)], end + 1))
    inner = [(a, b) for a, b in loops if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in loops)]
    best = None
    for a, b in inner:
        body = instructions[a:b]
        mnemonics = Counter(line.split()[0] for line in body)
        mults = Counter({k: v for k, v in mnemonics.items() if k.split(".")[0] in MULTIPLIES})
        spills = sum(1 for line in body if "[sp" in line or "sp]" in line)
        loop = {"instructions": len(body), "multiplies": sum(mults.values()), "kinds": mults,
                "spills": spills, "macs": sum(macs(line) for line in body)}
        if best is None or loop["multiplies"] > best["multiplies"]:
            best = loop
    return best if best and best["multiplies"] else None


def hot_loops(asm: str) -> dict:
    """{kernel: its hot loop} of the convolution kernels; a kernel's parallel bodies are functions of their
    own (``name.par2``): the hottest loop over them."""
    best = {}
    for name, lines in kernels(asm).items():
        loop = hot_loop(lines) if "qconv2d" in name else None
        base = name.split(".")[0]
        if loop is not None and (base not in best or loop["multiplies"] > best[base]["multiplies"]):
            best[base] = loop
    return best


def analyse(asm: str) -> dict:
    """Sums over the convolution kernels' hot loops."""
    total = {"kernels": 0, "instructions": 0, "multiplies": 0, "spills": 0, "macs": 0, "kinds": Counter()}
    for loop in hot_loops(asm).values():
        total["kernels"] += 1
        for key in ("instructions", "multiplies", "spills", "macs"):
            total[key] += loop[key]
        total["kinds"] += loop["kinds"]
    return total


def print_kernels(model: str, target: str, mod) -> None:
    """A row per convolution kernel of ``mod``: its fused nodes, and its hot loop."""
    groups = {c["kernel"]: c["group"] for c in mod.plan["calls"]}
    print(f"\n{model} on {target}, per kernel:\n")
    print("| kernel (fused nodes) | hot-loop instructions | multiplies | MACs per instruction | spills |")
    print("|---|---|---|---|---|")
    for name, loop in hot_loops(mod.library.assembly()).items():
        kinds = ", ".join(f"{k} {v}" for k, v in loop["kinds"].most_common(2))
        print(f"| {', '.join(groups.get(name, [name]))} | {loop['instructions']} | {kinds} "
              f"| {loop['macs'] / loop['instructions']:.2f} | {loop['spills']} |")
    print()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS))
    parser.add_argument("--rounds", type=int, default=1, help="qemu runs per module, alternated (0: none)")
    parser.add_argument("--per-kernel", action="store_true", help="a row per convolution kernel (int8 path)")
    args = parser.parse_args(argv)

    import nnvm
    from nnvm_testing.frontend_onnx.quantized import calibration_inputs, quantized_model_path

    print(f"load {os.getloadavg()[0]:.2f}; qemu-user on x86: times are for scale only")
    print("| model | target | path | conv kernels | MACs per hot-loop instruction | hot-loop instructions | "
          "multiplies (hot loops) | spills | qemu s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        path = quantized_model_path(model, "qdq")
        feeds = calibration_inputs(path, count=1, seed=1)[0]
        for target in args.targets:
            mods = {"int8 kernels": nnvm.compile(path, target=target, opt_level=3),
                    "generic": nnvm.compile(path, target=target, opt_level=3,
                                            disabled_passes=["alter_op_layout"])}
            seconds = {who: [] for who in mods}
            for _ in range(args.rounds):
                for who, mod in mods.items():
                    start = time.perf_counter()
                    mod.run(**feeds)
                    seconds[who].append(time.perf_counter() - start)
            if args.per_kernel:
                print_kernels(model, target, mods["int8 kernels"])
            for who, mod in mods.items():
                a = analyse(mod.library.assembly())
                kinds = ", ".join(f"{k} {v}" for k, v in a["kinds"].most_common(3))
                per = a["macs"] / a["instructions"] if a["instructions"] else float("nan")
                qemu = f"{min(seconds[who]):.1f}" if seconds[who] else "-"
                print(f"| {model} | {target} | {who} | {a['kernels']} | {per:.2f} | {a['instructions']} "
                      f"| {kinds} | {a['spills']} | {qemu} |", flush=True)
    print(f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""x86 schedules: register-blocked direct convolution for NCHW conv2d groups.

The generic schedule keeps one vector of outputs (the innermost width loop) in flight while it walks
the whole reduction, so every weight is loaded once per output vector and every input row once per
output channel. This one keeps a tile of ``OC_BLOCK`` output channels x ``ow_block`` output columns
in registers: each input vector loaded feeds ``OC_BLOCK`` fused multiply-adds, each broadcast weight
feeds one vector. The loop program of a conv2d group (conv -> bias/bn/relu epilogue) becomes::

    parallel for oc_outer in ...:                   # on the thread pool
      for oh, n, ow_outer in ...:
        conv_tile[OC_BLOCK, ow_block] = 0            # the conv stage, computed at ow_outer
        for rc, ry, rx:                              # reduction outside the register tile
          unrolled for oci in OC_BLOCK:
            vectorized for owi in ow_block:
              conv_tile[oci, owi] += pad[...] * w[...]
      unrolled for oci: vectorized for owi: out[...] = epilogue(conv_tile[oci, owi])

Padding is materialized at root (as in the generic schedule), epilogue stages are inlined. Grouped
and depthwise convolutions, and groups this schedule does not recognise, are declined (``None``) so
the generic schedule serves them.
"""

from __future__ import annotations

import os

from nnvm import te
from nnvm.schedules import guarded_inputs_of_reductions, schedule_loop_nest
from nnvm.te.tensor import ComputeOp
from nnvm.tir.expr import Const

OC_BLOCK = 8  # output channels per register tile
_AVX512_CPUS = ("cascadelake", "cooperlake", "icelake", "tigerlake", "sapphirerapids", "emeraldrapids",
                "graniterapids", "rocketlake", "cannonlake", "znver4", "znver5", "x86-64-v4")
_AVX2_CPUS = ("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "znver",
              "x86-64-v3")


def vector_lanes(target) -> int:
    """float32 lanes of the widest vector unit the target has: 16 with AVX-512, 8 with AVX2, else 4."""
    from nnvm_backend_llvm_x86.plugin import LLVMBackend

    try:
        resolved = LLVMBackend().resolve(target)
    except Exception:  # an unusual target: assume the common AVX2 width
        return 8
    flags = set(resolved.features.split(","))
    if not resolved.features:  # ``-mcpu`` alone: the CPU's own features, known by name
        cpu = resolved.cpu.lower()
        if "avx512" in cpu or cpu.startswith(_AVX512_CPUS):
            return 16
        return 8 if cpu.startswith(_AVX2_CPUS) else 4
    if "+avx512f" in flags:
        return 16
    if "+avx2" in flags or "+avx" in flags:
        return 8
    return 4


def _extent(iv) -> int | None:
    ext = iv.dom.extent
    return int(ext.value) if isinstance(ext, Const) else None


def _block(extent: int, limit: int) -> int:
    """The largest divisor of ``extent`` not above ``limit`` (so tiles need no bounds guards)."""
    for b in range(min(extent, limit), 0, -1):
        if extent % b == 0:
            return b
    return 1


def schedule_conv2d(group, target):
    """The register-blocked schedule for a plain (groups=1) NCHW conv2d group, or None to decline."""
    if group.anchor_op != "conv2d" or len(group.outputs) != 1:
        return None
    attrs = group.anchor_attrs
    if attrs.get("groups", 1) != 1 or attrs.get("layout", "NCHW") not in ("NCHW", None):
        return None
    out = group.outputs[0]
    if out.dtype != "float32" or len(out.shape) != 4:
        return None
    sch = te.create_schedule([out.op])
    convs = [st for st in sch.stages if isinstance(st.op, ComputeOp) and st.op.tag == "conv2d"]
    if len(convs) != 1:
        return None
    conv = convs[0]
    lanes = vector_lanes(target)
    padded = guarded_inputs_of_reductions(sch)
    for stage in sch.stages:
        op = stage.op
        if not isinstance(op, ComputeOp) or stage.is_output or stage is conv:
            continue
        if op.reduce_axis:
            return None  # a second reduction in the group: not the shape this schedule knows
        if op not in padded:
            stage.compute_inline()

    n, oc, oh, ow = conv.op.axis
    ext_oc, ext_ow = _extent(oc), _extent(ow)
    if ext_oc is None or ext_ow is None:
        return None
    oc_block = _block(ext_oc, OC_BLOCK)
    ow_block = _block(ext_ow, lanes) if ext_ow > lanes else ext_ow
    if ow_block < 4 and ext_ow >= 4:
        return None  # no useful vector along the width (e.g. a prime width above the vector size)
    rc, ry, rx = conv.op.reduce_axis
    out_stage = sch[out.op]
    # The outer loops stay unfused: bound inference cannot see through a fused index, so a conv tile
    # computed inside a fused loop would cover every row. The parallel loop is the outermost one.
    if out_stage is conv:
        oco, oci = conv.split(oc, factor=oc_block)
        owo, owi = conv.split(ow, factor=ow_block)
        conv.reorder(oco, oh, n, owo, rc, ry, rx, oci, owi)
    else:
        on, ooc, ooh, oow = out_stage.op.axis
        oco, oci = out_stage.split(ooc, factor=oc_block)
        owo, owi = out_stage.split(oow, factor=ow_block)
        out_stage.reorder(oco, ooh, on, owo, oci, owi)
        out_stage.unroll(oci)
        out_stage.vectorize(owi)
        conv.compute_at(out_stage, owo)
        conv.reorder(n, oh, rc, ry, rx, oc, ow)
        oci, owi = oc, ow
    conv.unroll(oci)
    conv.vectorize(owi)
    (out_stage if out_stage is not conv else conv).parallel(oco)
    for stage in sch.stages:
        if isinstance(stage.op, ComputeOp) and stage.op in padded and stage.attach_type == "root":
            schedule_loop_nest(stage)
    return sch


def schedule_group(target, group):
    """Entry point for ``nnvm_schedule_group``: conv2d groups get ``schedule_conv2d``; others None."""
    if os.environ.get("NNVM_X86_CONV_SCHEDULE", "1") == "0":
        return None  # A/B switch for benchmarks: the generic schedule everywhere
    if group.anchor_op == "conv2d":
        return schedule_conv2d(group, target)
    return None

"""What every CPU backend (target key ``cpu``: x86's ``llvm``, Arm's ``aarch64`` and ``armv7``) shares.

- ``templates``: the table of tunable schedule templates (``schedules``: register-blocked NCHW conv2d;
  ``schedule_depthwise``; ``schedule_nchwc``: conv2d in ``NCHW[x]c``; ``depthwise_nchwc``: depthwise
  conv2d in ``NCHW[x]c`` in 2-D register tiles; ``winograd``; ``schedule_dense``: dense and packed
  dense; ``schedule_softmax``: softmax and layer-norm rows, and the two row kernels of ``softmax_rows``);
- ``cost_model``: the convolution templates' fallback register tiles and parallel loops, from the
  machine facts the backend gives;
- ``softmax_rows``: softmax as two row kernels that compute each ``exp`` once (ops the layout pass makes);
- ``schedule_injective``: the rows-apart schedule of groups that only move data;
- ``layout``: the layout pass's answers (conv2d in ``NCHW[x]c`` or Winograd, dense over a packed weight)
  and the ops it makes;
- ``shuffle``: channel shuffles in ``NCHW[x]c`` (an op, the pass that makes it, its schedule);
- ``schedule_pool``: average pools a row at a time;
- ``schedule_qconv``: 8-bit conv2d over a weight packed for the backend's ``dot_u8s8`` tensor intrinsic
  (``vpdpbusd`` on VNNI), its layout answer, op and template (docs/quantization.md);
- ``switches``: the A/B switches a compile sets in ``Options.cpu_switches``.

``plugin`` registers them for the key ``cpu``. A backend is asked, never guessed at: its
``vector_lanes`` (float32 lanes; answering it is how a backend takes these templates) and its
``blocked_layout`` (whether the layout pass runs). The template names are ``cpu.*`` (logs written
before, whose names are ``x86.*``, are read as ``cpu.*``: ``nnvm.autotune.log``). Nothing here imports
a plugin.
"""
from nnvm.plugins import backends


def serves(target) -> bool:
    """Whether the CPU layer serves ``target``: the key ``cpu`` and an installed backend that answers
    ``vector_lanes`` (one that does not, or no backend at all, leaves every group to the generic
    schedule). Here, not in ``plugin``, so the passes of this layer can ask it without an import cycle."""
    if "cpu" not in getattr(target, "keys", ()):
        return False

    found = backends().get(target.kind)
    return found is not None and found[1].vector_lanes(target) is not None

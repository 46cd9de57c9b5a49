"""What every CPU backend (target key ``cpu``: x86's ``llvm``, Arm's ``aarch64`` and ``armv7``) shares.

- ``templates``: the table of tunable schedule templates (``schedules``: register-blocked NCHW conv2d;
  ``schedule_depthwise``; ``schedule_nchwc``: conv2d in ``NCHW[x]c``; ``winograd``; ``schedule_dense``:
  dense and packed dense; ``schedule_softmax``: softmax and layer-norm rows);
- ``schedule_injective``: the rows-apart schedule of groups that only move data;
- ``layout``: the layout pass's answers (conv2d in ``NCHW[x]c`` or Winograd, dense over a packed weight)
  and the ops it makes;
- ``switches``: the ``NNVM_X86_*`` A/B switches.

``plugin`` registers them for the key ``cpu``. A backend is asked, never guessed at: its
``vector_lanes`` (float32 lanes; answering it is how a backend takes these templates) and its
``blocked_layout`` (whether the layout pass runs). The template names keep their ``x86.`` prefix: they
are keys in the tuning logs the x86 plugin ships. Nothing here imports a plugin.
"""

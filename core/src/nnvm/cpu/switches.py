"""The CPU layer's A/B switches, read in one place: the active ``nnvm.Options``' ``cpu_switches``.

A compile's options set them by name (``nnvm.compile(..., options=nnvm.Options(cpu_switches={"layout":
"0"}))``; ``nnvm compile --cpu-switch layout=0``); a switch they leave unset takes its default. They turn
the shared CPU templates and layout pass on or off for every CPU backend (x86 and Arm), for benchmarks
(``bench/switch_ab.py``) and the tests that compare both sides. They are not environment variables: the
options a compile runs under are active while it compiles (``nnvm.options.activated``), and a rule deep in
the layer reads them here.

A value outside the switch's choices is a user's mistake: one sentence naming the switch, not a
traceback and not a silent "off".
"""

from __future__ import annotations

from nnvm import options
from nnvm.errors import Error

# name -> (choices, default); None as default: unset means "let the backend's rule decide"
SWITCHES = {
    "templates": (("0", "1"), "1"),
    "conv_schedule": (("0", "1"), "1"),
    "layout": (("0", "1"), "1"),
    "winograd": (("0", "1"), None),
    "winograd_tile": (("2", "4"), "2"),
    "pad_at": (("row", "root"), None),
    "shuffle": (("0", "1"), "1"),
    "grouped": (("0", "1"), "1"),
    "depthwise_tiles": (("0", "1"), "1"),
    "depthwise_stream": (("0", "1"), "1"),  # one-row depthwise tiles where data streams (AVX2)
    "dense_tiles": (("0", "1"), "1"),  # cpu.dense.packed's fallback tile from the register file
    "dense_pad_blocks": (("0", "1"), "1"),  # cpu.dense.packed: an odd block count padded by one
    "dense_wide_tiles": (("0", "1"), "1"),  # cpu.dense.packed: AVX2 tiles of 12 accumulators
    "dense_batch_outer": (("0", "1"), "1"),  # cpu.dense.packed: weight tiles inside the batches
    "dense_few_rows": (("0", "1"), "1"),  # cpu.dense.packed: <= 8 rows in one tile, AVX2's odd rows padded
    "softmax_select": (("0", "1"), "1"),  # softmax_exp's floor as a select on one compare
    "softmax_bounded_exp": (("0", "1"), "1"),  # softmax_exp's exp without clamps (exp_bounded)
    "softmax_max_skips_nan": (("0", "1"), "1"),  # softmax_exp's row maximum as one vmaxps a vector
    "padded_blocks": (("0", "1"), "1"),
    "fused_parallel": (("0", "1"), "1"),
    "avx2_tiles": (("0", "1"), "1"),  # AVX2 without a broadcast operand (the x86 plugin's answer)
    "flat_plane": (("0", "1"), "1"),  # 1x1 convs on small planes tiled as one row (schedule_nchwc)
    "patch_dense": (("0", "1"), "1"),  # stride == kernel convs on few channels as products
    "expand_depthwise": (("0", "1"), "1"),  # a 1x1 expansion + depthwise conv as one kernel
    "concat_in_place": (("0", "1"), "1"),  # concatenations planned in place (concat_in_place.py)
    "qconv_rows_outer": (("0", "1"), "1"),  # cpu.qconv2d_nchwc: rows outside channel blocks (rows_outer)
    "qconv_prefetch": (("0", "1"), "1"),  # cpu.qconv2d_nchwc: the next block's weights prefetched
}


def _value(name: str, default: str | None) -> str | None:
    opts = options.active()
    if opts is not None and name in opts.cpu_switches:
        return opts.cpu_switches[name]
    return default


def switch(name: str) -> str | None:
    """The value of the switch ``name`` (``layout``): the active options', else its default."""
    choices, default = SWITCHES[name]
    value = _value(name, default)
    if value is not None and value not in choices:
        raise Error(f"cpu switch {name}={value!r}: must be one of {', '.join(choices)} (unset: "
                    f"{default if default is not None else 'the backend decides'})")
    return value


def enabled(name: str) -> bool:
    """An on/off switch (``0`` or ``1``)."""
    return switch(name) == "1"


def switch_state() -> dict:
    """Every switch's value as set (defaults included, not validated: a bad value is the error of the
    schedule that reads it): part of each kernel's cache key, since schedules read them as they lower."""
    return {name: _value(name, default) for name, (_, default) in SWITCHES.items()}


def check_options(opts) -> None:
    """One sentence for a switch ``opts.cpu_switches`` names that does not exist or a value outside its
    choices, before anything is compiled."""
    for name, value in opts.cpu_switches.items():
        if name not in SWITCHES:
            raise Error(f"cpu switch {name!r} does not exist (switches: {', '.join(sorted(SWITCHES))})")
        choices, default = SWITCHES[name]
        if value not in choices:
            raise Error(f"cpu switch {name}={value!r}: must be one of {', '.join(choices)} (unset: "
                        f"{default if default is not None else 'the backend decides'})")

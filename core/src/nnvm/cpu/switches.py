"""The CPU layer's A/B switches, read in one place: ``nnvm.Options.cpu_switches``, else ``NNVM_X86_*``.

A compile's options set them by name (``Options(cpu_switches={"layout": "0"})``); a switch they leave
unset takes its environment variable (``NNVM_X86_LAYOUT``, listed in the README; ``nnvm.environment``
reads them), else its default. The variables keep the ``X86`` from when these schedules were the x86
plugin's own: benchmark scripts and tests set them. They turn the shared CPU templates and layout pass
on or off for every CPU backend (x86 and Arm).

Each is read when it is needed, so a test or benchmark can flip it between two compiles in one
process. A value outside the switch's choices is a user's mistake: one sentence naming the switch,
not a traceback and not a silent "off".
"""

from __future__ import annotations

from nnvm import environment, options
from nnvm.errors import Error

# name -> (choices, default); None as default: unset means "let the backend's rule decide"
SWITCHES = {
    "NNVM_X86_TEMPLATES": (("0", "1"), "1"),
    "NNVM_X86_CONV_SCHEDULE": (("0", "1"), "1"),
    "NNVM_X86_LAYOUT": (("0", "1"), "1"),
    "NNVM_X86_WINOGRAD": (("0", "1"), None),
    "NNVM_X86_WINOGRAD_TILE": (("2", "4"), "2"),
    "NNVM_X86_PAD_AT": (("row", "root"), None),
    "NNVM_X86_SHUFFLE": (("0", "1"), "1"),
    "NNVM_X86_GROUPED": (("0", "1"), "1"),
    "NNVM_X86_DEPTHWISE_TILES": (("0", "1"), "1"),
    "NNVM_X86_DEPTHWISE_STREAM": (("0", "1"), "1"),  # one-row depthwise tiles where data streams (AVX2)
    "NNVM_X86_DENSE_TILES": (("0", "1"), "1"),  # cpu.dense.packed's fallback tile from the register file
    "NNVM_X86_DENSE_PAD_BLOCKS": (("0", "1"), "1"),  # cpu.dense.packed: an odd block count padded by one
    "NNVM_X86_DENSE_WIDE_TILES": (("0", "1"), "1"),  # cpu.dense.packed: AVX2 tiles of 12 accumulators
    "NNVM_X86_DENSE_BATCH_OUTER": (("0", "1"), "1"),  # cpu.dense.packed: weight tiles inside the batches
    "NNVM_X86_SOFTMAX_SELECT": (("0", "1"), "1"),  # softmax_exp's floor as a select on one compare
    "NNVM_X86_SOFTMAX_BOUNDED_EXP": (("0", "1"), "1"),  # softmax_exp's exp without clamps (exp_bounded)
    "NNVM_X86_SOFTMAX_MAX_SKIPS_NAN": (("0", "1"), "1"),  # softmax_exp's row maximum as one vmaxps a vector
    "NNVM_X86_PADDED_BLOCKS": (("0", "1"), "1"),
    "NNVM_X86_FUSED_PARALLEL": (("0", "1"), "1"),
    "NNVM_X86_AVX2_TILES": (("0", "1"), "1"),  # AVX2 without a broadcast operand (the x86 plugin's answer)
    "NNVM_X86_FLAT_PLANE": (("0", "1"), "1"),  # 1x1 convs on small planes tiled as one row (schedule_nchwc)
    "NNVM_X86_PATCH_DENSE": (("0", "1"), "1"),  # stride == kernel convs on few channels as products
    "NNVM_X86_EXPAND_DEPTHWISE": (("0", "1"), "1"),  # a 1x1 expansion + depthwise conv as one kernel
}


def _value(name: str, default: str | None) -> str | None:
    key = options.switch_key(name)
    opts = options.active()
    if opts is not None and key in opts.cpu_switches:
        return opts.cpu_switches[key]
    return environment.cpu_switch(key) or default


def switch(name: str) -> str | None:
    """The value of the switch ``name`` (``NNVM_X86_LAYOUT``): the active options', else the environment's,
    else its default."""
    choices, default = SWITCHES[name]
    value = _value(name, default)
    if value is not None and value not in choices:
        raise Error(f"{name}={value!r}: must be one of {', '.join(choices)} (unset: "
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
    choices (the environment's are checked where a schedule reads them, as always)."""
    known = {options.switch_key(name): name for name in SWITCHES}
    for key, value in opts.cpu_switches.items():
        if key not in known:
            raise Error(f"cpu switch {key.lower()!r} does not exist (switches: "
                        f"{', '.join(sorted(k.lower() for k in known))})")
        choices, default = SWITCHES[known[key]]
        if value not in choices:
            raise Error(f"cpu switch {key.lower()}={value!r}: must be one of {', '.join(choices)}")

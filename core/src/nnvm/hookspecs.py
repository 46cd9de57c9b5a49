"""Every hook a plugin can implement. Plugins are modules of plain functions marked ``@nnvm.hookimpl``.

Registration hooks take a ``register`` callback and are called once, when the plugin manager is built
(on first use). Selection hooks are ``firstresult``: each implementation returns ``None`` for "not
mine", and the first other answer wins. Hooks are called with keywords; a spec may gain arguments,
never lose or reorder them.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("nnvm")
hookimpl = pluggy.HookimplMarker("nnvm")


@hookspec
def nnvm_register_ops(register):
    """Register operators: call ``register(OpDef)`` for each (``nnvm.ops.registry.OpDef``).

    Called once when the plugin manager is built. Registering a name another plugin registered is an
    error naming both plugins.
    """


@hookspec
def nnvm_register_frontends(register):
    """Register model importers: call ``register(Frontend)`` (``nnvm.frontend.Frontend``).

    A frontend says which files and in-memory objects it accepts and turns them into a ``Graph``.
    """


@hookspec
def nnvm_register_backends(register):
    """Register code generators: call ``register(Backend)`` (``nnvm.backend.Backend``).

    A backend names the target kinds it builds for (``llvm``, ``opencl`` ...) and compiles loop programs.
    It declares its target facts on the object (``keys``, ``device``, ``native_target``): the core derives
    ``Target.keys`` and the C runtime's targets from them, and refuses a backend declaring no keys.
    """


@hookspec
def nnvm_register_commands(register):
    """Register subcommands of the ``nnvm`` command line: call ``register(nnvm.cli.Command(name, help,
    add_arguments, run))`` for each.

    Called once, when the command line is built. ``add_arguments(parser)`` adds the subcommand's options
    to its ``argparse`` parser; ``run(args)`` runs it with the parsed ``argparse.Namespace`` and returns
    the exit status (raise ``nnvm.Error`` for a user's mistake: the CLI prints it as one line, exit 1).
    A name the core or another plugin uses is an error naming both (the conformance suite registers
    ``nnvm conformance`` this way).
    """


@hookspec
def nnvm_register_passes(register):
    """Register graph passes: call ``register(Pass)`` (``nnvm.passes.manager.Pass``)."""


@hookspec(firstresult=True)
def nnvm_schedule_group(target, group):
    """Return a ``te.Schedule`` for one fused group on ``target``, or ``None`` if not yours.

    ``target`` is a parsed ``nnvm.target.Target``; ``group`` an ``nnvm.compiler.GroupCompute`` holding
    the anchor operator's name and attributes, the group's tensors and its outputs. The generic
    schedule of the core is used when every implementation declines.
    """


@hookspec(firstresult=True)
def nnvm_schedule_template(target, group):
    """Return an ``nnvm.autotune.ScheduleTemplate`` (a schedule with tunable knobs) for one fused group
    on ``target``, or ``None`` if not yours.

    Asked before ``nnvm_schedule_group``. The compiler builds the template with the best config a
    tuning log holds for the group's workload, else with the template's fallback config; the tuner
    (``nnvm.autotune``) searches the template's space.
    """


@hookspec(firstresult=True)
def nnvm_alter_op_layout(target, node, in_types):
    """Return an ``nnvm.passes.alter_op_layout.AlteredNode`` computing ``node`` in a layout the target
    prefers (``conv2d`` as ``conv2d_nchwc`` over ``NCHW16c``, say), or ``None`` to keep it as it is.

    Called by the ``alter_op_layout`` pass (opt level 3) for every node, in execution order, with the
    parsed ``target``, the ``nnvm.graph.ir.Node`` and ``in_types`` (the ``TensorType`` of each input
    in its original layout; ``None`` for an absent optional input). The answer names the new operator
    and attributes, the layout each input must arrive in and the layout each output leaves in, and
    optionally a node to apply to an input first (a Winograd weight transform); the pass inserts the
    layout transforms (folded at compile time for weights).
    """

"""The one plugin manager: finds plugins through the ``nnvm`` entry point group, merges what they register.

Built on first use, never at import. ``NNVM_DISABLE_PLUGIN_AUTOLOAD=1`` loads only the core's own
built-in plugins; ``NNVM_PLUGINS=onnx,llvm-x86`` loads only the named entry points (plus built-ins).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import sys
import threading
import types

import pluggy

from nnvm import environment, hookspecs
from nnvm.errors import Error

# The core's own plugins: registered through the same hooks as anyone else's.
BUILTIN_PLUGINS = {
    "nnvm-std-ops": "nnvm.ops.plugin",
    "nnvm-std-passes": "nnvm.passes.plugin",
    "nnvm-gpu-schedules": "nnvm.gpu.plugin",
    "nnvm-cpu-schedules": "nnvm.cpu.plugin",
}

_lock = threading.RLock()
_state: dict = {}


def _make_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager("nnvm")
    pm.add_hookspecs(hookspecs)
    for name, module in BUILTIN_PLUGINS.items():
        pm.register(importlib.import_module(module), name=name)
    if not environment.plugin_autoload():
        return pm
    allowed = environment.plugin_allow_list()
    for ep in md.entry_points(group="nnvm"):
        if ep.name in BUILTIN_PLUGINS or pm.get_plugin(ep.name) is not None:
            continue
        if allowed is not None and ep.name not in allowed:
            continue
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken plugin must not take the compiler down with it
            raise Error(f"plugin {ep.name!r} ({ep.value}) failed to import: {exc}") from exc
        pm.register(plugin, name=ep.name)
        dist = getattr(ep, "dist", None)
        _state.setdefault("dists", {})[ep.name] = (dist.name, dist.version) if dist else ("?", "?")
    pm.check_pending()
    return pm


def manager() -> pluggy.PluginManager:
    with _lock:
        if "pm" not in _state:
            _state.setdefault("dists", {})
            _state["pm"] = _make_manager()
        return _state["pm"]


def reset() -> None:
    """Forget loaded plugins (tests use this after changing the environment variables)."""
    with _lock:
        _state.clear()


def _collect(hook_name: str) -> list[tuple[str, object]]:
    pm = manager()
    items: list = []
    hook = getattr(pm.hook, hook_name)
    for impl in hook.get_hookimpls():
        owner = pm.get_name(impl.plugin) or "?"
        impl.function(register=lambda obj, _o=owner: items.append((_o, obj)))
    return items


class OpRegistry:
    """All registered operators (``nnvm.ops.registry.OpDef``), by name; registering the same name twice is
    an error naming both owners. Here, with the other registries, so the operator module needs the plugin
    manager and not the other way round."""

    def __init__(self):
        self._ops: dict = {}
        self._owner: dict[str, str] = {}

    def register(self, opdef, owner: str = "?") -> None:
        if opdef.name in self._ops:
            first = self._owner[opdef.name]
            raise Error(f"operator {opdef.name!r} is registered twice (by {first} and {owner})")
        self._ops[opdef.name] = opdef
        self._owner[opdef.name] = owner

    def get(self, name: str, node: str | None = None):
        try:
            return self._ops[name]
        except KeyError:
            where = f"node {node}: " if node else ""
            raise Error(f"{where}unknown operator {name!r}; no installed operator set provides it") from None

    def names(self) -> list[str]:
        return sorted(self._ops)

    def owner(self, name: str) -> str:
        return self._owner.get(name, "?")

    def __contains__(self, name: str) -> bool:
        return name in self._ops


def op_registry() -> OpRegistry:
    """Every operator the loaded plugins register (``nnvm_register_ops``), built once."""
    with _lock:
        if "ops" not in _state:
            reg = OpRegistry()
            for owner, opdef in _collect("nnvm_register_ops"):
                reg.register(opdef, owner)
            _state["ops"] = reg
        return _state["ops"]


def _named(kind: str, hook_name: str, key, check=None) -> dict:
    with _lock:
        if kind not in _state:
            found: dict = {}
            for owner, obj in _collect(hook_name):
                if check is not None:
                    check(owner, obj)
                for name in key(obj):
                    if name in found:
                        raise Error(f"{kind} {name!r} is registered twice (by {found[name][0]} and {owner})")
                    found[name] = (owner, obj)
            _state[kind] = found
        return _state[kind]


def frontends() -> dict:
    """frontend name -> (plugin name, Frontend)."""
    return _named("frontends", "nnvm_register_frontends", lambda f: [f.name])


def backends() -> dict:
    """target kind -> (plugin name, Backend)."""
    return _named("backends", "nnvm_register_backends", lambda b: list(b.target_kinds), _check_backend)


def _check_backend(owner: str, backend) -> None:
    """A backend declares its target facts (``Backend.keys``, ``Backend.device``): the core derives what a
    target is from them, and guessing would hand a new GPU the CPU schedules."""
    what = f"backend {getattr(backend, 'name', '?')!r} of plugin {owner} ({type(backend).__name__})"
    keys = getattr(backend, "keys", ())
    if not isinstance(keys, tuple) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise Error(f"{what} declares no target keys: set keys = ('cpu',) or ('gpu',) on its class, so the "
                    "shared schedule layers know which targets it serves")
    if getattr(backend, "device", None) not in ("cpu", "gpu"):
        raise Error(f"{what} declares no device: set device = 'cpu' or 'gpu' on its class")


def passes() -> dict:
    """pass name -> (plugin name, Pass)."""
    return _named("passes", "nnvm_register_passes", lambda p: [p.name])


def commands() -> dict:
    """subcommand name -> (plugin name, ``nnvm.cli.Command``)."""
    return _named("commands", "nnvm_register_commands", lambda c: [c.name])


def hook():
    return manager().hook


def distribution_of(plugin_name: str) -> tuple[str, str]:
    manager()
    if plugin_name in BUILTIN_PLUGINS:
        try:
            return ("nnvm", md.version("nnvm"))
        except md.PackageNotFoundError:
            return ("nnvm", "?")
    return _state.get("dists", {}).get(plugin_name, ("?", "?"))


class _CallableModule(types.ModuleType):
    """``import nnvm.plugins`` rebinds ``nnvm.plugins`` to this module; keep ``nnvm.plugins()`` working."""

    def __call__(self) -> dict:
        return summary()


sys.modules[__name__].__class__ = _CallableModule


def summary() -> dict:
    """What ``nnvm.plugins()`` returns: per kind, the registered names with their plugin and distribution."""

    def rows(items: dict) -> list:
        out = []
        for name, (owner, _) in sorted(items.items()):
            dist, version = distribution_of(owner)
            out.append({"name": name, "plugin": owner, "distribution": dist, "version": version})
        return out

    reg = op_registry()
    ops = {}
    for name in reg.names():
        ops[name] = (reg.owner(name), None)
    return {
        "frontend": rows(frontends()),
        "backend": rows(backends()),
        "pass": rows(passes()),
        "op": rows(ops),
    }

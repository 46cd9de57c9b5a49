"""Registers the GPU schedule templates for the target key ``gpu`` through the same hook any plugin uses.

``trylast``: a language plugin's own answer for its target kind (``target.kind == "cuda"``) wins; these
serve every ``gpu`` target that has none, so a new GPU backend gets blocks and threads on day one.
"""

from nnvm.gpu import block_schedules
from nnvm.hookspecs import hookimpl


@hookimpl(trylast=True)
def nnvm_schedule_template(target, group):
    if "gpu" not in getattr(target, "keys", ()):
        return None
    return block_schedules.group_template(group, target=target)  # through the module: tests spy on it

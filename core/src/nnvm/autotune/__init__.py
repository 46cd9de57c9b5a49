"""Schedules with knobs, and the search that picks the knobs (the auto-tuner).

A backend offers a ``ScheduleTemplate`` for a fused group through the ``nnvm_schedule_template`` hook:
the knobs it has (tile sizes, unroll, vector width, loop order, layout block), a fallback config that is
already good, and a function that turns one config into a ``te.Schedule``. The compiler applies the
best config a tuning log holds for the group's workload, else the fallback.

    tasks = nnvm.autotune.extract_tasks("resnet18.onnx", target="llvm")   # one per distinct workload
    nnvm.autotune.tune(tasks, trials=64, log="tune.jsonl", tuner="xgb")    # appends measurements
    mod = nnvm.compile("resnet18.onnx", target="llvm", tuning_log="tune.jsonl")

Parts: ``task`` (tasks from a model or a template factory), ``measure`` (timing candidates in a child
process), ``tuner`` (grid, random, cost-model-guided), ``driver`` (the loop, the progress line,
resuming), ``log`` (the JSON-lines log and the best-config lookup), ``signature`` (what decides a
schedule on a CPU, so logs serve every CPU they fit; docs/tuning.md), ``testing`` (example templates).
"""

from nnvm.autotune.driver import TaskSummary, tune
from nnvm.autotune.log import Record, TuningLogs
from nnvm.autotune.measure import Measurer
from nnvm.autotune.signature import CPUSignature
from nnvm.autotune.task import Task, extract_tasks, task_from_factory
from nnvm.autotune.template import ScheduleTemplate
from nnvm.autotune.tuner import TUNERS, make_tuner

__all__ = ["CPUSignature", "ScheduleTemplate", "Task", "TaskSummary", "Measurer", "Record", "TuningLogs",
           "TUNERS", "extract_tasks", "make_tuner", "task_from_factory", "tune"]

"""The tuning loop: for each task, batches from a tuner, measured in a child process, appended to the log.

Resuming is reading the log back: configs it already holds for a task (same template, workload and
target) are fed to the tuner as measured and count toward the task's trial budget, so rerunning an
interrupted ``nnvm tune`` measures only what is missing, and rerunning a finished one measures nothing.
The first config measured for a task is the template's fallback, so the log always tells how much
tuning gained over the untuned schedule. Every record carries the CPU signature of the machine that
measured it (``Backend.cpu_signature``), so a log tuned on one machine serves every machine of the same
signature (and the nearest ones); records of another machine are not resumed from.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import nnvm.autotune.log as logmod
from nnvm.autotune.measure import Measurer
from nnvm.autotune.tuner import make_tuner
from nnvm.errors import Error
from nnvm.target import parse_target


@dataclass
class TaskSummary:
    """What tuning one task found (``best_config`` None when nothing ran without error)."""

    label: str
    template: str
    weight: int
    trials: int  # configs in the log for this task, resumed ones included
    measured: int  # configs measured by this run
    errors: int
    best_seconds: float | None = None
    best_gflops: float | None = None
    best_config: dict | None = None
    fallback_seconds: float | None = None
    records: list = field(default_factory=list, repr=False)


class Progress:
    """One status line on stderr, redrawn in place on a terminal; plain lines otherwise."""

    def __init__(self, stream=None, enabled: bool = True):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def update(self, head: str, done: int, total: int, best: float | None) -> None:
        if not self.enabled or not self.tty:
            return
        width = 24
        filled = width * done // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        best_text = f"best {best:.1f} GFLOP/s" if best else "best -"
        self.stream.write(f"\r{head} |{bar}| {done}/{total} {best_text}\x1b[K")
        self.stream.flush()

    def line(self, text: str) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self.stream.flush()


def _gflops(task, seconds: float | None) -> float | None:
    return task.flops / seconds / 1e9 if seconds and task.flops else None


def _same_task(task, r: logmod.Record, signature) -> bool:
    """A record of this task measured here (a record without signature: from before signatures)."""
    return (r.template == task.template and r.workload == task.workload and r.target == task.target
            and r.revision == task.revision
            and (r.signature is None or signature is None or r.signature.key() == signature.key()))


def signature_of(target: str):
    """The CPU signature of the target as measured on this machine: the backend's, marked ``emulated``
    when this host runs the target's code only under an emulator (None when the backend gives none, or
    when no installed backend builds the target: tasks made by hand for a measurer that needs none)."""
    try:
        parsed = parse_target(target)
        parsed.backend.check_target(parsed)
    except Error:
        return None
    sig = getattr(parsed.backend, "cpu_signature", lambda _target: None)(parsed)
    if sig is not None and not parsed.backend.host_can_run(parsed):
        sig = dataclasses.replace(sig, emulated=True)
    return sig


def tune(tasks: list, trials: int, log: str | os.PathLike, tuner: str = "xgb",
         measurer: Measurer | None = None, batch_size: int = 8, progress: bool = True, seed: int = 0,
         stream=None) -> list[TaskSummary]:
    """Tune every task with up to ``trials`` configs each (fewer when its space is smaller), appending
    each measurement to ``log``; returns one summary per task."""
    if trials < 1:
        raise Error(f"--trials must be at least 1, got {trials}")
    if batch_size < 1:
        raise Error(f"the batch size must be at least 1, got {batch_size}")
    previous = logmod.read(log) if os.path.exists(log) else []
    show = Progress(stream, progress)
    own = measurer is None
    measurer = measurer or Measurer()
    summaries = []
    started = time.perf_counter()
    history: dict = {}  # (template, knobs) -> (features, normalized scores) of the tasks tuned so far
    signatures: dict = {}  # target text -> CPUSignature (or None)
    try:
        for number, task in enumerate(tasks, 1):
            if task.target not in signatures:  # a cluster's measurer knows its device nodes' signature
                signatures[task.target] = getattr(measurer, "signature", signature_of)(task.target)
            sig = signatures[task.target]
            summaries.append(_tune_task(task, trials, log, tuner, measurer, batch_size, seed, show,
                                        [r for r in previous if _same_task(task, r, sig)],
                                        f"[task {number:2d}/{len(tasks)}]", history, sig))
    finally:
        if own:
            measurer.close()
    show.line(f"tuned {len(tasks)} task(s) in {time.perf_counter() - started:.0f} s; log: {os.fspath(log)}")
    return summaries


def _tune_task(task, trials, log, tuner_kind, measurer, batch_size, seed, show, previous,
               head, history, signature=None) -> TaskSummary:
    family = (task.template, tuple(task.space))
    tuner = make_tuner(tuner_kind, task.space, seed, prior=history.get(family))
    budget = min(trials, task.size())
    best: logmod.Record | None = None
    fallback_seconds = None
    records: list = []
    seen: set = set()
    for r in previous:  # resume: what the log holds counts as measured
        idx = tuner.index(r.config)
        if idx is None or idx in seen:
            continue
        seen.add(idx)
        tuner.update([r.config], [1.0 / r.seconds if r.ok else 0.0])
        records.append(r)
    measured = 0
    fallback = tuner.index(task.fallback)
    first = [dict(task.fallback)] if fallback not in seen else []
    while len(seen) < budget and tuner.has_next():
        want = min(batch_size, budget - len(seen))
        proposed = [c for c in tuner.next_batch(want) if tuner.index(c) not in seen]
        batch = (first + [c for c in proposed if tuner.index(c) != fallback])[:want]
        first = []
        if not batch:
            break
        results = measurer.measure(task, batch)
        fresh = [logmod.Record(task.target, task.template, task.workload, c, res.seconds,
                               _gflops(task, res.seconds), res.error, logmod.now(), task.label,
                               res.signature or signature, task.revision, res.node)
                 for c, res in zip(batch, results)]
        logmod.append(log, fresh)
        tuner.update(batch, [1.0 / r.seconds if r.ok else 0.0 for r in fresh])
        seen.update(tuner.index(c) for c in batch)
        records += fresh
        measured += len(fresh)
        ok = [r for r in records if r.ok]
        best = min(ok, key=lambda r: r.seconds) if ok else None
        show.update(f"{head} {task.label[:28]:28s}", len(seen), budget, best.gflops if best else None)
    ok = [r for r in records if r.ok]
    best = min(ok, key=lambda r: r.seconds) if ok else None
    mine = tuner.normalized_history() if hasattr(tuner, "normalized_history") else None
    if mine is not None:
        old = history.get(family)
        if old is None or old[0].shape[1] == mine[0].shape[1]:  # same feature layout
            history[family] = mine if old is None else (np.concatenate([old[0], mine[0]]),
                                                        np.concatenate([old[1], mine[1]]))
    for r in records:
        if r.ok and logmod.config_key(r.config) == logmod.config_key(task.fallback):
            fallback_seconds = r.seconds
    errors = sum(1 for r in records if not r.ok)
    summary = TaskSummary(task.label, task.template, task.weight, len(records), measured, errors,
                          best.seconds if best else None, best.gflops if best else None,
                          dict(best.config) if best else None, fallback_seconds, records)
    show.line(format_summary(head, task, summary))
    return summary


def format_summary(head: str, task, s: TaskSummary) -> str:
    """One line per task: label, weight, trials, best GFLOP/s and time, and the gain over the fallback."""
    if s.best_seconds is None:
        return f"{head} {task.label} (x{task.weight}): {s.trials} trials, no config ran ({s.errors} errors)"
    gf = f"{s.best_gflops:.1f} GFLOP/s, " if s.best_gflops else ""
    gain = f", {s.fallback_seconds / s.best_seconds:.2f}x the fallback" if s.fallback_seconds else ""
    errs = f", {s.errors} errors" if s.errors else ""
    return (f"{head} {task.label} (x{task.weight}): {s.trials} trials, best {gf}"
            f"{1e3 * s.best_seconds:.3f} ms{gain}{errs}")

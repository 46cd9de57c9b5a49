"""Tuning logs: one JSON line per measurement, appended as the tuner goes, read back by the compiler.

A line holds ``target`` (the target text), ``template`` (the template's name), ``workload`` (the
compiler's workload key of the fused group), ``config`` (one value per knob), ``seconds`` (median time
of one run, null on error), ``gflops``, ``error`` (null, or one sentence), ``timestamp`` (UTC, ISO
8601), ``label`` (a short readable name of the task) and, since logs transfer between machines,
``signature``: the ``CPUSignature`` of the machine that measured it (``signature.py``; optional, so
logs written before it still read, and readers that predate it ignore it: the format version stays 1).
Appending line by line keeps a log that an interrupted run wrote usable, and makes resuming a matter of
reading it back.

The compiler looks up the fastest error-free config of a (template, workload, target kind) among the
records whose signature fits the target's (``TuningLogs``): an exact signature match beats a nearest
one; among equals the first log decides, so a user's log overrides the logs the backend ships. A
workload nobody tuned borrows the config of the same workload tuned at the nearest other batch size
(logs are mostly tuned at batch 1, servers run batches), when the template's space holds it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
from dataclasses import dataclass

from nnvm.autotune.signature import CPUSignature
from nnvm.errors import Error

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Record:
    """One measurement of one config."""

    target: str
    template: str
    workload: str
    config: dict
    seconds: float | None
    gflops: float | None = None
    error: str | None = None
    timestamp: str = ""
    label: str = ""
    signature: CPUSignature | None = None  # the measuring machine's; None in logs that predate it
    revision: int = 1  # the template's revision the config was measured with (ScheduleTemplate.revision)
    node: str | None = None  # the cluster node that measured it (``nnvm tune --cluster``); None locally

    @property
    def ok(self) -> bool:
        return self.error is None and self.seconds is not None and self.seconds > 0

    def to_json(self) -> str:
        d = {"version": FORMAT_VERSION, "target": self.target, "template": self.template,
             "workload": self.workload, "config": self.config, "seconds": self.seconds, "gflops": self.gflops,
             "error": self.error, "timestamp": self.timestamp or now(), "label": self.label}
        if self.signature is not None:
            d["signature"] = self.signature.to_dict()
        if self.revision != 1:
            d["revision"] = self.revision
        if self.node is not None:
            d["node"] = self.node
        return json.dumps(d, sort_keys=True)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def config_key(config: dict) -> str:
    """A canonical text for a config, to compare configs read from JSON with those of a space."""
    return json.dumps(config, sort_keys=True)


def append(path: str | os.PathLike, records: list[Record]) -> None:
    """Append records to a log, one line each (the folder is created when missing).

    Append-only and crash-safe: the lines go out in one ``write`` on a file opened for appending, so
    a kill leaves at worst a torn last line, which ``read`` skips; the next append first cuts that
    torn line off (it holds no whole record), so it never glues onto the next record.
    """
    path = os.fspath(path)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    data = "".join(r.to_json() + "\n" for r in records).encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        _cut_torn_line(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)  # one batch at a time: a killed driver (or machine) resumes from what is on disk
    finally:
        os.close(fd)


def _cut_torn_line(fd: int) -> None:
    """End the file at a line boundary: an unfinished last line (no newline: a write that was killed)
    is cut off, a whole record that only lacks its newline (edited by hand) gets one."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = size
    while start > 0:
        start = max(0, start - 65536)
        cut = os.pread(fd, size - start, start).rfind(b"\n")
        if cut >= 0:
            start += cut + 1
            break
    try:
        _record(json.loads(os.pread(fd, size - start, start).decode()))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
        os.ftruncate(fd, start)
        return
    os.write(fd, b"\n")


def _number(d: dict, key: str) -> float | None:
    value = d.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise TypeError(f"{key} must be a number or null, not {type(value).__name__}")
    return value


def _record(d) -> Record:
    if not isinstance(d, dict):
        raise TypeError(f"a JSON {type(d).__name__}, not an object")
    if isinstance(d.get("version"), int) and d["version"] > FORMAT_VERSION:
        raise ValueError(f"written in log format {d['version']}, newer than this nnvm reads "
                         f"({FORMAT_VERSION})")
    if not isinstance(d["config"], dict):
        raise TypeError("config must be an object")
    error = d.get("error")
    if error is not None and not isinstance(error, str):
        raise TypeError("error must be text or null")
    signature = d.get("signature")
    revision = d.get("revision", 1)
    if isinstance(revision, bool) or not isinstance(revision, int):
        raise TypeError(f"revision must be a whole number, not {type(revision).__name__}")
    return Record(str(d["target"]), template_name(str(d["template"])), str(d["workload"]), d["config"],
                  _number(d, "seconds"), _number(d, "gflops"), error, str(d.get("timestamp", "")),
                  str(d.get("label", "")), None if signature is None else CPUSignature.from_dict(signature),
                  revision, None if d.get("node") is None else str(d["node"]))


def template_name(name: str) -> str:
    """A logged template's name as today's templates spell it: the CPU layer's were ``x86.*`` before it
    served every CPU target (``cpu.*``), and logs written then, shipped ones too, still apply."""
    return "cpu." + name[4:] if name.startswith("x86.") else name


def read(path: str | os.PathLike) -> list[Record]:
    """Every record of a log; a missing file is an error, a truncated last line (interrupted write)
    is skipped, any other unreadable line is an error naming the file and line."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise Error(f"tuning log {path}: no such file") from None
    except IsADirectoryError:
        raise Error(f"tuning log {path} is a folder, not a file") from None
    except OSError as exc:
        raise Error(f"tuning log {path} cannot be read ({exc.strerror or exc})") from None
    lines = data.split(b"\n")
    torn = lines.pop() if lines else b""  # after the last newline: empty, or a line cut off mid-write
    records = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            records.append(_record(json.loads(raw.decode())))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as exc:
            what = f"{type(exc).__name__} {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
            raise Error(f"tuning log {path}, line {number}: not a tuning record ({what})") from None
    if torn.strip():
        try:
            records.append(_record(json.loads(torn.decode())))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
            pass  # the last line of a run that was killed while writing it
    return records


def _kind(target: str) -> str:
    return str(target).split(" ", 1)[0]


def _mcpu(target: str) -> str | None:
    for word in str(target).split()[1:]:
        if word.startswith("-mcpu="):
            return word[len("-mcpu="):]
    return None


@dataclass(frozen=True)
class Choice:
    """Which log served a kernel and why: ``match`` is ``exact`` (same signature), ``nearest``
    (``distance`` > 0), ``cpu name`` (a record without signature, for this CPU model), ``unsigned`` (a
    user's record without signature: trusted as before signatures existed) or ``unchecked`` (the
    target's backend gives no signature)."""

    record: Record
    path: str
    shipped: bool
    match: str
    distance: float = 0.0
    batch: int | None = None  # the batch size the record was tuned at, when it is not the kernel's

    def reason(self) -> str:
        origin = "shipped" if self.shipped else "given"
        how = f"nearest, distance {self.distance:.2f}" if self.match == "nearest" else self.match
        if self.batch is not None:
            how += f"; tuned at batch {self.batch}"
        return f"{self.path} ({origin}; {how})"


def batch_free(workload: str) -> tuple[str, tuple] | None:
    """``(key, leading)``: the workload with the leading dimension of every input from outside the group
    blanked, and those dimensions in order; None for a workload that is not the compiler's JSON."""
    try:
        items = json.loads(workload)
        leading = []
        for item in items:
            for entry in item[1]:
                if isinstance(entry, list) and len(entry) >= 2 and entry[0] == "in" and entry[1]:
                    leading.append(entry[1][0])
                    entry[1][0] = "?"
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    return json.dumps(items, sort_keys=True), tuple(leading)


def batch_change(stored: tuple, wanted: tuple) -> tuple[int, int] | None:
    """``(stored batch, wanted batch)`` when two workloads of one ``batch_free`` key differ in exactly one
    leading size (every input whose leading size differs goes from the same b to the same b'), else None.
    Weights keep their leading size, so they drop out."""
    changes = {(a, b) for a, b in zip(stored, wanted, strict=True) if a != b}
    if len(changes) != 1:
        return None
    (a, b), = changes
    return (a, b) if isinstance(a, int) and isinstance(b, int) and a > 0 and b > 0 else None


class TuningLogs:
    """The best configs of one or more logs, for the compiler: ``choose(template, workload, target)``.

    ``paths`` are the user's logs, ``shipped`` the backend's (consulted after them), ``signature`` the
    target's ``CPUSignature`` (None: every record fits, as before signatures). A record fits when its
    signature matches exactly or is near (``CPUSignature.distance`` is not None); a record without one
    fits only the CPU its target names (``-mcpu``, or a shipped log's file name ``<cpu>.jsonl``), and
    from a user's log (plain ``llvm``) it fits as before. Order of preference: exact before nearest,
    then the user's logs before the shipped ones, then the smaller distance, then the first log, then
    the exact target text, then the fastest.
    """

    def __init__(self, paths=(), signature: CPUSignature | None = None, shipped=()):
        given = [os.fspath(p) for p in paths]
        self.paths = given + [os.fspath(p) for p in shipped if os.fspath(p) not in given]
        self.shipped = frozenset(self.paths[len(given):])
        self.signature = signature
        # (template, workload, target kind) -> {rank of the log: {(target text, signature): best Record}}
        self._best: dict = {}
        self._fit: dict = {}  # (rank, signature or target text) -> (class, distance, match) or refusal text
        self.served: dict = {}  # path -> number of lookups it answered (for ``summary``)
        # (template, batch-free key, target kind) -> {workload: its leading sizes}: the other batch sizes
        self._batches: dict = {}
        for rank, path in enumerate(self.paths):
            for r in read(path):
                if not r.ok:
                    continue
                free = batch_free(r.workload)
                if free is not None:
                    same = self._batches.setdefault((r.template, free[0], _kind(r.target)), {})
                    same[r.workload] = free[1]
                per_log = self._best.setdefault((r.template, r.workload, _kind(r.target)), {})
                slot = per_log.setdefault(rank, {})
                key = (r.target, r.signature, r.revision)  # a stale revision never shadows a current one
                old = slot.get(key)
                if old is None or r.seconds < old.seconds:
                    slot[key] = r

    def __len__(self) -> int:
        return len(self._best)

    def _classify(self, rank: int, r: Record):
        """(class, distance, match) of a record here (class 0 is as good as exact), or the reason text
        why it does not fit."""
        cache_key = (rank, r.signature if r.signature is not None else r.target)
        if cache_key in self._fit:
            return self._fit[cache_key]
        sig = self.signature
        if sig is None:
            fit = (0, 0.0, "unchecked")
        elif r.signature is None:
            path = self.paths[rank]
            cpu = _mcpu(r.target) or (os.path.splitext(os.path.basename(path))[0] if path in self.shipped
                                      else None)
            if cpu is None:
                fit = (0, 0.0, "unsigned")
            else:
                fit = (0, 0.0, "cpu name") if cpu == sig.cpu else f"no signature, tuned for {cpu}"
        else:
            d = sig.distance(r.signature)
            if d is None:
                fit = f"tuned with {sig.refusal(r.signature)}"
            else:
                fit = (0, 0.0, "exact") if d == 0 else (1, d, "nearest")
        self._fit[cache_key] = fit
        return fit

    def candidates(self, template: str, workload: str, target) -> list[Choice]:
        """Every fitting record's best of this template and workload, most preferred first."""
        per_log = self._best.get((template, workload, _kind(str(target))))
        if not per_log:
            return []
        ranked = []
        for rank, slot in per_log.items():
            for r in slot.values():
                fit = self._classify(rank, r)
                if isinstance(fit, str):
                    continue
                cls, distance, match = fit
                path = self.paths[rank] if rank < len(self.paths) else ""
                shipped = path in self.shipped
                order = (cls, shipped, distance, rank, r.target != str(target), r.seconds)
                ranked.append((order, Choice(r, path, shipped, match, distance)))
        ranked.sort(key=lambda item: item[0])
        return [c for _, c in ranked]

    def best(self, template: str, workload: str, target) -> Record | None:
        """The preferred record for this template and workload on ``target``, or None."""
        found = self.candidates(template, workload, target)
        return found[0].record if found else None

    def other_batches(self, template: str, workload: str, target) -> list[tuple[str, int]]:
        """``(workload, its batch)`` of the logged workloads that are ``workload`` at another batch size,
        nearest batch first (by ratio; the larger of two equally near, whose schedule has the work to
        split already)."""
        free = batch_free(workload)
        if free is None:
            return []
        key, wanted = free
        found = []
        for other, leading in self._batches.get((template, key, _kind(str(target))), {}).items():
            change = batch_change(leading, wanted) if len(leading) == len(wanted) else None
            if change is not None:
                found.append((abs(math.log(change[0] / change[1])), -change[0], other, change[0]))
        return [(other, batch) for *_, other, batch in sorted(found)]

    def choose(self, template, workload: str, target) -> tuple[dict | None, Choice | None]:
        """The config of ``template`` (a ``ScheduleTemplate``) from the most preferred fitting record
        whose config is in the template's space and whose revision is the template's (a config the
        target cannot build, such as one sized for wider vectors, or a stale one whose knobs or code
        since changed, is passed over), and its ``Choice``;
        else the same from the workload tuned at the nearest other batch size (``Choice.batch``; a knob
        that only this batch size has takes the fallback's value); ``(None, None)`` when no log has one."""
        def workloads():  # this workload, then (only if it has nothing in the space) its other batches
            yield workload, None
            yield from self.other_batches(template.name, workload, target)

        for wanted, batch in workloads():
            for choice in self.candidates(template.name, wanted, target):
                if choice.record.revision != getattr(template, "revision", 1):
                    continue  # measured on another revision of the template's code: stale
                config = choice.record.config
                if batch is not None:  # knobs only this batch size has (batch-parallel ...): its fallback's
                    config = {**{k: v for k, v in template.fallback.items() if k not in config}, **config}
                config = match_config(template.space, config)
                if config is not None:
                    self.served[choice.path] = self.served.get(choice.path, 0) + 1
                    return config, choice if batch is None else dataclasses.replace(choice, batch=batch)
        return None, None

    def config_for(self, template, workload: str, target) -> dict | None:
        """The best logged config of ``template`` still in its space; None when the logs have nothing
        that fits (see ``choose``)."""
        return self.choose(template, workload, target)[0]

    def summary(self) -> list[dict]:
        """One entry per log, for ``mod.stats()["tuning"]``: its path, ``shipped``, how its records'
        machines match this target (``exact``, ``nearest (distance 1.58)``, ``refused: ...``, one per
        distinct signature) and how many kernels it served."""
        out = []
        for rank, path in enumerate(self.paths):
            matches: dict = {}
            for per_log in self._best.values():
                for r in per_log.get(rank, {}).values():
                    fit = self._classify(rank, r)
                    if isinstance(fit, str):
                        text = f"refused: {fit}"
                    else:
                        text = f"nearest (distance {fit[1]:.2f})" if fit[2] == "nearest" else fit[2]
                    who = r.signature.describe() if r.signature is not None else r.target
                    matches.setdefault(f"{text} [{who}]", None)
            out.append({"path": path, "shipped": path in self.shipped, "matches": list(matches),
                        "kernels": self.served.get(path, 0)})
        return out


def match_config(space: dict, config: dict) -> dict | None:
    """``config`` (read from JSON, where tuples became lists) as the space's own candidate values, or
    None when a knob is missing, unknown or holds a value that is not a candidate."""
    if set(config) != set(space):
        return None
    out = {}
    for knob, value in config.items():
        text = json.dumps(value, sort_keys=True)
        found = [c for c in space[knob] if json.dumps(c, sort_keys=True) == text]
        if not found:
            return None
        out[knob] = found[0]
    return out


def distill(paths, out: str | os.PathLike) -> int:
    """Write the best error-free record of every (template, workload, target, signature) in ``paths``
    to ``out`` (what the backends ship: one line per workload and machine); returns the line count."""
    best: dict = {}
    for path in paths:
        for r in read(path):
            key = (r.template, r.workload, r.target, r.signature, r.revision)
            if r.signature is not None and r.signature.emulated:
                continue  # an emulator's times are never shipped
            if r.ok and (key not in best or r.seconds < best[key].seconds):
                best[key] = r
    if os.path.exists(out):
        os.remove(out)
    records = sorted(best.values(), key=lambda r: (r.template, r.label, r.workload))
    append(out, records)
    return len(records)

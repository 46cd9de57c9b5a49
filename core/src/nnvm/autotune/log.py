"""Tuning logs: one JSON line per measurement, appended as the tuner goes, read back by the compiler.

A line holds ``target`` (the target text), ``template`` (the template's name), ``workload`` (the
compiler's workload key of the fused group), ``config`` (one value per knob), ``seconds`` (median time
of one run, null on error), ``gflops``, ``error`` (null, or one sentence), ``timestamp`` (UTC, ISO
8601) and ``label`` (a short readable name of the task). Appending line by line keeps a log that an
interrupted run wrote usable, and makes resuming a matter of reading it back.

The compiler looks up the fastest error-free config of a (template, workload, target kind): several
logs may be given, and the first log that knows a workload decides it, so a user's log overrides
the logs the backend ships for the host CPU.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass

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

    @property
    def ok(self) -> bool:
        return self.error is None and self.seconds is not None and self.seconds > 0

    def to_json(self) -> str:
        return json.dumps({"version": FORMAT_VERSION, "target": self.target, "template": self.template,
                           "workload": self.workload, "config": self.config, "seconds": self.seconds,
                           "gflops": self.gflops, "error": self.error,
                           "timestamp": self.timestamp or now(), "label": self.label}, sort_keys=True)


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
    return Record(str(d["target"]), str(d["template"]), str(d["workload"]), d["config"],
                  _number(d, "seconds"), _number(d, "gflops"), error, str(d.get("timestamp", "")),
                  str(d.get("label", "")))


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


class TuningLogs:
    """The best configs of one or more logs, for the compiler: ``best(template, workload, target)``.

    Logs are read once, in order; for a workload, the first log that has an error-free record of it
    decides (records for the exact target text are preferred over those for the same target kind).
    """

    def __init__(self, paths=()):
        self.paths = [os.fspath(p) for p in paths]
        # (template, workload, target kind) -> list (one per log) of {target text: best Record}
        self._best: dict = {}
        for rank, path in enumerate(self.paths):
            for r in read(path):
                if not r.ok:
                    continue
                per_log = self._best.setdefault((r.template, r.workload, _kind(r.target)), {})
                slot = per_log.setdefault(rank, {})
                old = slot.get(r.target)
                if old is None or r.seconds < old.seconds:
                    slot[r.target] = r

    def __len__(self) -> int:
        return len(self._best)

    def best(self, template: str, workload: str, target) -> Record | None:
        """The fastest record for this template and workload on ``target``, or None."""
        per_log = self._best.get((template, workload, _kind(str(target))))
        if not per_log:
            return None
        slot = per_log[min(per_log)]
        exact = slot.get(str(target))
        return exact if exact is not None else min(slot.values(), key=lambda r: r.seconds)

    def config_for(self, template, workload: str, target) -> dict | None:
        """The best logged config of ``template`` (a ``ScheduleTemplate``) if it is still in the
        template's space; None when the logs have nothing or only stale configs (knobs since changed)."""
        rec = self.best(template.name, workload, target)
        if rec is None:
            return None
        return match_config(template.space, rec.config)


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
    """Write the best error-free record of every (template, workload, target) in ``paths`` to ``out``
    (what the backends ship: one line per workload); returns the number of lines written."""
    best: dict = {}
    for path in paths:
        for r in read(path):
            key = (r.template, r.workload, r.target)
            if r.ok and (key not in best or r.seconds < best[key].seconds):
                best[key] = r
    if os.path.exists(out):
        os.remove(out)
    records = sorted(best.values(), key=lambda r: (r.template, r.label, r.workload))
    append(out, records)
    return len(records)

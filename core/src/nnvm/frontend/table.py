"""The converter table: which function converts which source operator, per format version.

A frontend keeps one ``ConverterTable`` and fills it from its ``convert_*`` modules with the
``register`` decorator. Formats with operator versions (ONNX opsets) register a converter for a range
of versions (``since``/``until``); formats without versions (MXNet, Keras) leave both out.
"""

from __future__ import annotations

from collections.abc import Callable


class ConverterTable:
    """Source operator name -> converter ``fn(ctx, inputs) -> value | list of values``."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self._entries: dict[str, list[tuple[int, int | None, Callable]]] = {}

    def register(self, *ops: str, since: int = 0, until: int | None = None):
        """Decorator: ``fn`` converts each of ``ops`` for format versions ``since`` to ``until``
        (inclusive; ``None`` for no upper bound). Overlapping ranges for one operator are a bug."""

        def wrap(fn):
            for op in ops:
                entries = self._entries.setdefault(op, [])
                for lo, hi, _ in entries:
                    if (until is None or lo <= until) and (hi is None or since <= hi):
                        raise RuntimeError(f"{self.fmt} converter for {op} is defined twice "
                                           f"(versions {lo}..{hi} and {since}..{until})")
                entries.append((since, until, fn))
            return fn

        return wrap

    def lookup(self, op: str, version: int | None = None) -> Callable | None:
        """The converter of ``op`` at format ``version`` (``None``: the newest), or None."""
        entries = self._entries.get(op, ())
        if version is None:
            return max(entries, key=lambda e: e[0])[2] if entries else None
        for lo, hi, fn in entries:
            if lo <= version and (hi is None or version <= hi):
                return fn
        return None

    def supports(self, op: str, version: int | None = None) -> bool:
        return self.lookup(op, version) is not None

    def __contains__(self, op: str) -> bool:
        return op in self._entries

    def __getitem__(self, op: str) -> Callable:
        fn = self.lookup(op)
        if fn is None:
            raise KeyError(op)
        return fn

    def __iter__(self):
        return iter(sorted(self._entries))

    def keys(self) -> list[str]:
        return sorted(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

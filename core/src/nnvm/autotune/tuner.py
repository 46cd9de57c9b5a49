"""Search strategies over a template's space: grid, random, and model-guided (``xgb``).

A tuner proposes batches of configs it has not seen (``next_batch``) and learns from the results
(``update``, with a score per config: runs per second, 0 for an error). Configs are handled as tuples
of candidate indices, one per knob, so any JSON-able candidate values work.

The model-guided tuner follows TVM's XGBTuner: after a first batch of random configs it fits a cost
model, gradient-boosted regression trees (scikit-learn's ``HistGradientBoostingRegressor``), from
config features to the measured score, then picks the next batch as the configs the model rates
best among those not measured yet: over the whole space when it is small, else by simulated annealing
(parallel chains that change one knob at a time, accepting worse moves with a probability that
shrinks as the temperature falls). A share of each batch stays random so a wrong model cannot trap the
search.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from nnvm.autotune.log import match_config
from nnvm.errors import Error

EXHAUSTIVE_LIMIT = 50_000  # spaces up to this size are ranked whole by the cost model


class Tuner:
    """The shared bookkeeping: the space as index tuples, what was measured, the best so far."""

    def __init__(self, space: dict, seed: int = 0):
        self.knobs = list(space)
        self.space = space
        self.radix = [len(space[k]) for k in self.knobs]
        self.size = math.prod(self.radix)
        self.rng = np.random.default_rng(seed)
        self.visited: set = set()
        self.xs: list = []  # measured index tuples
        self.ys: list = []  # their scores

    # -- conversions ---------------------------------------------------------------------------------
    def config(self, idx) -> dict:
        return {k: self.space[k][i] for k, i in zip(self.knobs, idx)}

    def index(self, config: dict) -> tuple | None:
        """The index tuple of a config (also one read from JSON), or None if it is not in the space."""
        matched = match_config(self.space, config)
        if matched is None:
            return None
        return tuple(next(i for i, c in enumerate(self.space[k]) if c is matched[k])
                     for k in self.knobs)

    def decode(self, flat: int) -> tuple:
        idx = []
        for r in reversed(self.radix):
            flat, i = divmod(flat, r)
            idx.append(i)
        return tuple(reversed(idx))

    # -- the protocol ----------------------------------------------------------------------------------
    def has_next(self) -> bool:
        return len(self.visited) < self.size

    def next_batch(self, n: int) -> list[dict]:
        raise NotImplementedError

    def update(self, configs: list[dict], scores: list[float]) -> None:
        """Record measured configs; ``scores`` are runs per second (higher is better), 0 on error."""
        for config, score in zip(configs, scores):
            idx = self.index(config)
            if idx is None:
                continue
            self.visited.add(idx)
            self.xs.append(idx)
            self.ys.append(float(score))

    def _random_unvisited(self, n: int, taken: set) -> list:
        out: list = []
        if self.size <= EXHAUSTIVE_LIMIT:
            for flat in self.rng.permutation(self.size):
                idx = self.decode(int(flat))
                if idx not in self.visited and idx not in taken:
                    out.append(idx)
                    if len(out) == n:
                        break
            return out
        tries = 0
        while len(out) < n and tries < 100 * n:
            tries += 1
            idx = tuple(int(self.rng.integers(r)) for r in self.radix)
            if idx not in self.visited and idx not in taken and idx not in out:
                out.append(idx)
        return out


class GridTuner(Tuner):
    """Every config in the space's order (knob order, then candidate order)."""

    def __init__(self, space: dict, seed: int = 0):
        super().__init__(space, seed)
        self._order = itertools.product(*(range(r) for r in self.radix))

    def next_batch(self, n: int) -> list[dict]:
        out = []
        for idx in self._order:
            if idx not in self.visited:
                out.append(self.config(idx))
                if len(out) == n:
                    break
        return out


class RandomTuner(Tuner):
    """Configs drawn uniformly at random, never twice."""

    def next_batch(self, n: int) -> list[dict]:
        return [self.config(idx) for idx in self._random_unvisited(n, set())]


def _cost_model():
    try:
        from sklearn.ensemble import HistGradientBoostingRegressor
    except ImportError:
        raise Error("the model-guided tuner (--tuner xgb) needs scikit-learn: pip install 'nnvm[tune]' "
                    "(or use --tuner random or --tuner grid)") from None
    # Small data (tens to hundreds of points): small leaves, few trees, no early stopping.
    return HistGradientBoostingRegressor(max_iter=80, learning_rate=0.15, max_leaf_nodes=15,
                                         min_samples_leaf=2, early_stopping=False, random_state=0)


class ModelTuner(Tuner):
    """Cost-model-guided search (``xgb``): gradient-boosted trees rank unmeasured configs."""

    def __init__(self, space: dict, seed: int = 0, plan_size: int = 8, epsilon: float = 0.15,
                 sa_chains: int = 128, sa_steps: int = 80, prior=None):
        super().__init__(space, seed)
        self.plan_size = plan_size
        self.epsilon = epsilon
        self.sa_chains = sa_chains
        self.sa_steps = sa_steps
        self._encoders = [self._encoder(self.space[k]) for k in self.knobs]
        width = sum(enc.shape[1] for enc in self._encoders)
        # ``prior``: (features, scores normalized per task) of other workloads of the same template; the
        # ranking of knob values carries over between shapes well enough to guide a new task's first batch.
        usable = prior is not None and len(prior[1]) >= plan_size and np.shape(prior[0])[1] == width
        self.prior = prior if usable else None
        _cost_model()  # say now, not after the first batch, when scikit-learn is missing

    @staticmethod
    def _encoder(values: list):
        """Knob candidates as numbers: numbers and bools as they are, equal-length lists of numbers
        element by element, anything else by candidate position."""
        def is_num(v):
            return isinstance(v, bool | int | float)

        if all(is_num(v) for v in values):
            table = [[float(v)] for v in values]
        elif all(isinstance(v, list | tuple) and len(v) == len(values[0]) and all(map(is_num, v))
                 for v in values):
            table = [[float(x) for x in v] for v in values]
        else:
            table = [[float(i)] for i in range(len(values))]
        return np.asarray(table, dtype=np.float64)

    def training_data(self):
        """Features, scores normalized to the best measured, and weights (other tasks' points count half)."""
        parts = []
        if self.xs and max(self.ys) > 0:
            ys = np.asarray(self.ys)
            parts.append((self.features(self.xs), ys / ys.max(), np.ones(len(ys))))
        if self.prior is not None:
            px, py = self.prior
            parts.append((np.asarray(px, dtype=np.float64), np.asarray(py), np.full(len(py), 0.5)))
        return tuple(np.concatenate(p) for p in zip(*parts))

    def normalized_history(self):
        """This task's measurements as (features, scores / best score), to be another task's prior."""
        if not self.xs or max(self.ys) <= 0:
            return None
        ys = np.asarray(self.ys)
        return self.features(self.xs), ys / ys.max()

    def features(self, idxs) -> np.ndarray:
        idxs = np.asarray(idxs, dtype=np.int64).reshape(-1, len(self.knobs))
        return np.concatenate([enc[idxs[:, j]] for j, enc in enumerate(self._encoders)], axis=1)

    def next_batch(self, n: int) -> list[dict]:
        good = sum(1 for y in self.ys if y > 0)
        own_enough = good >= min(self.plan_size, 2) and len(self.xs) >= self.plan_size
        if not own_enough and self.prior is None:
            return [self.config(i) for i in self._random_unvisited(n, set())]
        from threadpoolctl import threadpool_limits

        model = _cost_model()
        xs, ys, weights = self.training_data()
        n_model = max(1, n - int(round(self.epsilon * n)))
        # One thread: the data is tiny, and OpenMP's spinning workers fight the measured kernels
        # (and everything else) for the cores.
        with threadpool_limits(limits=1, user_api="openmp"):
            model.fit(xs, ys, sample_weight=weights)
            picked = self._best_predicted(model, n_model)
        picked += self._random_unvisited(n - len(picked), set(picked))
        return [self.config(i) for i in picked]

    def _best_predicted(self, model, n: int) -> list:
        if self.size <= EXHAUSTIVE_LIMIT:
            idxs = self._decode_many(np.arange(self.size))
            scores = model.predict(self.features(idxs))
            out = []
            for k in np.argsort(-scores):
                idx = tuple(int(i) for i in idxs[k])
                if idx not in self.visited:
                    out.append(idx)
                    if len(out) == n:
                        break
            return out
        return self._anneal(model, n)

    def _decode_many(self, flats: np.ndarray) -> np.ndarray:
        cols = []
        rest = flats.copy()
        for r in reversed(self.radix):
            rest, i = np.divmod(rest, r)
            cols.append(i)
        return np.stack(list(reversed(cols)), axis=1)

    def _anneal(self, model, n: int) -> list:
        """Simulated annealing on the model's predictions; the best ``n`` unmeasured configs it met."""
        radix = np.asarray(self.radix)
        start = [self.xs[k] for k in np.argsort(self.ys)[-self.sa_chains // 4:]]
        rand = [tuple(int(self.rng.integers(r)) for r in self.radix)
                for _ in range(self.sa_chains - len(start))]
        points = np.asarray(start + rand, dtype=np.int64)
        scores = model.predict(self.features(points))
        best: dict = {}
        for step in range(self.sa_steps):
            temp = max(1e-3, 1.0 - step / self.sa_steps)
            moved = points.copy()
            which = self.rng.integers(len(self.knobs), size=len(points))
            moved[np.arange(len(points)), which] = self.rng.integers(radix[which])
            new = model.predict(self.features(moved))
            accept = (new >= scores) | (self.rng.random(len(points)) < np.exp((new - scores) / (0.1 * temp)))
            points[accept], scores[accept] = moved[accept], new[accept]
            for p, s in zip(moved, new):
                idx = tuple(int(i) for i in p)
                if idx not in self.visited and s > best.get(idx, -np.inf):
                    best[idx] = s
        return sorted(best, key=lambda i: -best[i])[:n]


TUNERS = {"xgb": ModelTuner, "random": RandomTuner, "grid": GridTuner}


def make_tuner(kind: str, space: dict, seed: int = 0, prior=None) -> Tuner:
    """A tuner by name: ``xgb`` (model-guided; ``prior``: other tasks' normalized history), ``random``
    or ``grid``."""
    try:
        cls = TUNERS[kind]
    except KeyError:
        raise Error(f"unknown tuner {kind!r}; choose one of {', '.join(TUNERS)}") from None
    return cls(space, seed, prior=prior) if cls is ModelTuner else cls(space, seed)

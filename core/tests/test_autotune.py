"""The tuner's parts that need no backend: logs, best-config lookup, tuners, the resumable loop.

Measurement is replaced by a synthetic one (a known function of the knobs), so these tests check the
search and the bookkeeping exactly; measuring real kernels in child processes is tested end to end in
``tests/test_tune_cli.py``.
"""

from __future__ import annotations

import json

import pytest

import nnvm
from nnvm.autotune import ScheduleTemplate, Task, TuningLogs, make_tuner, tune
from nnvm.autotune import log as logmod
from nnvm.autotune.measure import Result
from nnvm.autotune.tuner import EXHAUSTIVE_LIMIT, GridTuner, ModelTuner, RandomTuner
from nnvm.target import parse_target

SPACE = {"tile_x": [1, 2, 4, 8, 16, 32], "tile_y": [1, 2, 4, 8, 16, 32], "unroll": [False, True],
         "order": ["xy", "yx"], "block": [[1, 1], [2, 4], [4, 8]]}
FALLBACK = {"tile_x": 1, "tile_y": 1, "unroll": False, "order": "xy", "block": [1, 1]}


def synthetic_seconds(config: dict) -> float:
    """A smooth landscape with one optimum: tile_x=8, tile_y=16, unroll, order xy, block [2, 4]."""
    cost = 1.0
    cost += abs(config["tile_x"].bit_length() - 4) * 0.3 + abs(config["tile_y"].bit_length() - 5) * 0.2
    cost += 0.0 if config["unroll"] else 0.25
    cost += 0.0 if config["order"] == "xy" else 0.5
    cost += {1: 0.4, 2: 0.0, 4: 0.2}[config["block"][0]]
    return cost * 1e-3


class FakeMeasurer:
    """Seconds from ``synthetic_seconds``; configs with tile_x == 32 and tile_y == 32 'crash'."""

    def __init__(self):
        self.measured: list = []

    def measure(self, task, configs):
        self.measured += [dict(c) for c in configs]
        return [Result(None, "the measuring process died (signal 11)") if c["tile_x"] == c["tile_y"] == 32
                else Result(synthetic_seconds(c)) for c in configs]


def make_task(space=SPACE, fallback=FALLBACK, workload="wl-1") -> Task:
    return Task("test.template", workload, "llvm", space, fallback, flops=2e6, weight=3, label="synthetic")


def record(config, seconds, workload="wl-1", template="test.template", target="llvm", error=None):
    return logmod.Record(target, template, workload, config, seconds, None, error, logmod.now())


# -- logs -------------------------------------------------------------------------------------------

def test_log_round_trip_keeps_every_field(tmp_path):
    path = tmp_path / "sub" / "log.jsonl"
    recs = [record(FALLBACK, 2e-3), record(dict(FALLBACK, tile_x=8), None, error="timed out after 5 s")]
    logmod.append(path, recs)
    back = logmod.read(path)
    assert [(r.config, r.seconds, r.error, r.workload) for r in back] == \
        [(r.config, r.seconds, r.error, r.workload) for r in recs]
    assert back[0].ok and not back[1].ok
    line = json.loads(path.read_text().splitlines()[0])
    assert set(line) >= {"target", "template", "workload", "config", "seconds", "gflops", "error",
                         "timestamp"}


def test_truncated_last_line_is_skipped_but_a_broken_middle_line_is_an_error(tmp_path):
    path = tmp_path / "log.jsonl"
    logmod.append(path, [record(FALLBACK, 1e-3)])
    with open(path, "a") as f:
        f.write('{"target": "llvm", "templ')  # a run killed while writing
    assert len(logmod.read(path)) == 1
    with open(path, "a") as f:
        f.write("\n" + record(FALLBACK, 2e-3).to_json() + "\n")
    with pytest.raises(nnvm.Error, match=r"line 2: not a tuning record"):
        logmod.read(path)
    with pytest.raises(nnvm.Error, match="no such file"):
        logmod.read(tmp_path / "missing.jsonl")


def template(space=SPACE, fallback=FALLBACK, name="test.template"):
    return ScheduleTemplate(name, space, fallback, build=lambda config: config)


def test_one_knob_variants_change_one_knob_of_the_fallback_each():
    variants = list(template().one_knob_variants())
    assert variants[0] == FALLBACK
    changed = [{k for k in FALLBACK if v[k] != FALLBACK[k]} for v in variants[1:]]
    assert all(len(c) == 1 for c in changed)
    assert len(variants) == 1 + sum(len(values) - 1 for values in SPACE.values())
    assert all(v in list(template().configs()) for v in variants)


def test_best_config_is_the_fastest_error_free_one_and_first_log_wins(tmp_path):
    fast, slow = dict(FALLBACK, tile_x=8), dict(FALLBACK, tile_x=2)
    user, shipped = tmp_path / "user.jsonl", tmp_path / "shipped.jsonl"
    logmod.append(user, [record(slow, 3e-3), record(fast, 1e-3), record(FALLBACK, None, error="crash"),
                         record(FALLBACK, 1e-3, workload="wl-2")])
    logmod.append(shipped, [record(FALLBACK, 1e-4), record(dict(FALLBACK, tile_y=4), 5e-4, workload="wl-3")])
    logs = TuningLogs([user, shipped])
    tpl = template()
    assert logs.config_for(tpl, "wl-1", parse_target("llvm")) == fast  # user log decides
    assert logs.config_for(tpl, "wl-3", "llvm") == dict(FALLBACK, tile_y=4)  # only the shipped log knows
    assert logs.config_for(tpl, "wl-9", "llvm") is None
    assert logs.config_for(template(name="other"), "wl-1", "llvm") is None  # another template's records
    assert logs.config_for(tpl, "wl-1", "opencl") is None  # another target kind
    # an exact target text beats the same kind
    logmod.append(user, [record(slow, 9e-3, target="llvm -mcpu=znver4")])
    assert TuningLogs([user]).best("test.template", "wl-1", "llvm -mcpu=znver4").config == slow


def test_stale_configs_are_ignored_and_json_lists_match_candidates():
    logs = TuningLogs([])
    logs._best[("test.template", "wl-1", "llvm")] = {0: {"llvm": record(dict(FALLBACK, tile_x=3), 1e-3)}}
    assert logs.config_for(template(), "wl-1", "llvm") is None  # 3 is no longer a candidate
    tuple_space = dict(SPACE, block=[(1, 1), (2, 4)])
    matched = logmod.match_config(tuple_space, dict(FALLBACK, block=[2, 4]))
    assert matched["block"] == (2, 4) and matched["block"] is tuple_space["block"][1]
    assert logmod.match_config(SPACE, {"tile_x": 1}) is None


def test_template_rejects_a_fallback_outside_its_space():
    with pytest.raises(nnvm.Error, match="fallback tile_x=3 is not a candidate"):
        template(fallback=dict(FALLBACK, tile_x=3))
    with pytest.raises(nnvm.Error, match="differ in"):
        template(fallback={"tile_x": 1})


# -- tuners -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["grid", "random", "xgb"])
def test_tuners_cover_the_space_without_repeats(kind):
    space = dict(SPACE, tile_x=[1, 2, 4], tile_y=[2, 4, 8])
    tuner = make_tuner(kind, space, seed=1)
    seen = []
    while tuner.has_next():
        batch = tuner.next_batch(16)
        assert batch, f"{kind}: has_next but an empty batch after {len(seen)} configs"
        tuner.update(batch, [1.0 / synthetic_seconds(c) for c in batch])
        seen += [json.dumps(c, sort_keys=True) for c in batch]
    assert len(seen) == len(set(seen)) == len(list(template(space, dict(FALLBACK, tile_y=2)).configs()))


def test_grid_follows_the_space_order():
    tuner = GridTuner(SPACE)
    assert tuner.next_batch(3) == list(template().configs())[:3]


def test_model_tuner_finds_the_optimum_of_a_known_landscape_with_a_fraction_of_the_space():
    tuner = ModelTuner(SPACE, seed=0)
    best = float("inf")
    for _ in range(8):  # 64 of 432 configs
        batch = tuner.next_batch(8)
        tuner.update(batch, [1.0 / synthetic_seconds(c) for c in batch])
        best = min(best, *(synthetic_seconds(c) for c in batch))
    optimum = min(synthetic_seconds(c) for c in template().configs())
    assert best <= optimum * 1.05, f"best {best:.3e} s after 64 trials, optimum {optimum:.3e} s"


def test_model_tuner_anneals_over_a_space_too_large_to_rank_whole():
    space = {f"k{i}": list(range(8)) for i in range(6)}  # 262144 configs
    assert len(list(range(8))) ** 6 > EXHAUSTIVE_LIMIT
    tuner = ModelTuner(space, seed=0, sa_steps=20)
    score = lambda c: 1.0 / (1 + sum((v - 5) ** 2 for v in c.values()))  # noqa: E731
    for _ in range(4):
        batch = tuner.next_batch(8)
        tuner.update(batch, [score(c) for c in batch])
    batch = tuner.next_batch(8)
    assert len(batch) == 8 and all(tuner.index(c) not in tuner.visited for c in batch)
    assert max(score(c) for c in batch) > max(tuner.ys) * 0.5


def test_unknown_tuner_is_a_user_error():
    with pytest.raises(nnvm.Error, match="unknown tuner 'annealing'; choose one of xgb, random, grid"):
        make_tuner("annealing", SPACE)
    assert isinstance(make_tuner("random", SPACE), RandomTuner)


# -- the loop -----------------------------------------------------------------------------------------

def test_tune_logs_every_measurement_starting_with_the_fallback(tmp_path):
    log = tmp_path / "tune.jsonl"
    fake = FakeMeasurer()
    (summary,) = tune([make_task()], trials=20, log=log, tuner="random", measurer=fake, progress=False)
    recs = logmod.read(log)
    assert len(recs) == 20 == summary.trials == summary.measured
    assert fake.measured[0] == FALLBACK
    assert summary.fallback_seconds == pytest.approx(synthetic_seconds(FALLBACK))
    best = min((r for r in recs if r.ok), key=lambda r: r.seconds)
    assert summary.best_config == best.config and summary.best_seconds == best.seconds
    assert best.gflops == pytest.approx(2e6 / best.seconds / 1e9)
    assert all((r.template, r.workload, r.label) == ("test.template", "wl-1", "synthetic") for r in recs)


def test_crashing_configs_are_recorded_as_errors_and_tuning_goes_on(tmp_path):
    log = tmp_path / "tune.jsonl"
    space = {"tile_x": [16, 32], "tile_y": [16, 32], "unroll": [True], "order": ["xy"], "block": [[2, 4]]}
    fallback = {"tile_x": 16, "tile_y": 16, "unroll": True, "order": "xy", "block": [2, 4]}
    (summary,) = tune([make_task(space, fallback)], trials=10, log=log, tuner="grid", measurer=FakeMeasurer(),
                      progress=False)
    recs = logmod.read(log)
    assert len(recs) == 4 and summary.errors == 1
    (bad,) = [r for r in recs if not r.ok]
    assert bad.config["tile_x"] == bad.config["tile_y"] == 32 and "signal 11" in bad.error
    assert bad.seconds is None
    assert TuningLogs([log]).best("test.template", "wl-1", "llvm").seconds == summary.best_seconds


def test_resuming_measures_only_what_the_log_lacks(tmp_path):
    log = tmp_path / "tune.jsonl"
    first = FakeMeasurer()
    tune([make_task()], trials=12, log=log, tuner="xgb", measurer=first, progress=False)
    again = FakeMeasurer()
    (summary,) = tune([make_task()], trials=12, log=log, tuner="xgb", measurer=again, progress=False)
    assert again.measured == [] and summary.measured == 0 and summary.trials == 12
    more = FakeMeasurer()
    (summary,) = tune([make_task()], trials=30, log=log, tuner="xgb", measurer=more, progress=False)
    keys = lambda cs: {json.dumps(c, sort_keys=True) for c in cs}  # noqa: E731
    assert len(more.measured) == 18 and not keys(more.measured) & keys(first.measured)
    assert summary.trials == 30 and len(logmod.read(log)) == 30
    # another workload in the same log is a task of its own
    other = FakeMeasurer()
    tune([make_task(workload="wl-2")], trials=5, log=log, tuner="random", measurer=other, progress=False)
    assert len(other.measured) == 5


def test_trial_budget_is_checked(tmp_path):
    with pytest.raises(nnvm.Error, match="--trials must be at least 1, got 0"):
        tune([make_task()], trials=0, log=tmp_path / "x.jsonl", measurer=FakeMeasurer(), progress=False)


def test_distill_keeps_the_best_record_per_workload(tmp_path):
    log, out = tmp_path / "log.jsonl", tmp_path / "best.jsonl"
    fast = dict(FALLBACK, tile_x=8)
    logmod.append(log, [record(FALLBACK, 2e-3), record(fast, 1e-3), record(fast, None, error="crash"),
                        record(FALLBACK, 5e-3, workload="wl-2"),
                        record(fast, None, workload="wl-3", error="x")])
    assert logmod.distill([log], out) == 2
    kept = {(r.workload, r.seconds) for r in logmod.read(out)}
    assert kept == {("wl-1", 1e-3), ("wl-2", 5e-3)}


def test_model_tuner_starts_from_what_other_workloads_of_the_template_taught():
    teacher = ModelTuner(SPACE, seed=3)
    for _ in range(6):
        batch = teacher.next_batch(8)
        teacher.update(batch, [1.0 / synthetic_seconds(c) for c in batch])
    student = ModelTuner(SPACE, seed=4, prior=teacher.normalized_history())
    first = student.next_batch(8)  # model-guided already: no random warm-up needed
    optimum = min(synthetic_seconds(c) for c in template().configs())
    assert min(synthetic_seconds(c) for c in first) <= optimum * 1.1
    # a prior whose features do not fit this space is ignored
    assert ModelTuner({"a": [1, 2]}, prior=teacher.normalized_history()).prior is None


def test_tune_carries_what_one_task_taught_to_the_next(tmp_path):
    fake = FakeMeasurer()
    tasks = [make_task(workload="wl-a"), make_task(workload="wl-b")]
    first, second = tune(tasks, trials=16, log=tmp_path / "t.jsonl", tuner="xgb", measurer=fake,
                         progress=False)
    assert first.trials == second.trials == 16 and len(fake.measured) == 32
    # the same landscape: the second task, guided from its first batch on, does at least as well
    assert second.best_seconds <= first.best_seconds, (first.best_config, second.best_config)

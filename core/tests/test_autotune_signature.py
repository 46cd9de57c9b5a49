"""Tuning logs that transfer between CPUs: signatures (from feature strings and sysfs), how a target's
signature matches a record's (exact, nearest, refused), the lookup order, old logs without signatures,
and the tuner writing the measuring machine's signature. No backend is needed: signatures are made by
hand, as a backend's ``cpu_signature`` would make them."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

import nnvm
from nnvm.autotune import ScheduleTemplate, Task, TuningLogs, tune
from nnvm.autotune import driver as drivermod
from nnvm.autotune import log as logmod
from nnvm.autotune.measure import Result
from nnvm.autotune.signature import CPUSignature, host_caches, parse_features

SPACE = {"tile": [1, 2, 4, 8, 16], "unroll": [False, True]}
FALLBACK = {"tile": 1, "unroll": False}
AVX512 = frozenset({"avx", "avx2", "fma", "avx512f"})
# Two machines of one signature (another model name: the name is never compared), a near one with
# other caches, and an AVX2 one.
FLEET_A = CPUSignature("x86_64", 512, True, AVX512, 8, 48 << 10, 1 << 20, 32 << 20, "znver5")
FLEET_B = dataclasses.replace(FLEET_A, cpu="znver5-other-host")
NEAR = dataclasses.replace(FLEET_A, l1d=32 << 10, l3=16 << 20, cpu="cascadelake")
FAR = dataclasses.replace(FLEET_A, l1d=32 << 10, l2=256 << 10, l3=8 << 20, cores=2, cpu="icelake")
AVX2 = CPUSignature("x86_64", 256, True, frozenset({"avx", "avx2", "fma"}), 8, 32 << 10, 1 << 20, 32 << 20,
                    "haswell")


def record(config, seconds, signature=None, workload="wl-1", target="llvm"):
    return logmod.Record(target, "t", workload, config, seconds, None, None, logmod.now(), "", signature)


def template():
    return ScheduleTemplate("t", SPACE, FALLBACK, build=lambda config: config)


# -- signatures ----------------------------------------------------------------------------------------

def test_features_are_read_from_an_llvm_feature_string_later_items_winning():
    relevant = ("avx2", "avx512f", "fma", "avx512vnni")
    assert parse_features("+avx2,+avx512f,+fma,+sse4.2,-avx512vnni", relevant) == {"avx2", "avx512f", "fma"}
    assert parse_features("+avx2,+avx512f,-avx512f", relevant) == {"avx2"}  # -mattr=-avx512f appended
    assert parse_features("", relevant) == frozenset()


def write_cache(root, index, level, kind, size):
    folder = root / f"index{index}"
    folder.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size)):
        (folder / name).write_text(f"{value}\n")


def test_cache_sizes_come_from_sysfs_and_fall_back_to_sysconf(tmp_path, monkeypatch):
    write_cache(tmp_path, 0, 1, "Data", "48K")
    write_cache(tmp_path, 1, 1, "Instruction", "32K")
    write_cache(tmp_path, 2, 2, "Unified", "1024K")
    write_cache(tmp_path, 3, 3, "Unified", "32768K")
    assert host_caches(str(tmp_path)) == {"l1d": 48 << 10, "l2": 1 << 20, "l3": 32 << 20}

    # a VM without an L3 entry and an unreadable size: sysconf fills in what it knows, else None
    partial = tmp_path / "partial"
    write_cache(partial, 0, 1, "Data", "32K")
    write_cache(partial, 1, 2, "Unified", "garbage")
    answers = {"SC_LEVEL2_CACHE_SIZE": 2 << 20, "SC_LEVEL3_CACHE_SIZE": 0}
    monkeypatch.setattr(os, "sysconf", lambda name: answers[name])
    assert host_caches(str(partial)) == {"l1d": 32 << 10, "l2": 2 << 20, "l3": None}

    def unknown(name):
        raise ValueError("unrecognized configuration name")

    monkeypatch.setattr(os, "sysconf", unknown)
    assert host_caches(str(tmp_path / "missing")) == {"l1d": None, "l2": None, "l3": None}


def test_signature_round_trips_and_a_bad_one_is_an_error_naming_the_line(tmp_path):
    assert CPUSignature.from_dict(json.loads(json.dumps(FLEET_A.to_dict()))) == FLEET_A
    path = tmp_path / "log.jsonl"
    logmod.append(path, [record(FALLBACK, 1e-3, FLEET_A)])
    assert logmod.read(path)[0].signature == FLEET_A
    bad = json.loads(path.read_text())
    bad["signature"]["vector_bits"] = "wide"
    path.write_text(json.dumps(bad) + "\n" + record(FALLBACK, 1e-3).to_json() + "\n")
    with pytest.raises(nnvm.Error, match=r"line 1: not a tuning record \(signature vector_bits"):
        logmod.read(path)


def test_distance_exact_nearest_and_refused():
    assert FLEET_A.distance(FLEET_B) == 0.0  # the CPU's name is not compared
    assert 0 < FLEET_A.distance(NEAR) < FLEET_A.distance(FAR)
    # L1d 48K vs 32K and L3 32M vs 16M: log2(1.5) + 1
    assert FLEET_A.distance(NEAR) == pytest.approx(1.585, abs=1e-3)
    assert FLEET_A.distance(AVX2) is None and "256-bit vectors" in FLEET_A.refusal(AVX2)
    assert FLEET_A.distance(dataclasses.replace(FLEET_A, fma=False)) is None
    assert FLEET_A.distance(dataclasses.replace(FLEET_A, arch="aarch64")) is None
    # an unknown size counts as one doubling; cores weigh half a cache level; features a quarter
    assert FLEET_A.distance(dataclasses.replace(FLEET_A, l3=None)) == pytest.approx(1.0)
    assert FLEET_A.distance(dataclasses.replace(FLEET_A, cores=16)) == pytest.approx(0.5)
    assert FLEET_A.distance(dataclasses.replace(FLEET_A, features=AVX512 | {"avx512vnni"})) == 0.25


# -- lookup --------------------------------------------------------------------------------------------

def test_a_log_tuned_on_one_machine_serves_another_of_the_same_signature(tmp_path):
    log = tmp_path / "fleet.jsonl"
    logmod.append(log, [record({"tile": 8, "unroll": True}, 1e-3, FLEET_A), record(FALLBACK, 2e-3, FLEET_A)])
    config, choice = TuningLogs([log], signature=FLEET_B).choose(template(), "wl-1", "llvm")
    assert config == {"tile": 8, "unroll": True} and choice.match == "exact" and choice.distance == 0
    assert "exact" in choice.reason() and str(log) in choice.reason()


def test_exact_beats_nearest_and_nearest_is_the_closest(tmp_path):
    near, far, exact = tmp_path / "near.jsonl", tmp_path / "far.jsonl", tmp_path / "exact.jsonl"
    logmod.append(near, [record({"tile": 2, "unroll": False}, 1e-3, NEAR)])
    logmod.append(far, [record({"tile": 4, "unroll": False}, 1e-4, FAR)])  # faster, but farther
    logmod.append(exact, [record({"tile": 16, "unroll": False}, 5e-3, FLEET_B)])
    tpl = template()
    # the user's logs come first, yet an exact shipped record wins over them: exactness ranks first
    config, choice = TuningLogs([near, far], signature=FLEET_A, shipped=[exact]).choose(tpl, "wl-1", "llvm")
    assert config["tile"] == 16 and choice.shipped and choice.match == "exact"
    # without an exact one, the nearest machine's config, whatever the order of the logs
    for order in ([near, far], [far, near]):
        config, choice = TuningLogs(order, signature=FLEET_A).choose(tpl, "wl-1", "llvm")
        assert config["tile"] == 2 and choice.match == "nearest" and choice.distance == FLEET_A.distance(NEAR)
    # among logs of equal standing a user's log overrides a shipped one
    user = tmp_path / "user.jsonl"
    logmod.append(user, [record({"tile": 1, "unroll": True}, 9e-3, FLEET_B)])
    logs = TuningLogs([user], signature=FLEET_A, shipped=[exact])
    assert logs.choose(tpl, "wl-1", "llvm")[0] == {"tile": 1, "unroll": True}


def test_a_record_of_another_vector_width_is_never_chosen_and_the_summary_says_why(tmp_path):
    log = tmp_path / "avx512.jsonl"
    logmod.append(log, [record({"tile": 16, "unroll": True}, 1e-4, FLEET_A)])
    logs = TuningLogs([], signature=AVX2, shipped=[log])
    assert logs.choose(template(), "wl-1", "llvm") == (None, None)
    assert logs.best("t", "wl-1", "llvm") is None
    (entry,) = logs.summary()
    assert entry["shipped"] and entry["kernels"] == 0
    assert entry["matches"] == [f"refused: tuned with 512-bit vectors, not 256-bit [{FLEET_A.describe()}]"]


def test_a_config_outside_the_targets_space_passes_to_the_next_record(tmp_path):
    log = tmp_path / "log.jsonl"
    logmod.append(log, [record({"tile": 32, "unroll": True}, 1e-4, FLEET_A),  # not a candidate here
                        record({"tile": 4, "unroll": True}, 1e-3, NEAR)])
    config, choice = TuningLogs([log], signature=FLEET_A).choose(template(), "wl-1", "llvm")
    assert config == {"tile": 4, "unroll": True} and choice.match == "nearest"


def test_old_logs_without_signatures_still_serve(tmp_path):
    user, shipped = tmp_path / "mine.jsonl", tmp_path / "znver5.jsonl"
    # a record as nnvm wrote it before signatures (no "signature" key at all)
    line = json.loads(record({"tile": 2, "unroll": True}, 1e-3).to_json())
    assert "signature" not in line
    user.write_text(json.dumps(line) + "\n")
    logmod.append(shipped, [record({"tile": 4, "unroll": True}, 1e-3, workload="wl-2")])
    tpl = template()
    # a user's unsigned log applies as it always did
    config, choice = TuningLogs([user], signature=FLEET_A).choose(tpl, "wl-1", "llvm")
    assert config["tile"] == 2 and choice.match == "unsigned"
    # a shipped unsigned log counts as the CPU its file is named after, and nothing else
    config, choice = TuningLogs([], signature=FLEET_A, shipped=[shipped]).choose(tpl, "wl-2", "llvm")
    assert config["tile"] == 4 and choice.match == "cpu name"
    assert TuningLogs([], signature=NEAR, shipped=[shipped]).choose(tpl, "wl-2", "llvm") == (None, None)
    # a record whose target names its CPU counts as that CPU only
    named = tmp_path / "named.jsonl"
    logmod.append(named, [record({"tile": 8, "unroll": True}, 1e-3, target="llvm -mcpu=cascadelake")])
    assert TuningLogs([named], signature=NEAR).choose(tpl, "wl-1", "llvm")[0]["tile"] == 8
    assert TuningLogs([named], signature=FLEET_A).choose(tpl, "wl-1", "llvm") == (None, None)
    # no signature for the target (a backend that gives none): every record applies, unchecked
    assert TuningLogs([named]).choose(tpl, "wl-1", "llvm")[1].match == "unchecked"


def test_a_torn_last_line_with_a_signature_is_skipped(tmp_path):
    path = tmp_path / "log.jsonl"
    logmod.append(path, [record(FALLBACK, 1e-3, FLEET_A)])
    whole = record(FALLBACK, 2e-3, FLEET_A).to_json()
    with open(path, "a") as f:
        f.write(whole[: whole.index('"signature"') + 30])  # killed in the middle of the signature
    assert len(logmod.read(path)) == 1
    logmod.append(path, [record(FALLBACK, 3e-3, NEAR)])
    assert [r.signature for r in logmod.read(path)] == [FLEET_A, NEAR]


# -- the tuner -----------------------------------------------------------------------------------------

class Synthetic:
    def __init__(self):
        self.measured = 0

    def measure(self, task, configs):
        self.measured += len(configs)
        return [Result(1e-3 / (c["tile"] + c["unroll"])) for c in configs]


def test_tune_signs_its_records_and_resumes_only_its_own_machines(tmp_path, monkeypatch):
    task = Task("t", "wl-1", "llvm", SPACE, FALLBACK, flops=1e6, weight=1, label="synthetic")
    log = tmp_path / "tune.jsonl"
    monkeypatch.setattr(drivermod, "signature_of", lambda target: FLEET_A)
    tune([task], trials=4, log=log, tuner="grid", measurer=Synthetic(), progress=False)
    assert [r.signature for r in logmod.read(log)] == [FLEET_A] * 4
    again = Synthetic()
    monkeypatch.setattr(drivermod, "signature_of", lambda target: FLEET_B)  # same signature elsewhere
    tune([task], trials=4, log=log, tuner="grid", measurer=again, progress=False)
    assert again.measured == 0
    other = Synthetic()
    monkeypatch.setattr(drivermod, "signature_of", lambda target: NEAR)  # another machine measures anew
    tune([task], trials=4, log=log, tuner="grid", measurer=other, progress=False)
    assert other.measured == 4 and len(logmod.read(log)) == 8
    # and the log distills to one best record per machine
    assert logmod.distill([log], tmp_path / "best.jsonl") == 2


# -- batch sizes ---------------------------------------------------------------------------------------

def conv_workload(batch: int, out_channels: int = 4) -> str:
    """A workload key as the compiler writes it: a blocked conv and its bias, batch ``batch``."""
    return json.dumps([["conv2d_nchwc", [["in", [batch, 12, 14, 14, 16], "float32"],
                                         ["in", [out_channels, 12, 1, 1, 16, 16], "float32"]], {"groups": 1}],
                       ["add", ["0:0", ["in", [1, out_channels, 1, 1, 16], "float32"]], {}]], sort_keys=True)


def test_the_batch_free_key_blanks_leading_sizes_and_a_change_is_one_batch_size():
    key1, lead1 = logmod.batch_free(conv_workload(1))
    key8, lead8 = logmod.batch_free(conv_workload(8))
    assert key1 == key8 and lead1 == (1, 4, 1) and lead8 == (8, 4, 1)
    assert logmod.batch_change(lead1, lead8) == (1, 8)
    # another output channel count and batch: two sizes change, not one batch
    _, other = logmod.batch_free(conv_workload(8, out_channels=8))
    assert logmod.batch_change(lead1, other) is None
    assert logmod.batch_change(lead1, lead1) is None  # the same workload is not "another batch"
    assert logmod.batch_free("wl-1") is None and logmod.batch_free("[1, 2]") is None


def test_an_untuned_batch_borrows_the_nearest_tuned_batch_and_its_own_record_wins(tmp_path):
    log = tmp_path / "batches.jsonl"
    logmod.append(log, [record({"tile": 2, "unroll": False}, 1e-3, FLEET_A, workload=conv_workload(1)),
                        record({"tile": 4, "unroll": False}, 1e-3, FLEET_A, workload=conv_workload(4)),
                        record({"tile": 16, "unroll": True}, 1e-3, FLEET_A, workload=conv_workload(32)),
                        record({"tile": 8, "unroll": True}, 1e-3, FLEET_A, workload=conv_workload(64, 8))])
    logs = TuningLogs([log], signature=FLEET_A)
    config, choice = logs.choose(template(), conv_workload(8), "llvm")
    assert config["tile"] == 4 and choice.batch == 4 and "tuned at batch 4" in choice.reason()
    config, choice = logs.choose(template(), conv_workload(16), "llvm")  # 4 and 32 are twice off: the larger
    assert config["tile"] == 16 and choice.batch == 32
    config, choice = logs.choose(template(), conv_workload(4), "llvm")
    assert config["tile"] == 4 and choice.batch is None and "tuned at" not in choice.reason()
    # a workload that differs in more than its batch borrows nothing
    assert logs.choose(template(), conv_workload(2, out_channels=16), "llvm") == (None, None)
    # a borrowed config outside this template's space is passed over for the next batch
    narrow = ScheduleTemplate("t", {"tile": [1, 2, 16], "unroll": [False, True]}, FALLBACK, build=lambda c: c)
    config, choice = logs.choose(narrow, conv_workload(8), "llvm")
    assert config["tile"] == 16 and choice.batch == 32  # batch 4's tile 4 is not in it; 32 is next
    # a knob only the wanted batch size has (batch-parallel ...) takes the fallback's value
    wide = ScheduleTemplate("t", {**SPACE, "per_image": [True, False]}, {**FALLBACK, "per_image": False},
                            build=lambda c: c)
    config, choice = logs.choose(wide, conv_workload(8), "llvm")
    assert config == {"tile": 4, "unroll": False, "per_image": False} and choice.batch == 4


# -- template revisions --------------------------------------------------------------------------------

def test_a_record_keeps_its_template_revision_and_a_stale_one_is_passed_over(tmp_path):
    log = tmp_path / "revisions.jsonl"
    old = dataclasses.replace(record({"tile": 8, "unroll": True}, 1e-4, FLEET_A), revision=1)
    new = dataclasses.replace(record({"tile": 2, "unroll": False}, 1e-3, FLEET_A), revision=2)
    logmod.append(log, [old, new])
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert "revision" not in lines[0] and lines[1]["revision"] == 2  # revision 1 as logs always were
    assert [r.revision for r in logmod.read(log)] == [1, 2]
    revised = dataclasses.replace(template(), revision=2)
    config, _ = TuningLogs([log], signature=FLEET_A).choose(revised, "wl-1", "llvm")
    assert config == {"tile": 2, "unroll": False}  # the faster record is of the old code: passed over
    config, _ = TuningLogs([log], signature=FLEET_A).choose(template(), "wl-1", "llvm")
    assert config == {"tile": 8, "unroll": True}
    lines[1]["revision"] = "two"
    log.write_text("\n".join(json.dumps(d) for d in lines) + "\n")
    with pytest.raises(nnvm.Error, match=r"line 2: not a tuning record \(revision must be a whole number"):
        logmod.read(log)


def test_an_emulated_record_round_trips_is_never_chosen_for_a_device_and_never_shipped(tmp_path):
    emulated = dataclasses.replace(FLEET_A, emulated=True)
    assert CPUSignature.from_dict(emulated.to_dict()) == emulated and "emulated" not in FLEET_A.to_dict()
    assert FLEET_A.distance(emulated) is None and "emulator" in FLEET_A.refusal(emulated)
    assert "(emulated)" in emulated.describe()
    log = tmp_path / "qemu.jsonl"
    logmod.append(log, [dataclasses.replace(record({"tile": 8, "unroll": True}, 1e-3, emulated), node="n1")])
    (back,) = logmod.read(log)
    assert back.signature.emulated and back.node == "n1"
    assert TuningLogs([log], signature=FLEET_A).choose(template(), "wl-1", "llvm") == (None, None)
    assert logmod.distill([log], tmp_path / "ship.jsonl") == 0

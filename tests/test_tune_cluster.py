"""Tuning on a real local Ray cluster (``nnvm tune --cluster``): a head and two worker nodes on this
machine, separate processes, each worker declaring one ``nnvm:llvm:<cpu>`` device. No mocks: builds and
measurements run in Ray workers; a worker process is killed with SIGKILL in the middle of a measurement.

The cluster is started once for the module (about 15 s) and shut down by a finalizer; the tuning runs are
tiny (a few tasks, a few trials) so the module takes a minute or two.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import ray.cluster_utils
from onnx import TensorProto, helper, numpy_helper

from nnvm.autotune import Measurer, extract_tasks, task_from_factory, tune
from nnvm.autotune import log as logmod
from nnvm.autotune.cluster import ClusterMeasurer, device_resource

TRIALS = 4


@pytest.fixture(scope="module")
def cluster():
    """Head (1 CPU, no device) + 2 worker nodes (1 CPU and one ``nnvm:llvm:<cpu>`` device each)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NNVM_NUM_THREADS", "1")  # inherited by every node's workers
        # a node gone is noticed after 5 missed health checks of 1 s (Ray's default: 5 of 3 s)
        health = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5}
        c = ray.cluster_utils.Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "include_dashboard": False, "_system_config": health})
        try:
            devices = [c.add_node(num_cpus=1, resources={device_resource("llvm"): 1}) for _ in range(2)]
            c.wait_for_nodes()
            c.device_nodes = devices
            yield c
        finally:
            c.shutdown()


def measurer(cluster, **kwargs) -> ClusterMeasurer:
    kwargs.setdefault("repeat", 3)
    kwargs.setdefault("min_repeat_ms", 1)
    return ClusterMeasurer(cluster.address, **kwargs)


def small_resnet18_tasks() -> list:
    """ResNet-18's cheapest tasks to build and time: its 1x1 convolutions and its dense layer."""
    from nnvm_testing.frontend_onnx import models

    tasks = extract_tasks(models.cached_model_path("resnet18"), target="llvm")
    return sorted(tasks, key=lambda t: t.flops)[:3]


def by_task(records) -> dict:
    out: dict = {}
    for r in records:
        out.setdefault((r.template, r.workload), []).append(r)
    return out


def test_resnet18_tasks_on_the_cluster_log_every_trial_once_and_find_the_local_best(cluster, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.setenv("NNVM_NUM_THREADS", "1")
    tasks = small_resnet18_tasks()
    local_log, cluster_log = tmp_path / "local.jsonl", tmp_path / "cluster.jsonl"
    with Measurer(repeat=3, min_repeat_ms=1) as m:
        tune(tasks, TRIALS, local_log, tuner="random", measurer=m, progress=False, seed=0)
    # noise is not what this test is about (the noisy-node test is): a loaded machine spread one node's
    # repeats by 24% in a fresh clone's suite and every later trial was logged as an error
    with measurer(cluster, noise_limit=100.0) as m:
        tune(tasks, TRIALS, cluster_log, tuner="random", measurer=m, progress=False, seed=0)
        timeline = list(m.timeline)
        # a driver run again (after a kill) resumes from the log: nothing is measured twice
        again = tune(tasks, TRIALS, cluster_log, tuner="random", measurer=m, progress=False, seed=0)
        assert [s.measured for s in again] == [0] * len(tasks)
    local, remote = by_task(logmod.read(local_log)), by_task(logmod.read(cluster_log))
    assert set(local) == set(remote) and len(remote) == len(tasks)
    nodes = set()
    for key, records in remote.items():
        configs = [logmod.config_key(r.config) for r in records]
        assert len(configs) == len(set(configs)) == min(TRIALS, next(t.size() for t in tasks if
                                                                       (t.template, t.workload) == key))
        assert sorted(configs) == sorted(logmod.config_key(r.config) for r in local[key]), \
            f"{records[0].label}: the cluster measured other candidates than the local tuner"
        assert all(r.ok for r in records), [r.error for r in records if not r.ok]
        nodes |= {r.node for r in records}
        # the cluster's best config is the local best, or as fast as it locally: within 25% of it, or in
        # the faster half of the local timings (on a loaded machine two configs' order can flip)
        local_seconds = {logmod.config_key(r.config): r.seconds for r in local[key]}
        best = min(records, key=lambda r: r.seconds)
        at_home = local_seconds[logmod.config_key(best.config)]
        assert at_home <= 1.25 * min(local_seconds.values()) or at_home <= statistics.median(
            local_seconds.values()), f"{best.label}: the cluster's best {best.config} is slow locally"
    assert len(nodes) == 2, f"measured on {nodes}, not on both device nodes"
    measures = [e for e in timeline if e["kind"] == "measure"]
    assert len(measures) == sum(len(v) for v in remote.values())
    for node in nodes:  # one measurement per device at a time
        spans = sorted((e["start"], e["end"]) for e in measures if e["node"] == node)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), f"{node} measured two configs at once"


def _measuring_worker_pids() -> list[int]:
    """Ray names a worker process after the task it runs: ``ray::_measure_remote``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(b"ray::_measure_remote"):
            pids.append(int(entry))
    return pids


def test_a_worker_killed_mid_measurement_is_retried_and_nothing_is_lost_or_logged_twice(cluster, tmp_path):
    task = task_from_factory("nnvm_testing.autotune_templates:matmul_template", n=64)
    log = tmp_path / "killed.jsonl"
    done: dict = {}

    def run():
        # long measurements (6 rounds of 60 ms): time to catch one in the act; rounds that long spread
        # widely on this shared machine, and noise is not what this test is about
        with measurer(cluster, repeat=6, min_repeat_ms=60, noise_limit=100.0) as m:
            done["summary"] = tune([task], 6, log, tuner="random", measurer=m, progress=False, seed=1)

    thread = threading.Thread(target=run)
    thread.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        pids = [p for p in _measuring_worker_pids() if _node_of(p, cluster.device_nodes) is not None]
        if pids:  # this cluster's (under pytest -n, another worker may run a cluster of its own)
            time.sleep(0.2)  # inside the measurement, not in its setup
            try:
                os.kill(pids[0], signal.SIGKILL)
                killed = pids[0]
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    thread.join(timeout=300)
    assert not thread.is_alive(), "tuning did not finish after a worker was killed"
    assert killed is not None, "no measuring worker was caught to kill"
    records = logmod.read(log)
    configs = [logmod.config_key(r.config) for r in records]
    assert len(records) == 6 == len(set(configs)), "a trial was lost or logged twice"
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    assert done["summary"][0].trials == 6


def test_an_aarch64_task_builds_on_x86_and_measures_on_the_qemu_node(cluster, tmp_path):
    arm = cluster.add_node(num_cpus=1, resources={device_resource("aarch64"): 1})
    try:
        cluster.wait_for_nodes()
        task = task_from_factory("nnvm_testing.autotune_templates:matmul_template", n=32, target="aarch64")
        log = tmp_path / "arm.jsonl"
        with measurer(cluster) as m:
            (summary,) = tune([task], 3, log, tuner="random", measurer=m, progress=False)
            events = list(m.timeline)
        records = logmod.read(log)
        assert len(records) == 3 and all(r.ok for r in records), [r.error for r in records]
        for r in records:
            assert r.signature.arch == "aarch64" and r.signature.emulated, r.signature
            assert r.node.endswith(arm.node_id[:8]), f"measured on {r.node}, not on the qemu node"
        assert json.loads(records[0].to_json())["signature"]["emulated"] is True
        assert {e["node"] for e in events if e["kind"] == "measure"} == {records[0].node}
        # an emulator's times are never shipped
        assert logmod.distill([log], tmp_path / "ship.jsonl") == 0
    finally:
        cluster.remove_node(arm)


def nnvm_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "nnvm.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def tiny_conv(tmp_path_factory) -> str:
    """One 3x3 convolution: one tuning task."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 14, 14])], [w])
    path = tmp_path_factory.mktemp("cluster") / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


def test_nnvm_tune_cluster_on_the_command_line(cluster, tiny_conv, tmp_path):
    log = tmp_path / "cli.jsonl"
    # the CPU the nodes measure for, named: the command runs in a process of its own, which does not share
    # a CPU this run assumes (``--host-cpu``)
    cpu = device_resource("llvm").rsplit(":", 1)[1]
    proc = nnvm_cli("tune", tiny_conv, "--target", f"llvm -mcpu={cpu}", "--trials", "2", "--log", str(log),
                    "--cluster", cluster.address, "--quiet", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "2 device(s)" in proc.stdout
    records = logmod.read(log)
    assert len(records) == 2 and all(r.node for r in records)
    assert json.loads(proc.stdout[proc.stdout.index("["):])[0]["measured"] == 2


def test_user_mistakes_about_the_cluster_are_one_sentence(cluster, tiny_conv, tmp_path):
    log = str(tmp_path / "x.jsonl")
    proc = nnvm_cli("tune", tiny_conv, "--trials", "1", "--log", log, "--cluster", "127.0.0.1:1")
    assert proc.returncode == 1 and proc.stderr.startswith("nnvm: error: nothing answers at 127.0.0.1:1")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = nnvm_cli("tune", tiny_conv, "--target", "aarch64", "--trials", "1", "--log", log,
                    "--cluster", cluster.address)
    assert proc.returncode == 1, proc.stdout
    assert "no node of the Ray cluster" in proc.stderr and "nnvm:aarch64" in proc.stderr, proc.stderr
    assert "nnvm cluster join" in proc.stderr and "Traceback" not in proc.stderr
    proc = nnvm_cli("cluster", "join", "--address", "127.0.0.1:1", "--target", "llvm")
    assert proc.returncode == 1 and "nothing answers at 127.0.0.1:1" in proc.stderr
    assert "Traceback" not in proc.stderr
    # without Ray installed (its import made to fail, as a missing package does)
    argv = ["tune", tiny_conv, "--trials", "1", "--log", log, "--cluster", "auto"]
    code = f"import sys; sys.modules['ray'] = None; from nnvm.cli import main; sys.exit(main({argv!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "needs Ray: pip install 'nnvm[cluster]'" in proc.stderr, proc.stderr


def test_crashing_and_hanging_candidates_are_errors_on_the_worker_and_every_trial_is_accounted(cluster,
                                                                                             tmp_path):
    task = task_from_factory("nnvm_testing.autotune_templates:matmul_template", n=32, faults=True)
    log = tmp_path / "faults.jsonl"
    with measurer(cluster, timeout=3, noise_limit=100.0) as m:
        tune([task], 6, log, tuner="grid", measurer=m, progress=False)  # the fallback, then each fault
    records = logmod.read(log)
    assert len(records) == 6 == len({logmod.config_key(r.config) for r in records})
    errors = {r.config["fault"]: r.error for r in records if not r.ok}
    assert "fault=raise" in errors["raise"]
    assert "died (signal 11)" in errors["segfault"] and "died (status 3)" in errors["exit"]
    assert "timed out after 3 s" in errors["hang"]
    assert all(r.ok for r in records if r.config["fault"] == "none")


def test_a_node_that_measures_inconsistently_is_reported_and_its_results_kept_apart(cluster, tmp_path):
    """With a limit of 0 every node is 'noisy' after its third measurement: reported once, then logged
    as errors naming it, so its times never stand beside a quiet node's."""
    task = task_from_factory("nnvm_testing.autotune_templates:matmul_template", n=32)
    log = tmp_path / "noisy.jsonl"
    report = tmp_path / "report.txt"
    with open(report, "w") as stream, measurer(cluster, noise_limit=0.0, stream=stream) as m:
        tune([task], 8, log, tuner="random", measurer=m, progress=False)
        noisy = set(m.noisy)
    records = logmod.read(log)
    assert len(records) == 8 and noisy
    text = report.read_text()
    assert all(text.count(f"node {node} measures inconsistently") == 1 for node in noisy), text
    for r in records:
        if not r.ok:
            assert r.node in noisy and f"noisy device: node {r.node}" in r.error
    assert any(not r.ok for r in records)


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _node_of(pid: int, nodes: list):
    """The node (of ``nodes``) whose raylet started process ``pid``, or None."""
    raylets = {n.all_processes["raylet"][0].process.pid: n for n in nodes}
    while pid > 1:
        pid = _parent(pid)
        if pid in raylets:
            return raylets[pid]
    return None


def test_a_device_node_gone_mid_measurement_its_trials_move_to_another_node(cluster, tmp_path):
    task = task_from_factory("nnvm_testing.autotune_templates:matmul_template", n=64)
    log = tmp_path / "gone.jsonl"
    done: dict = {}

    def run():
        with measurer(cluster, repeat=6, min_repeat_ms=60, noise_limit=100.0) as m:
            done["summary"] = tune([task], 6, log, tuner="random", measurer=m, progress=False, seed=2)

    thread = threading.Thread(target=run)
    thread.start()
    removed = None
    deadline = time.monotonic() + 120
    try:
        while removed is None and thread.is_alive() and time.monotonic() < deadline:
            for pid in _measuring_worker_pids():
                node = _node_of(pid, cluster.device_nodes)
                if node is not None:
                    time.sleep(0.2)  # inside the measurement, not in its setup
                    cluster.remove_node(node, allow_graceful=False)
                    removed = node
                    break
            time.sleep(0.05)
        thread.join(timeout=300)
    finally:
        if removed is not None:  # the module's cluster gets its second device back
            k = cluster.device_nodes.index(removed)
            cluster.device_nodes[k] = cluster.add_node(num_cpus=1, resources={device_resource("llvm"): 1})
    assert not thread.is_alive(), "tuning did not finish after a node was lost"
    assert removed is not None, "no measurement was caught on a device node to remove"
    records = logmod.read(log)
    assert len(records) == 6 == len({logmod.config_key(r.config) for r in records})
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]

"""Tuning logs across x86 CPUs: the backend's CPU signature, the shipped logs serving a CPU they were
not named after (nearest match) but never one of another vector width, and the batch being part of
the workload key (a batch-8 kernel prefers a batch-8 config and borrows a batch-1 one only without)."""

from __future__ import annotations

import itertools
import os
import re

import numpy as np

import nnvm
from nnvm.autotune import extract_tasks
from nnvm.autotune import log as logmod
from nnvm.autotune.signature import host_caches
from nnvm.compiler import tuning_logs_for
from nnvm.cpu.schedule_helpers import vector_lanes
from nnvm.runtime.threads import team_size
from nnvm.target import HostCPU, parse_target


def test_the_hosts_signature_has_its_vector_width_caches_and_team_size(monkeypatch, host):
    """``llvm`` is the host (``--host-cpu``'s, else this machine): its caches and the team size; a
    named CPU that is not the host's has no caches or team size, unless the target states them."""
    monkeypatch.setenv("NNVM_NUM_THREADS", "3")
    target = parse_target("llvm")
    sig = target.backend.cpu_signature(target)
    assert sig.arch == "x86_64" and sig.vector_bits == 32 * host.lanes and sig.cpu == host.cpu
    assert sig.fma == ("fma" in sig.features) and sig.cores == team_size() == 3
    assert (sig.l1d, sig.l2, sig.l3) == (host.l1d, host.l2, host.l3)
    # another CPU model: its features by name, and no caches or team size (not this machine's)
    name = "broadwell" if host.cpu == "haswell" else "haswell"
    other = parse_target(f"llvm -mcpu={name}")
    sig = other.backend.cpu_signature(other)
    assert (sig.vector_bits, sig.fma, sig.cpu) == (256, True, name) and "avx512f" not in sig.features
    assert (sig.cores, sig.l1d, sig.l2, sig.l3) == (None, None, None, None)
    stated = parse_target(f"llvm -mcpu={name} -l1d=32K -l2=256K -l3=8M -cores=4")
    sig = stated.backend.cpu_signature(stated)
    assert (sig.cores, sig.l1d, sig.l2, sig.l3) == (4, 32 << 10, 256 << 10, 8 << 20)
    no_fma = parse_target("llvm -mcpu=x86-64")
    assert no_fma.backend.cpu_signature(no_fma).fma is False


def test_this_machines_signature_reads_sysfs_and_the_team(monkeypatch, assume_cpu):
    """With no CPU assumed, ``llvm`` is this machine: the caches sysfs gives, the team size."""
    assume_cpu(None)
    monkeypatch.setenv("NNVM_NUM_THREADS", "3")
    target = parse_target("llvm")
    sig = target.backend.cpu_signature(target)
    caches = host_caches()
    assert (sig.cores, sig.l1d, sig.l2, sig.l3) == (3, caches["l1d"], caches["l2"], caches["l3"])
    assert sig.vector_bits == 32 * vector_lanes(target)


def shipped_log() -> str:
    (path,) = [p for p in parse_target("llvm").backend.default_tuning_logs(parse_target("llvm"))
               if os.path.basename(p) == "cascadelake.jsonl"]
    return path


def test_the_shipped_log_serves_a_cpu_of_another_name_by_nearest_match(assume_cpu):
    """The issue's machine: an AVX-512 CPU LLVM calls ``rocketlake``, for which nothing is shipped. Its
    host is assumed to be it (its features by name), so the plain ``llvm`` target means
    that machine on an AVX2 host too (nothing runs); the real AVX2 host is the Haswell case below."""
    assume_cpu(HostCPU("rocketlake"))
    record = logmod.read(shipped_log())[0]
    target = parse_target("llvm")
    logs = tuning_logs_for(target)
    assert logs.signature.cpu == "rocketlake" and logs.signature.vector_bits == 512
    (choice, *_) = logs.candidates(record.template, record.workload, target)
    assert choice.path == shipped_log() and choice.shipped and choice.match == "nearest"
    assert choice.record.config == record.config and choice.distance > 0
    # the same log on an AVX2 CPU: 256-bit vectors, every record refused
    haswell = parse_target("llvm -mcpu=haswell")
    logs = tuning_logs_for(haswell)
    assert logs.candidates(record.template, record.workload, haswell) == []
    (entry,) = [e for e in logs.summary() if e["path"] == shipped_log()]
    assert entry["matches"] and all(m.startswith("refused: tuned with 512-bit vectors, not 256-bit")
                                    for m in entry["matches"])


def conv_model(path: str, batch) -> str:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.1, "w")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1] * 4)], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def test_a_batch_8_kernel_borrows_a_batch_1_config_only_without_its_own(tmp_path):
    model = conv_model(str(tmp_path / "conv.onnx"), "N")
    (task,) = extract_tasks(model, target="llvm", shapes={"x": (1, 16, 14, 14)})
    (task8,) = extract_tasks(model, target="llvm", shapes={"x": (8, 16, 14, 14)})
    assert task.workload != task8.workload and task.template == task8.template
    target = parse_target("llvm")
    signature = target.backend.cpu_signature(target)
    # a batch-1 config other than the fallback (knobs only batch 8 has, per_image, keep the fallback's)
    configs = [dict(zip(task.space, values)) for values in itertools.product(*task.space.values())]
    config = next(c for c in configs if c != task.fallback
                  and logmod.match_config(task8.space, {**task8.fallback, **c}) is not None)
    log = tmp_path / "batch1.jsonl"
    logmod.append(log, [logmod.Record(task.target, task.template, task.workload, config, 1e-4,
                                      signature=signature, revision=task.revision)])
    one = nnvm.compile(model, target="llvm", shapes={"x": (1, 16, 14, 14)}, tuning_log=str(log))
    eight = nnvm.compile(model, target="llvm", shapes={"x": (8, 16, 14, 14)}, tuning_log=str(log))
    assert one.stats()["tuned_kernels"] == 1 and eight.stats()["tuned_kernels"] == 1
    (why,) = one.stats()["tuning"]["kernels"].values()
    assert str(log) in why and "exact" in why and "tuned at" not in why
    (why8,) = eight.stats()["tuning"]["kernels"].values()
    assert str(log) in why8 and "tuned at batch 1" in why8
    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((8, 16, 14, 14)).astype(np.float32)
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = eight.run(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    (got1,) = one.run(x[:1])
    np.testing.assert_allclose(got1, want[:1], rtol=1e-4, atol=1e-4)
    # a batch-8 record of its own wins over the borrowed one
    logmod.append(log, [logmod.Record(task8.target, task8.template, task8.workload, task8.fallback, 1e-3,
                                      signature=signature, revision=task8.revision)])
    eight = nnvm.compile(model, target="llvm", shapes={"x": (8, 16, 14, 14)}, tuning_log=str(log))
    (why8,) = eight.stats()["tuning"]["kernels"].values()
    assert "tuned at" not in why8
    np.testing.assert_allclose(eight.run(x)[0], want, rtol=1e-4, atol=1e-4)


def test_compile_stats_say_which_log_served_each_kernel(tmp_path, monkeypatch, capsys):
    from nnvm.cli import main

    model = conv_model(str(tmp_path / "conv.onnx"), 1)
    (task,) = extract_tasks(model, target="llvm")
    target = parse_target("llvm")
    log = tmp_path / "mine.jsonl"
    logmod.append(log, [logmod.Record(task.target, task.template, task.workload, task.fallback, 1e-4,
                                      signature=target.backend.cpu_signature(target),
                                      revision=task.revision)])
    shipped = target.backend.default_tuning_logs(target)
    monkeypatch.setattr(type(target.backend), "default_tuning_logs", lambda self, t: [str(log), *shipped])
    assert main(["compile", model, "--target", "llvm", "-o", str(tmp_path / "conv.so"), "--stats"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"tuned_kernels: 1 of [23]\n", out)  # the conv; layout transforms have no template
    assert f"cpu signature: {target.backend.cpu_signature(target).describe()}" in out
    assert f"tuning log {log} (shipped): 1 kernel(s)" in out and "    exact [" in out
    assert f"_conv2d_winograd_nchwc: {log} (shipped; exact)" in out
    # each log's matches, as the lines under its "tuning log" line: ours exact; the shipped one's
    # machine (512-bit) refused only on a host of another vector width (AVX2), and said so
    blocks = {m[0]: m[1] for m in re.findall(r"  tuning log (\S+) .*\n((?:    .*\n)*)", out)}
    assert blocks[str(log)].startswith("    exact [") and "refused" not in blocks[str(log)]
    bits = target.backend.cpu_signature(target).vector_bits
    machines = {r.signature for r in logmod.read(shipped_log())}
    refused = re.findall(r"    refused: (.*)\n", blocks[shipped_log()])
    want = [f"tuned with {m.vector_bits}-bit vectors, not {bits}-bit [{m.describe()}]"
            for m in machines if m.vector_bits != bits]
    assert sorted(refused) == sorted(want), blocks[shipped_log()]


def test_a_record_of_an_older_revision_of_its_template_is_passed_over(tmp_path):
    """A template whose code changed what a config means bumps its revision: the configs measured on
    the old code (the shipped log's, tuned before) are stale and never applied."""
    model = conv_model(str(tmp_path / "conv.onnx"), 1)
    (task,) = extract_tasks(model, target="llvm")
    assert task.revision >= 2  # the conv2d_nchwc / Winograd templates' register tiles changed
    target = parse_target("llvm")
    log = tmp_path / "old.jsonl"
    logmod.append(log, [logmod.Record(task.target, task.template, task.workload, task.fallback, 1e-4,
                                      signature=target.backend.cpu_signature(target),
                                      revision=task.revision - 1)])
    assert logmod.read(log)[0].revision == task.revision - 1
    mod = nnvm.compile(model, target="llvm", tuning_log=str(log))
    assert mod.stats()["tuned_kernels"] == 0 and mod.stats()["tuning"]["kernels"] == {}
    # the tuner resumes only from records of the current revision: the old one is not "already tuned"
    from nnvm.autotune.driver import _same_task

    (old,) = logmod.read(log)
    assert not _same_task(task, old, target.backend.cpu_signature(target))

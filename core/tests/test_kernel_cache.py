"""The kernel cache on its own (no backend): framing, corrupt entries, concurrent writers, eviction,
where it lives, and how ``compile_kernels`` uses it."""

import multiprocessing
import os
import types
from pathlib import Path

import pytest

from nnvm.errors import Error
from nnvm.kernel_cache import (
    DEFAULT_MAX_BYTES,
    MAGIC,
    KernelCache,
    default_kernel_cache,
    kernel_key,
    source_fingerprint,
)
from nnvm.kernel_jobs import KernelJob, compile_kernels


def test_roundtrip_and_missing(tmp_path):
    cache = KernelCache(tmp_path / "k")
    assert cache.get("a") is None
    cache.put("a", b"payload-a")
    assert cache.get("a") == b"payload-a"
    assert cache.get("b") is None
    assert not list((tmp_path / "k").glob("??/.tmp-*")), "a temporary file was left behind"


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "magic", "longer"])
def test_corrupt_entry_is_ignored_and_rebuilt(tmp_path, damage):
    cache = KernelCache(tmp_path)
    cache.put("k", b"x" * 1000)
    path = cache.path("k")
    data = path.read_bytes()
    broken = {"truncate": data[:len(data) // 2], "flip": data[:-10] + bytes([data[-10] ^ 1]) + data[-9:],
              "empty": b"", "magic": b"NOTNNVM\n" + data[len(MAGIC):], "longer": data + b"tail"}[damage]
    path.write_bytes(broken)
    assert cache.get("k") is None, f"a {damage}d entry was served"
    assert not path.exists(), "the corrupt entry was not removed"
    made = []
    results, counts = compile_kernels([KernelJob("f", "k")], lambda job: made.append(job) or b"x" * 1000,
                                      cache, n_jobs=1)
    assert results == [b"x" * 1000] and counts.compiled == 1 and counts.cached == 0 and len(made) == 1
    assert cache.get("k") == b"x" * 1000


def test_entry_the_backend_refuses_is_rebuilt(tmp_path):
    cache = KernelCache(tmp_path)
    cache.put("k", b"old format")
    results, counts = compile_kernels([KernelJob("f", "k")], lambda job: b"new format", cache, n_jobs=1,
                                      validate=lambda data: data.startswith(b"new"))
    assert results == [b"new format"] and counts.compiled == 1
    assert cache.get("k") == b"new format"


def _writer(directory: str, seed: int, rounds: int) -> None:
    cache = KernelCache(directory)
    for i in range(rounds):
        key = f"key{(i * 7 + seed) % 5}"
        cache.put(key, (key * 20000).encode())  # every writer writes the same bytes for a key
        got = cache.get(key)
        assert got is None or got == (key * 20000).encode(), f"writer {seed} read a torn {key}"


def test_concurrent_writers_never_show_a_torn_entry(tmp_path):
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_writer, args=(str(tmp_path), seed, 40)) for seed in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    cache = KernelCache(tmp_path)
    for k in range(5):
        assert cache.get(f"key{k}") == (f"key{k}" * 20000).encode()
    assert not list(tmp_path.glob("??/.tmp-*")), "a writer left a temporary file"


def test_eviction_drops_least_recently_used(tmp_path):
    cache = KernelCache(tmp_path, max_bytes=10_000)
    for k in range(8):
        cache.put(f"k{k}", bytes(2000))
        os.utime(cache.path(f"k{k}"), (1000 + k, 1000 + k))
    cache.get("k0")  # used now: the newest
    removed = cache.evict()
    assert removed > 0 and cache.size() <= 8000
    assert cache.get("k0") is not None, "the entry just used was evicted"
    assert cache.get("k1") is None and cache.get("k2") is None, "the oldest entries were kept"


def test_compile_kernels_dedups_reads_and_writes(tmp_path):
    cache = KernelCache(tmp_path)
    jobs = [KernelJob(f"f{i}", f"key{i}") for i in range(3)]
    first, counts = compile_kernels(jobs, lambda job: job.key.encode(), cache, n_jobs=1)
    assert (counts.compiled, counts.cached) == (3, 0)
    refuse = lambda job: pytest.fail("compiled a cached kernel")  # noqa: E731
    again, counts = compile_kernels(jobs, refuse, cache, n_jobs=1)
    assert again == first and (counts.compiled, counts.cached) == (0, 3)
    _, counts = compile_kernels(jobs, lambda job: job.key.encode(), cache, n_jobs=1, read_cache=False)
    assert counts.compiled == 3


def test_parallel_workers_give_what_serial_gives(tmp_path):
    jobs = [KernelJob(f"f{i}", f"key{i}") for i in range(6)]
    make = lambda job: (job.key * 3).encode() + bytes([os.getpid() % 1])  # noqa: E731
    serial, _ = compile_kernels(jobs, make, None, n_jobs=1)
    parallel, counts = compile_kernels(jobs, make, None, n_jobs=2)
    assert counts.jobs == 2 and parallel == serial


def test_a_failing_worker_job_raises_in_the_parent(tmp_path):
    def make(job):
        if job.key == "key3":
            raise Error("node n3 (conv2d): cannot be lowered")
        return job.key.encode()

    jobs = [KernelJob(f"f{i}", f"key{i}") for i in range(6)]
    with pytest.raises(Error, match="node n3"):
        compile_kernels(jobs, make, KernelCache(tmp_path), n_jobs=2)


def test_default_location_and_overrides(tmp_path):
    home = os.path.join(os.path.expanduser("~"), ".cache", "nnvm", "kernels")
    assert str(default_kernel_cache({}).directory) == home
    assert str(default_kernel_cache({"NNVM_CACHE_DIR": str(tmp_path)}).directory) == str(tmp_path / "kernels")
    own = default_kernel_cache({"NNVM_CACHE_DIR": "/x", "NNVM_KERNEL_CACHE_DIR": str(tmp_path / "own")})
    assert str(own.directory) == str(tmp_path / "own")
    assert default_kernel_cache({"NNVM_KERNEL_CACHE_DIR": "off"}) is None
    # the cap is the default: a program wanting another passes KernelCache(directory, max_bytes)
    assert default_kernel_cache({}).max_bytes == DEFAULT_MAX_BYTES == 2 * 1024**3


def test_key_holds_every_input():
    base = dict(workload="w", outputs=[[0, 0]], schedule={"template": None}, switches={"S": "1"},
                backend_identity="cpu-a", compiler="c1")
    key = kernel_key(**base)
    for field, other in [("workload", "w2"), ("outputs", [[1, 0]]), ("schedule", {"template": "t"}),
                         ("switches", {"S": "0"}), ("backend_identity", "cpu-b"), ("compiler", "c2")]:
        assert kernel_key(**{**base, field: other}) != key, f"{field} is not part of the key"


def test_source_fingerprint_follows_every_source_file(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "gen.py").write_text("A = 1\n")
    (package / "pool.c").write_text("int x;\n")
    module = types.SimpleNamespace(__file__=str(package / "__init__.py"), __path__=[str(package)])
    single = types.SimpleNamespace(__file__=str(tmp_path / "alone.py"))
    (tmp_path / "alone.py").write_text("B = 2\n")
    first = source_fingerprint(module, single)
    assert source_fingerprint(module, single) == first
    for path, text in [(package / "sub" / "gen.py", "A = 2\n"), (package / "pool.c", "int y;\n"),
                       (tmp_path / "alone.py", "B = 3\n")]:
        path.write_text(text)
        changed = source_fingerprint(module, single)
        assert changed != first, f"editing {path.name} left the fingerprint as it was"
        first = changed


def test_source_fingerprint_leaves_out_what_generates_no_kernel(tmp_path):
    package = tmp_path / "pkg"
    (package / "front").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "gen.py").write_text("A = 1\n")
    (package / "cli.py").write_text("B = 1\n")
    (package / "front" / "read.py").write_text("C = 1\n")
    module = types.SimpleNamespace(__file__=str(package / "__init__.py"), __path__=[str(package)])
    first = source_fingerprint(module, leave_out=("cli.py", "front"))
    for path in (package / "cli.py", package / "front" / "read.py"):
        path.write_text("X = 2\n")
        assert source_fingerprint(module, leave_out=("cli.py", "front")) == first, path.name
    (package / "gen.py").write_text("A = 2\n")
    assert source_fingerprint(module, leave_out=("cli.py", "front")) != first


def test_the_core_leaves_out_only_files_that_exist():
    import nnvm
    from nnvm.compiler import NOT_KERNEL_SOURCE

    root = Path(nnvm.__file__).parent
    missing = [entry for entry in NOT_KERNEL_SOURCE if not (root / entry).exists()]
    assert not missing, f"{missing} name no file: a renamed module is kept in the key unnoticed"

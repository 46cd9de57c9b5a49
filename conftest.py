"""Policy for every test in the repository: markers, skips under CI, Hypothesis settings.

- Markers: ``gpu`` (needs a GPU or a GPU toolchain) and ``slow`` (takes more than a few seconds).
- Skips: a test may skip on a developer's machine that lacks a toolchain. Under ``CI=true`` a skip is
  a failure carrying the skip reason, unless the test is marked ``gpu``: the CI machine has every CPU
  toolchain, so a skip there means a test quietly stopped testing. This covers skips in setup and in
  the test body, and module-level skips (``pytest.importorskip`` at import), which fail under CI; a
  GPU module should mark itself ``pytestmark = [pytest.mark.gpu, pytest.mark.skipif(...)]`` instead.
  Expected failures (``xfail``) are left alone.
- Kernel cache: the whole run (every xdist worker, and later runs) shares one kernel cache outside the
  checkout and outside ``~/.cache`` (``$NNVM_KERNEL_CACHE_DIR``, unless the caller set it), so models
  compiled by many tests are compiled once. A test that uses ``monkeypatch`` gets no cache: a patched
  function is not part of a kernel's key, and a cached kernel would skip the code it patched.
- Hypothesis: under CI, examples are derandomized (same examples every run, so a failure reproduces)
  and the per-example deadline is off (timings on a shared runner are noise).
- CPU switches: the ``cpu_switch`` fixture sets one of the CPU layer's A/B switches for the rest of a
  test (``cpu_switch("layout", "0")``; ``None`` unsets it) in the active ``nnvm.Options``, which every
  ``nnvm.compile`` without ``options=`` starts from: switches are options, not environment variables.
- The host: what a test knows of the machine (vector width, caches, team size) comes from the ``host``
  fixture (``nnvm_testing.hosts``). ``--host-cpu=NAME`` (``haswell``, ``znver5``, ``skylake-avx512``
  ...) runs the whole suite as if on that CPU: the compiler assumes it (``nnvm.target.assume_host``)
  wherever a target names no CPU; code that runs is still built for a CPU this machine runs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import pytest

from nnvm import options
from nnvm.errors import TargetError
from nnvm.target import assume_host, assumed_host
from nnvm_testing.hosts import describe_host, host_cpu_named

pytest_plugins = ["pytester"]


def _in_ci() -> bool:
    return os.environ.get("CI") == "true"


def pytest_addoption(parser):
    parser.addoption("--host-cpu", default=None, metavar="NAME",
                     help="run as if on this CPU (LLVM's name: haswell, skylake-avx512, znver5 ...): the "
                          "compiler's default target and the host facts tests read are that CPU's")


def pytest_configure(config):
    name = config.getoption("--host-cpu")
    if name:
        # Set before collection, in every xdist worker too (each runs pytest_configure).
        assume_host(host_cpu_named(name))
    config.addinivalue_line("markers", "gpu: needs a GPU or a GPU toolchain; the only tests that may skip "
                                       "under CI=true")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


def pytest_report_header(config):
    """Which CPU the run reasons about, and where code runs when this machine cannot run that CPU's."""
    name = config.getoption("--host-cpu")
    head = f"host cpu: {name} (assumed, --host-cpu)" if name else "host cpu: this machine's"
    try:
        found = describe_host()
    except TargetError:  # no backend for ``llvm``: nothing compiles for the host
        return [head]
    return [f"{head}: {found.describe()}" + (f"; {found.note}" if found.note else "")]


@pytest.fixture(scope="session")
def host():
    """The host the tests reason about (``nnvm_testing.hosts.Host``): this machine, or ``--host-cpu``'s
    CPU. Needs a backend for ``llvm`` (the x86 plugin); a core test without one does not ask."""
    found = describe_host()
    if found.note:
        print(f"\nhost cpu: {found.note}")
    return found


@pytest.fixture
def assume_cpu():
    """``assume_cpu("rocketlake")`` (a name or a ``HostCPU``; None: this machine): compile as if on that
    CPU for the rest of the test (``nnvm.target.assume_host``); the run's own host comes back after it."""
    previous = assumed_host()
    yield lambda cpu: assume_host(host_cpu_named(cpu) if isinstance(cpu, str) else cpu)
    assume_host(previous)


def _fail_skip(report) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped under CI=true, where only tests marked 'gpu' may skip: {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if (report.skipped and _in_ci() and not hasattr(report, "wasxfail")
            and item.get_closest_marker("gpu") is None):
        _fail_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    if report.skipped and _in_ci() and collector.get_closest_marker("gpu") is None:
        _fail_skip(report)
    return report


try:
    from hypothesis import settings
except ImportError:  # the core's tests can run without the dev group
    pass
else:
    settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
    if _in_ci():
        settings.load_profile("ci")


@pytest.fixture(autouse=True, scope="session")
def _shared_kernel_cache():
    if "NNVM_KERNEL_CACHE_DIR" in os.environ:
        yield
        return
    shared = os.path.join(tempfile.gettempdir(), f"nnvm-test-kernels-{os.getuid()}")
    os.environ["NNVM_KERNEL_CACHE_DIR"] = shared
    yield
    os.environ.pop("NNVM_KERNEL_CACHE_DIR", None)


@pytest.fixture(autouse=True)
def _no_kernel_cache_when_patched(request):
    if "monkeypatch" in request.fixturenames:
        request.getfixturevalue("monkeypatch").setenv("NNVM_KERNEL_CACHE_DIR", "off")
    yield


@pytest.fixture
def cpu_switch():
    """``cpu_switch(name, value)``: that CPU switch set (``None``: unset) for the rest of the test."""
    with contextlib.ExitStack() as stack:
        def set_switch(name: str, value: str | None) -> None:
            current = options.active() or options.Options()
            stack.enter_context(options.activated(current.with_switches(**{name: value})))

        yield set_switch

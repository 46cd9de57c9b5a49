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
"""

from __future__ import annotations

import os
import tempfile

import pytest

pytest_plugins = ["pytester"]


def _in_ci() -> bool:
    return os.environ.get("CI") == "true"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a GPU or a GPU toolchain; the only tests that may skip "
                                       "under CI=true")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


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

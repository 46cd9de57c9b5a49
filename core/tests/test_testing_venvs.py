"""``nnvm_testing.venvs``: the cached reference venvs' bookkeeping (no venv is built here)."""

from __future__ import annotations

import pytest

from nnvm_testing import venvs


def test_ready_venv_needs_the_exact_spec(tmp_path, monkeypatch):
    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path))
    assert venvs.ready_venv("ref", ["pkg==1"]) is None
    (tmp_path / "venvs" / "ref").mkdir(parents=True)
    (tmp_path / "venvs" / "ref" / ".nnvm-complete").write_text("python3.11 pkg==1")
    assert venvs.ready_venv("ref", ["pkg==1"]) == tmp_path / "venvs" / "ref" / "bin" / "python"
    assert venvs.ready_venv("ref", ["pkg==2"]) is None  # a changed requirement rebuilds
    assert venvs.build_venv("ref", ["pkg==1"]) == tmp_path / "venvs" / "ref" / "bin" / "python"


def test_missing_uv_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("UV", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(venvs.VenvUnavailable, match="uv is not on PATH"):
        venvs.build_venv("ref", ["pkg==1"])


def _unavailable():
    raise venvs.VenvUnavailable("no tool")


def _broken():
    raise venvs.VenvBuildError("pip said no")


def test_pytest_venv_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="no tool"):
        venvs.pytest_venv(_unavailable)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="cannot be built under CI: no tool"):
        venvs.pytest_venv(_unavailable)
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.fail.Exception, match="pip said no"):
        venvs.pytest_venv(_broken)
    assert venvs.pytest_venv(lambda x: x + 1, 1) == 2


def test_run_checked_reports_the_output_tail(tmp_path):
    with pytest.raises(venvs.VenvBuildError, match=r"(?s)listing failed \(exit \d\).*nope"):
        venvs.run_checked(["ls", str(tmp_path / "nope")], "listing", 30)

"""The ``NNVM_X86_*`` switches: a value outside a switch's choices is one sentence naming the variable
(exit status 1 from the CLI), never a traceback or a silent "off"."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nnvm.cpu.switches import SWITCHES, enabled, switch
from nnvm.errors import Error


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_a_value_outside_the_choices_names_the_variable(monkeypatch, name):
    monkeypatch.setenv(name, "maybe")
    with pytest.raises(Error, match=f"{name}='maybe': must be one of"):
        switch(name)


def test_unset_or_empty_is_the_default(monkeypatch):
    monkeypatch.delenv("NNVM_X86_LAYOUT", raising=False)
    assert enabled("NNVM_X86_LAYOUT")
    monkeypatch.setenv("NNVM_X86_LAYOUT", "")
    assert enabled("NNVM_X86_LAYOUT")
    monkeypatch.setenv("NNVM_X86_LAYOUT", "0")
    assert not enabled("NNVM_X86_LAYOUT")
    monkeypatch.delenv("NNVM_X86_WINOGRAD", raising=False)
    assert switch("NNVM_X86_WINOGRAD") is None  # the backend's own rule decides


def test_cli_reports_a_bad_switch_in_one_line(tmp_path, conv_model):
    path = conv_model(str(tmp_path / "conv.onnx"), 16, 8)
    env = dict(os.environ, NNVM_X86_WINOGRAD_TILE="3")
    proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "compile", path, "--target", "llvm"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "NNVM_X86_WINOGRAD_TILE='3': must be one of 2, 4" in lines[0], proc.stderr

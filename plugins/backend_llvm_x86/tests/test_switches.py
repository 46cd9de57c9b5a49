"""The CPU switches (``Options.cpu_switches``): a value outside a switch's choices is one sentence naming
the switch (exit status 1 from the CLI), never a traceback or a silent "off"."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nnvm.cpu.switches import SWITCHES, enabled, switch
from nnvm.errors import Error
from nnvm.options import Options, activated


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_a_value_outside_the_choices_names_the_switch(name):
    with activated(Options(cpu_switches={name: "maybe"})), \
            pytest.raises(Error, match=f"cpu switch {name}='maybe': must be one of"):
        switch(name)


def test_unset_is_the_default(cpu_switch, monkeypatch):
    assert enabled("layout")
    cpu_switch("layout", "0")
    assert not enabled("layout")
    cpu_switch("layout", None)
    assert enabled("layout")
    monkeypatch.setenv("NNVM_X86_LAYOUT", "0")  # no longer a variable: the environment changes nothing
    assert enabled("layout")
    assert switch("winograd") is None  # the backend's own rule decides


def test_cli_reports_a_bad_switch_in_one_line(tmp_path, conv_model):
    path = conv_model(str(tmp_path / "conv.onnx"), 16, 8)
    for flag, says in (("winograd_tile=3", "cpu switch winograd_tile='3': must be one of 2, 4"),
                       ("winograd", "--cpu-switch 'winograd': write NAME=VALUE"),
                       ("layuot=0", "cpu switch 'layuot' does not exist")):
        proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "compile", path, "--target", "llvm",
                               "--cpu-switch", flag, "-o", str(tmp_path / "conv.so")],
                              capture_output=True, text=True)
        assert proc.returncode == 1, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], proc.stderr


def test_cli_compiles_with_a_switch(tmp_path, conv_model):
    path = conv_model(str(tmp_path / "conv.onnx"), 16, 8)
    proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "compile", path, "--target", "llvm",
                           "--cpu-switch", "layout=0", "-o", str(tmp_path / "conv.so")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr

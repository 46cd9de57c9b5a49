"""docs/onnx-coverage.md agrees with the expected-failure list, and the command that writes it runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from nnvm_testing.frontend_onnx import node_cases
from nnvm_testing.frontend_onnx.expected_failures import EXPECTED_FAILURES

ROOT = Path(__file__).resolve().parents[3]


def test_coverage_doc_totals_match_the_expected_failures():
    text = (ROOT / "docs" / "onnx-coverage.md").read_text()
    m = re.search(r"\*\*(\d+) / (\d+) eligible cases pass", text)
    assert m, "docs/onnx-coverage.md has no totals line; run scripts/gen_onnx_coverage.py"
    passed, eligible = int(m.group(1)), int(m.group(2))
    assert eligible == len(node_cases.eligible_cases()), "stale: regenerate with scripts/gen_onnx_coverage.py"
    assert passed == eligible - len(EXPECTED_FAILURES), (
        f"docs/onnx-coverage.md says {passed} pass, the expected-failure list implies "
        f"{eligible - len(EXPECTED_FAILURES)}: regenerate with scripts/gen_onnx_coverage.py")


def test_coverage_command_runs():
    env = dict(os.environ, NNVM_PLUGINS="onnx,llvm-x86")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_onnx_coverage.py"), "-k", "^test_abs$",
                          "--no-write", "-j", "1"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "eligible" in out.stdout and "1 / 1 passed" in out.stdout, out.stdout

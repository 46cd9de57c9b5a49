"""Generated documentation matches what the code prints today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tensor_expression_docs_are_current():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_te_docs.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"docs/tensor-expressions.md is stale: {proc.stdout}{proc.stderr}"

"""``bench/matmul.py`` on a small size: every schedule it times computes numpy's product (the script
exits with an error naming the schedule otherwise) and the report has its ratio line. No timing asserts."""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_bench_matmul_small():
    script = os.path.join(ROOT, "bench", "matmul.py")
    out = subprocess.run([sys.executable, script, "--n", "128", "--threads", "1", "--repeat", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"bench/matmul.py failed: {out.stderr or out.stdout}"
    for name in ("api.md schedule", "packed B", "packed B + gemm"):
        assert re.search(rf"^\s+{re.escape(name)}\s.*ratio\s+[\d.]+", out.stdout, re.M), out.stdout
    assert "best hand-written schedule" in out.stdout, out.stdout


def test_bench_matmul_rejects_a_size_the_packed_panels_do_not_divide():
    """--n 100 is not a multiple of the 32-column panel: a clear usage error, not a crash reading past
    the packed copy of B."""
    script = os.path.join(ROOT, "bench", "matmul.py")
    out = subprocess.run([sys.executable, script, "--n", "100", "--threads", "1", "--repeat", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, f"exit status {out.returncode}: {out.stderr or out.stdout}"
    assert "--n 100" in out.stderr and "multiple of 32" in out.stderr, out.stderr

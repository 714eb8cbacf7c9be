"""benchmarks/train_memory.py runs: one arm on the embedded policy, one JSON line of resident memory."""
import json
import subprocess
import sys
from pathlib import Path

from specrl.tasks import default_policy_path

ROOT = Path(__file__).parents[2]


def test_one_arm_prints_its_memory_row():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_memory.py"), "--model",
                          str(default_policy_path()), "--rows", "2", "--tokens", "16", "--thresholds", "",
                          "--checkpointing", "on", "--threads", "1"], capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["rows"] == 2 and row["checkpointing"] == "on" and row["mmap_threshold"] == "glibc default"
    assert row["peak_mib"] >= row["start_mib"] > 0

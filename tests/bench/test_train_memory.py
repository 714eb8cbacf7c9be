"""`specrl bench train-memory`: one arm, in its own process, on the embedded policy: one JSON line of resident
memory."""
import json

from specrl.cli.main import main


def test_one_arm_prints_its_memory_row(capsys):
    assert main(["bench", "train-memory", "--rows", "2", "--tokens", "16", "--thresholds", "", "--checkpointing",
                 "on", "--threads", "1"]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["rows"] == 2 and row["checkpointing"] == "on" and row["mmap_threshold"] == "glibc default"
    assert row["peak_mib"] >= row["start_mib"] > 0
    assert row["after_backward_mib"] > 0 and {"forward_s", "backward_s"} <= set(row)

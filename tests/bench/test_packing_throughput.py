"""`specrl bench packing-throughput`: record a tiny run's batches, then time packed against padded updates."""
import json

from specrl.cli.main import main
from tests.bench.conftest import train_overrides


def test_record_then_time_packed_against_padded(tiny_task, tmp_path, capsys):
    batches = tmp_path / "batches.pt"
    assert main(["bench", "packing-throughput", "--record", str(batches), "--steps", "1",
                 *train_overrides(*tiny_task)]) == 0
    assert batches.stat().st_size > 0
    capsys.readouterr()
    png = tmp_path / "p.png"
    assert main(["bench", "packing-throughput", "--batches", str(batches), "--repeats", "1", "--equal-length", "4",
                 "--out", str(png)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    timed = [r for r in rows if "update_s" in r]
    summary = {r["batch"]: r for r in rows if r.get("summary")}
    assert sorted((r["batch"], r["arm"]) for r in timed) == [("equal_len4", "packed"), ("equal_len4", "padded"),
                                                             ("step1", "packed"), ("step1", "padded")]
    step, equal = summary["step1"], summary["equal_len4"]
    assert step["speedup"] == step["padded_s"] / step["packed_s"] and step["rows"] == 2 * 2  # prompts x n
    assert equal["real_tokens"] == equal["rows"] * 4  # every row cut to 4 positions: nothing to pad
    assert rows[-1]["overall"] and rows[-1]["repeats"] == 1 and png.stat().st_size > 0


def test_timing_needs_recorded_batches(tmp_path, capsys):
    assert main(["bench", "packing-throughput", "--batches", str(tmp_path / "none.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specrl bench: error: --batches ") and err.endswith(f"--record {tmp_path / 'none.pt'}")


def test_recording_leaves_no_run_directory_behind(tiny_task, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the config's default out_dir is relative: runs/train
    assert main(["bench", "packing-throughput", "--record", "b.pt", "--steps", "1", *train_overrides(*tiny_task)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.pt"]

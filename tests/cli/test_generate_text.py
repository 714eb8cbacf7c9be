"""`specrl generate --chat --threads N`: prompts go through the chat template; torch uses N threads."""
from __future__ import annotations

import json

import pytest
import torch

from specrl.cli.generate import main
from specrl.threads import free_cpus, set_threads
from specrl.model import load_text_tokenizer, save_model
from tests.helpers import tiny_model
from tests.model.chat_tokenizers import save_chat_tokenizer


def test_generate_chat_applies_the_template(tmp_path, keep_threads):
    d = save_model(tiny_model(seed=2, vocab=300, hidden=32, max_pos=256), tmp_path / "m")
    save_chat_tokenizer(d, "smollm2")
    out = tmp_path / "out.jsonl"
    args = ["--model", str(d), "--prompt", "Hi there", "--temperature", "0", "--max-tokens", "3", "--out", str(out)]
    assert main(args + ["--chat", "--threads", "1"]) == 0
    assert torch.get_num_threads() == 1
    row = json.loads(out.read_text())
    conv = [{"role": "user", "content": "Hi there"}]
    assert row["prompt"] == load_text_tokenizer(d).apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
    assert main(args) == 0
    assert json.loads(out.read_text())["prompt"] == "Hi there"  # without --chat the text goes in as it is


def test_threads_default_to_the_free_cores(keep_threads, monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr("os.getloadavg", lambda: (1.4, 0.0, 0.0))
    assert free_cpus() == 3  # 4 cores, 1 busy
    assert set_threads(None) == 3 and torch.get_num_threads() == 3
    monkeypatch.setattr("os.getloadavg", lambda: (10.0, 0.0, 0.0))
    assert free_cpus() == 1  # an overloaded machine still gets one thread
    assert set_threads(1) == 1 and torch.get_num_threads() == 1
    with pytest.raises(ValueError, match="--threads 0: expected a positive number"):
        set_threads(0)


def test_generate_reads_chat_messages_rows(tmp_path, keep_threads):
    """A --prompts file row with `messages` goes through the chat template as it is (system turn kept); a
    `prompt` row of the same file becomes a user turn."""
    d = save_model(tiny_model(seed=2, vocab=300, hidden=32, max_pos=256), tmp_path / "m")
    save_chat_tokenizer(d, "smollm2")
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rows = tmp_path / "p.jsonl"
    rows.write_text(json.dumps({"messages": conv, "answer": "x"}) + "\n" + json.dumps({"prompt": "Yo"}) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["--model", str(d), "--prompts", str(rows), "--temperature", "0", "--max-tokens", "2",
                 "--out", str(out), "--threads", "1"]) == 0
    got = [json.loads(line)["prompt"] for line in out.read_text().splitlines()]
    tok = load_text_tokenizer(d)
    assert got == [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False)
                   for c in (conv, [{"role": "user", "content": "Yo"}])]


def test_repeated_prompts_get_their_own_random_draws(tmp_path, keep_threads):
    """--seed makes a run reproducible without making equal prompts equal samples: each prompt gets its own
    seed, so the same prompt twice at temperature 1 is two independent samples."""
    d = save_model(tiny_model(seed=2, vocab=300, hidden=32, max_pos=256), tmp_path / "m")
    save_chat_tokenizer(d, "smollm2")
    rows = tmp_path / "p.jsonl"
    rows.write_text("".join(json.dumps({"prompt": "Yo"}) + "\n" for _ in range(4)))
    out = tmp_path / "out.jsonl"
    args = ["--model", str(d), "--prompts", str(rows), "--temperature", "1", "--max-tokens", "12",
            "--out", str(out), "--threads", "1", "--seed", "5"]
    assert main(args) == 0
    first = [json.loads(line)["token_ids"] for line in out.read_text().splitlines()]
    assert len({tuple(t) for t in first}) == 4  # 12 tokens over 300: equal samples would be a shared stream
    assert main(args) == 0
    assert [json.loads(line)["token_ids"] for line in out.read_text().splitlines()] == first

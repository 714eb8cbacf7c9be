"""`specrl bench audit`: the sampler audit's calibration, power and cost, as the default run sees it.

Every measurement is a sequence of steps shaped like the default run's: the chain task's 8 prompts of step s,
of which the 2 groups a run's step audits (`choose_groups` on the seed and step, rollout.audit_groups=2) are
generated (8 samples each, seeded per step and prompt) by the engine on one path, and audited under the
shipped policy at temperature 1 (`score_completions`, what the trainer computes). A path's steps are one
e-process, as one run's are. Rows go to a JSONL file (resumable: a step already there is skipped).

    specrl bench audit calibration --out FILE --paths off ngram suffix --steps 150 --max-tokens 32
    specrl bench audit power --out FILE --faults temp_1.1 accept_all --steps 10 --max-tokens 1100
    specrl bench audit dumps --out FILE DUMP.jsonl ...      (another engine's completions, 16 rows a step)
    specrl bench audit summary --rows FILE ... [--out FILE.png] [--runs RUN_DIR ...]

Faults (built here, never in the product): temp_1.1 / temp_0.9 / top_p_0.9 are sampled so and audited at
temperature 1, top-p 1; bonus_pq (the bonus token after k accepted drafts drawn from max(p - q_k, 0)),
residual_p (a rejection resamples from p) and accept_all (every draft accepted) replace the engine's verify
under the default SD method (`auto`). The summary gives steps to the alarm for the e-process (alpha 1e-3) and,
side by side, for the PIT z's old windowed alarm (5 steps, Stouffer, |z| > 3.29), and the audit's share of
each train step (`sampler_s / step_s` of run directories).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import time
from pathlib import Path

import torch

from specrl.config.renamed import rename
from specrl.audit import EProcess, StepEvidence, TokenScorer, choose_groups, score_completions, step_evidence
from specrl.errors import MissingFileError
from specrl.pipeline.run_dir import read_jsonl

ALPHA = 1e-3
GROUPS, N, PROMPTS = 2, 8, 8  # the default run: 2 audited groups of 8 samples, of 8 prompts a step
PIT_WINDOW, PIT_Z = 5, 3.2905267314918945  # the PIT's former alarm: Stouffer over 5 steps, two-sided 1e-3
FAULTS = {"temp_1.1": ("off", {"temperature": 1.1}), "temp_0.9": ("off", {"temperature": 0.9}),
          "top_p_0.9": ("off", {"top_p": 0.9}), "bonus_pq": ("auto", {}), "residual_p": ("auto", {}),
          "accept_all": ("auto", {})}


def paths() -> dict:
    from specrl.engine import SpecConfig
    from specrl.tasks import default_policy_path
    assets = default_policy_path().parent / "drafters"
    return {"off": {}, "ngram": {"spec": SpecConfig(method="ngram")}, "suffix": {"spec": SpecConfig(method="suffix")},
            "draft_model": {"spec": SpecConfig(method="draft_model")}, "eagle3": {"spec": SpecConfig(method="eagle3")},
            "mtp": {"spec": SpecConfig(method="mtp", draft_model=str(assets / "mtp"))},
            "auto": {"spec": SpecConfig(method="auto")}}


def broken_verify(kind: str):
    """The engine's verify with one fault, to install with specrl.engine.replaced_verify."""
    from specrl.engine import Verdict, sample_from

    def verify(p, draft_tokens, q, u_accept, u_sample):
        B, K = draft_tokens.shape
        p_x = p[:, :K].gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, K]
        q_x = q.gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, K]
        accept = q_x > 0 if kind == "accept_all" else (u_accept * q_x < p_x) & (q_x > 0)
        n_acc = accept.long().cumprod(-1).sum(-1)  # [B]
        q_pad = torch.cat([q, torch.zeros_like(p[:, :1])], dim=1)  # [B, K+1, V]
        if kind == "bonus_pq":
            q_pad[:, K] = q[:, K - 1]
        at = n_acc[:, None, None].expand(-1, 1, p.shape[-1])
        p_at, q_at = p.gather(1, at).squeeze(1), q_pad.gather(1, at).squeeze(1)  # [B, V]
        residual = p_at if kind == "residual_p" else (p_at - q_at).clamp_min(0)
        residual = torch.where(residual.sum(-1, keepdim=True) <= 0, p_at, residual)
        extra = sample_from(residual, u_sample.gather(1, n_acc[:, None]).squeeze(1))  # [B]
        tokens = torch.cat([draft_tokens, draft_tokens.new_zeros(B, 1)], dim=1)
        return Verdict(n_acc, tokens.scatter(1, n_acc[:, None], extra[:, None]))
    return verify


class Steps:
    """The default run's audited groups of step s, generated on one engine path and audited."""

    def __init__(self, path: str, seed: int, max_tokens: int, chunk: int = 1):
        from specrl.engine import LLM
        from specrl.model import load_model
        from specrl.tasks import default_policy_path
        from specrl.config.run import TrainConfig
        from specrl.trainer.data import PromptEncoder, build_sources
        policy = str(default_policy_path())
        self.source = build_sources(TrainConfig().data, seed)[0]
        self.encoder = PromptEncoder(policy, True)
        kv = f"{chunk * GROUPS * N * (max_tokens + 400) * 10 // 1024 + 64}MiB"  # ~10 KiB a token of context
        self.llm = LLM(policy, seed=seed, max_num_seqs=chunk * GROUPS * N, kv_cache_memory=kv, **paths()[path])
        self.model = load_model(policy).eval()
        self.seed, self.max_tokens = seed, max_tokens

    def __call__(self, steps: list[int], temperature: float = 1.0, top_p: float = 1.0) -> list[tuple]:
        """(evidence, KL) of each of `steps`, generated in one engine call (seeded per step and prompt, so a
        step's samples do not depend on which steps share the call). KL: with another temperature than 1, the
        sum over the step's tokens of KL(sampled || audited), the most log-evidence any test can expect."""
        from specrl.engine import SamplingParams
        from specrl.pipeline.steps import AUDIT_SALT
        from specrl.trainer.data import step_seed
        prompts, params = [], []
        for step in steps:
            examples = self.source.batch(step, PROMPTS)
            for i in choose_groups(len(examples), GROUPS, step_seed(self.seed, step, salt=AUDIT_SALT)):
                prompts.append(self.encoder.encode(examples[i].prompt))
                params.append(SamplingParams(n=N, temperature=temperature, top_p=top_p, max_tokens=self.max_tokens,
                                             seed=step_seed(self.seed, step, salt=i + 1)))
        outs = self.llm.generate(prompts, params)
        evidence = []
        for j, step in enumerate(steps):
            part = outs[j * GROUPS:(j + 1) * GROUPS]
            ps = [list(r.prompt_token_ids) for r in part for _ in r.outputs]
            cs = [list(c.token_ids) for r in part for c in r.outputs]
            scorer = TokenScorer(1.0, seed=self.seed * 1_000_003 + step)
            ev = step_evidence(score_completions(self.model, scorer, ps, cs, rows_per_batch=16))
            evidence.append((ev, kl_tempered(self.model, ps, cs, temperature) if temperature != 1.0 else None))
        return evidence


@torch.no_grad()
def kl_tempered(model, prompts: list[list[int]], completions: list[list[int]], temperature: float) -> float:
    """sum over the completions' positions of KL(softmax(l / T) || softmax(l)): the expected log likelihood
    ratio of the sampled distribution against the audited one, an upper bound on any e-process's growth."""
    total = 0.0
    for p, c in zip(prompts, completions):
        if not c:
            continue
        logits = model(torch.tensor([p + c[:-1]])).logits[0, len(p) - 1:].double()  # [r, V]
        log_q, log_p = torch.log_softmax(logits / temperature, -1), torch.log_softmax(logits, -1)
        total += float((log_q.exp() * (log_q - log_p)).sum())
    return total


def _done(out: Path, key: str, name: str) -> list[dict]:
    return sorted((r for r in read_jsonl(out) if r.get(key) == name), key=lambda r: r["step"])


def _write(out: Path, row: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")


def _row(ev: StepEvidence, **kw) -> dict:
    return {**kw, "tokens": ev.tokens, "impossible": ev.impossible, "log_e_step": ev.log_e, "z": ev.z,
            "log_bets": ev.log_bets}


def calibration(args) -> None:
    for path in args.paths:
        have = {r["step"] for r in _done(args.out, "path", path)}
        todo = [s for s in range(args.steps) if s not in have]
        steps = Steps(path, args.seed, args.max_tokens, args.chunk) if todo else None
        for k in range(0, len(todo), args.chunk):
            t0 = time.perf_counter()
            chunk = todo[k:k + args.chunk]
            for s, (ev, _) in zip(chunk, steps(chunk)):
                _write(args.out, _row(ev, kind="calibration", path=path, step=s, max_tokens=args.max_tokens,
                                      s=(time.perf_counter() - t0) / len(chunk)))


def power(args) -> None:
    from specrl.engine import replaced_verify
    for fault in args.faults:
        path, sampling = FAULTS[fault]
        # a sampling fault runs SD off, where no verify runs; the others replace verify under `auto`
        with replaced_verify(broken_verify(fault)) if path != "off" else contextlib.nullcontext():
            power_steps(args, fault, path, sampling)


def power_steps(args, fault: str, path: str, sampling: dict) -> None:
    """`fault`'s steps not yet in --out, until both alarms rang (or --steps ran out)."""
    rows = _done(args.out, "fault", fault)
    todo = [s for s in range(args.steps) if s not in {r["step"] for r in rows}]
    steps = None
    for k in range(0, len(todo), args.chunk):
        a = alarms(rows) if rows else {"steps_e": None, "steps_pit": None}
        if a["steps_e"] is not None and a["steps_pit"] is not None:
            break  # both alarms rang
        steps = steps or Steps(path, args.seed, args.max_tokens, args.chunk)
        t0 = time.perf_counter()
        chunk = todo[k:k + args.chunk]
        for s, (ev, kl) in zip(chunk, steps(chunk, **sampling)):
            row = _row(ev, kind="power", fault=fault, path=path, step=s, max_tokens=args.max_tokens,
                       s=(time.perf_counter() - t0) / len(chunk), kl=kl)
            _write(args.out, row)
            rows.append(row)


def dumps(args) -> None:
    """Another engine's completions (e.g. vLLM's, docs/results/vllm_dumps/), GROUPS x N rows a step."""
    from specrl.model import load_model
    from specrl.tasks import default_policy_path
    model = load_model(str(args.model or default_policy_path())).eval()
    for dump in args.files:
        rows = read_jsonl(dump)
        size = GROUPS * N
        for s in range(len(rows) // size):
            part = rows[s * size:(s + 1) * size]
            ev = step_evidence(score_completions(model, TokenScorer(args.temperature, seed=s),
                                                 [r["prompt_ids"] for r in part], [r["completion_ids"] for r in part]))
            _write(args.out, _row(ev, kind="dump", fault=Path(dump).stem, step=s))


def alarms(rows: list[dict]) -> dict:
    """Steps (1-based) to the e-process's alarm at ALPHA and to the PIT's windowed alarm; None: not within."""
    e, window, steps_e, steps_pit = EProcess(), [], None, None
    for i, r in enumerate(sorted(rows, key=lambda r: r["step"]), start=1):
        e.update(StepEvidence(r["log_bets"], r["tokens"], r["impossible"], r["z"], 1.0, 1.0))
        window = (window + [r["z"]])[-PIT_WINDOW:]
        if steps_e is None and e.log_e >= math.log(1 / ALPHA):
            steps_e = i
        if steps_pit is None and abs(sum(window) / math.sqrt(len(window))) > PIT_Z:
            steps_pit = i
    return {"steps_e": steps_e, "steps_pit": steps_pit, "max_log10_e": e.max_log_e / math.log(10),
            "steps": len(rows), "tokens": e.tokens}


def summary(args) -> None:
    missing = [str(f) for f in args.rows if not Path(f).is_file()]
    if missing:
        raise MissingFileError(f"--rows {missing[0]!r} does not exist; pass the --out files of `specrl bench audit "
                               "calibration`, `power` or `dumps`")
    rows = [r for f in args.rows for r in read_jsonl(f)]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["kind"], r.get("path") if r["kind"] == "calibration" else r["fault"]), []).append(r)
    groups = {k: list({r["step"]: r for r in rs}.values()) for k, rs in groups.items()}  # a step once (the last)
    for (kind, name), rs in sorted(groups.items()):
        a = alarms(rs)
        z = [r["z"] for r in rs]
        kl = [r["kl"] for r in rs if r.get("kl") is not None]
        print(json.dumps({"kind": kind, "name": name, **a, "z_first": round(z[0], 2),
                          "z_mean": round(sum(z) / len(z), 3), "tokens_a_step": round(a["tokens"] / len(rs)),
                          **({"kl_sum": sum(kl), "kl_steps": len(kl)} if kl else {})}))
    for run in args.runs:
        m = read_jsonl(Path(run) / "metrics.jsonl")
        share = [r["sampler_s"] / r["step_s"] for r in m if "sampler_s" in r]
        print(json.dumps({"kind": "cost", "run": str(run), "steps": len(m), "sampler_s": [r.get("sampler_s") for r in m],
                          "step_s": [r["step_s"] for r in m], "share": share,
                          "share_total": sum(r.get("sampler_s", 0) for r in m) / sum(r["step_s"] for r in m)}))
    if args.out:
        plot(groups, args.out)


def plot(groups: dict, png: Path) -> None:
    """Each exact path's e-process (running maximum, log10) against 1/alpha, over its steps."""
    from specrl.errors import pyplot
    plt = pyplot("--out")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (kind, name), rs in sorted(groups.items()):
        if kind != "calibration":
            continue
        e, peak = EProcess(), []
        for r in sorted(rs, key=lambda r: r["step"]):
            e.update(StepEvidence(r["log_bets"], r["tokens"], r["impossible"], r["z"], 1.0, 1.0))
            peak.append(e.max_log_e / math.log(10))
        ax.plot(range(1, len(peak) + 1), peak, lw=1, label=f"{name} ({len(rs)} steps)")
    ax.axhline(math.log10(1 / ALPHA), color="r", ls="--", lw=1, label=f"alarm: 1/alpha = {1 / ALPHA:g}")
    ax.set_xlabel("audited step (2 groups of 8 samples)")
    ax.set_ylabel("running maximum of log10 e-value")
    ax.set_title("sampler audit on exact samplers: the e-process never nears 1/alpha")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


MODES = {"calibration": "exact samplers (SD off and each shipped drafter): the e-process must stay low",
         "power": "injected faults: steps until the e-process and the PIT window alarm",
         "dumps": "another engine's completions (JSONL of prompt_ids and completion_ids), 16 rows a step",
         "summary": "steps to the alarm per path or fault, from rows these wrote; a PNG with --out"}
RENAMED = {"--png": "--out"}  # summary's plot


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specrl bench audit", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    for name in ("calibration", "power", "dumps"):
        p = sub.add_parser(name, help=MODES[name], description=MODES[name])
        p.add_argument("--out", type=Path, required=True, help="the JSONL of rows, one a step (resumable)")
        p.add_argument("--seed", type=int, default=0, help="seed of the steps' prompts and samples")
        p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
        if name != "dumps":
            p.add_argument("--steps", type=int, default=10, help="steps of the e-process")
            p.add_argument("--max-tokens", type=int, default=1100, help="tokens per sample at most")
            p.add_argument("--chunk", type=int, default=8, help="steps generated in one engine call (each step's "
                           "samples are seeded alone, so the rows do not depend on it)")
    sub.choices["calibration"].add_argument("--paths", nargs="+", default=list(paths()),
                                            help="the engine paths: off and the shipped drafters (default: all)")
    sub.choices["power"].add_argument("--faults", nargs="+", default=list(FAULTS), choices=list(FAULTS),
                                      help="the faults to inject (default: all)")
    sub.choices["dumps"].add_argument("files", nargs="+", type=Path, help="JSONL dumps of another engine")
    sub.choices["dumps"].add_argument("--model", default=None, help="the policy directory (default: shipped)")
    sub.choices["dumps"].add_argument("--temperature", type=float, default=1.0,
                                      help="the temperature the dumps were sampled at")
    s = sub.add_parser("summary", help=MODES["summary"], description=MODES["summary"])
    s.add_argument("--rows", type=Path, nargs="+", required=True, help="JSONL files of calibration/power/dumps")
    s.add_argument("--runs", type=Path, nargs="*", default=[], help="`specrl train` run directories: the audit's "
                   "share of their step")
    s.add_argument("--out", type=Path, default=None, help="PNG of the e-processes (needs matplotlib)")
    args = ap.parse_args(rename(list(argv or []), RENAMED, "specrl bench audit"))
    if args.mode != "summary":
        torch.set_num_threads(args.threads)
    {"calibration": calibration, "power": power, "dumps": dumps, "summary": summary}[args.mode](args)
    return 0

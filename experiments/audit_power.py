"""Power of the sampler audit (issue 29): broken samplers injected into the engine for the run, step-sized
batches (8 chain-task prompts x 8 samples, `--max-tokens` each) until the alarm fires. Each batch is scored
four ways on the same tokens: the weighted randomized PIT (the audit's statistic, w = 1 - max p), the same
unweighted and weighted by sd_p[log p], and the issue's likelihood sum S = sum log p(x) + H with its null
simulated from p (400 replicate tokens per position). JSONL per batch in OUT (resumable), then a table.

    python experiments/audit_power.py --out docs/results/sampler_audit_power.jsonl --batches 6
    # the default run's steps: its budget, its 2 audited groups of 8, its SD method
    python experiments/audit_power.py --out docs/results/sampler_audit_power_default.jsonl --batches 20 \
        --max-tokens 1100 --groups 2 --method auto

Mutants (monkeypatched verify in specrl.engine.steps, or sampled at other settings than the audit assumes):
residual_p (the rejection resamples from p, not max(p - q, 0)), accept_all (every draft accepted), bonus_pq
(the bonus token after k accepted drafts drawn from max(p - q_k, 0)), reuse_uniform (the resample reuses the
accept uniform, rescaled to the rejection region: equal in law, must NOT be flagged), temp_1.1 and top_p_0.9
(sampled so, audited at temperature 1.0 / top-p 1.0).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import specrl.engine.steps as engine_steps
from audit_batches import Prompts, make_llm, policy_model, step_batch
from specrl.engine import verify as verify_mod
from specrl.engine.sampling import sample_from
from specrl.pipeline.run_dir import read_jsonl
from specrl.pipeline.steps import AUDIT_SALT
from specrl.rl.audit import SamplerAlarm, choose_groups
from specrl.train.audit import TokenScorer
from specrl.train.batch import collate
from specrl.train.data import step_seed

ORIGINAL_VERIFY = verify_mod.verify


def broken_verify(kind: str):
    def verify(p, draft_tokens, q, u_accept, u_sample):
        B, K = draft_tokens.shape
        p_x = p[:, :K].gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, K]
        q_x = q.gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, K]
        accept = (u_accept * q_x < p_x) & (q_x > 0)
        if kind == "accept_all":
            accept = q_x > 0
        n_acc = accept.long().cumprod(-1).sum(-1)  # [B]
        q_pad = torch.cat([q, torch.zeros_like(p[:, :1])], dim=1)  # [B, K+1, V]
        if kind == "bonus_pq":
            q_pad[:, K] = q[:, K - 1]
        at = n_acc[:, None, None].expand(-1, 1, p.shape[-1])
        p_at, q_at = p.gather(1, at).squeeze(1), q_pad.gather(1, at).squeeze(1)  # [B, V]
        residual = p_at if kind == "residual_p" else (p_at - q_at).clamp_min(0)
        residual = torch.where(residual.sum(-1, keepdim=True) <= 0, p_at, residual)
        u = u_sample.gather(1, n_acc[:, None]).squeeze(1)  # [B]
        if kind == "reuse_uniform":  # given a rejection, (u q - p) / (q - p) is uniform: the same law
            j = n_acc.clamp(max=K - 1)[:, None]
            ua, px, qx = u_accept.gather(1, j)[:, 0], p_x.gather(1, j)[:, 0], q_x.gather(1, j)[:, 0]
            rescaled = ((ua * qx - px) / (qx - px).clamp_min(1e-30)).clamp(1e-12, 1 - 1e-12)
            u = torch.where((n_acc < K) & (qx > px), rescaled.to(u.dtype), u)
        extra = sample_from(residual, u)
        tokens = torch.cat([draft_tokens, draft_tokens.new_zeros(B, 1)], dim=1)
        return verify_mod.Verdict(n_acc, tokens.scatter(1, n_acc[:, None], extra[:, None]))
    return verify


MUTANTS = {"residual_p": ("sd", {}), "accept_all": ("sd", {}), "bonus_pq": ("sd", {}), "reuse_uniform": ("sd", {}),
           "temp_1.1": ("off", {"temperature": 1.1}), "top_p_0.9": ("off", {"top_p": 0.9})}


@torch.no_grad()
def statistics(ps, cs, step: int, replicates: int = 400) -> dict:
    """The four statistics of one batch (audited at temperature 1, top-p 1)."""
    scorer, g = TokenScorer(1.0, seed=1000 + step), torch.Generator().manual_seed(step)
    us, ws, sds, lik, reps = [], [], [], 0.0, torch.zeros(replicates, dtype=torch.float64)
    for start in range(0, len(ps), 16):
        b = collate(ps[start:start + 16], cs[start:start + 16], [[0.0] * len(c) for c in cs[start:start + 16]],
                    torch.zeros(len(ps[start:start + 16])), 0)
        logits = policy_model()(b.input_ids).logits.float()  # [b, T, V]
        sel = b.mask > 0  # [b, T]
        rows = torch.arange(len(b.input_ids))[:, None].expand_as(sel)[sel] + start
        pos = torch.arange(b.input_ids.shape[1])[None].expand_as(sel)[sel]
        probs, x = scorer.probs(logits[sel]).double(), b.targets[sel]  # [n, V], [n]
        s = scorer(logits[sel], x, rows, pos)  # [n, 3]
        us.append(s[:, 0]), ws.append(s[:, 1])
        logp = probs.clamp_min(1e-300).log()
        H = -(probs * logp).sum(-1)  # [n]
        sds.append(((probs * logp.pow(2)).sum(-1) - H.pow(2)).clamp_min(0).sqrt())
        lik += float((logp.gather(-1, x[:, None])[:, 0] + H).sum())
        draws = torch.multinomial(probs.float(), replicates, replacement=True, generator=g)  # [n, R]
        reps += (logp.gather(-1, draws) + H[:, None]).sum(0)
    u, w, sd = torch.cat(us), torch.cat(ws), torch.cat(sds)
    z_t = torch.special.ndtri(u)
    wz = lambda wt: float((wt * z_t).sum() / wt.pow(2).sum().sqrt())  # noqa: E731
    return {"tokens": len(u), "z_pit_w": wz(w), "z_pit_1": wz(torch.ones_like(w)), "z_pit_sd": wz(sd),
            "lik_S": lik, "lik_null_mean": float(reps.mean()), "lik_null_sd": float(reps.std()),
            "z_lik": (lik - float(reps.mean())) / float(reps.std()), "weight": float(w.pow(2).sum().sqrt())}



KEYS = ("z_pit_w", "z_pit_1", "z_pit_sd", "z_lik")


def steps_to_alarm(rows: list[dict], key: str) -> int | None:
    alarm = SamplerAlarm(5)
    for i, r in enumerate(sorted(rows, key=lambda r: r["batch"]), start=1):
        if alarm.update(r[key], 1.0):
            return i
    return None


def run(out: Path, mutants: list[str], batches: int, max_tokens: int, method: str, groups: int | None) -> None:
    prompts = Prompts()
    for kind in mutants:
        path, sampling = MUTANTS[kind]
        path = method if path == "sd" else path
        name = f"{kind}@{path}" + (f"/g{groups}" if groups else "")
        engine_steps.verify = broken_verify(kind) if path != "off" else ORIGINAL_VERIFY
        llm = None
        for b in range(batches):
            have = [r for r in read_jsonl(out) if r["mutant"] == name]
            if any(r["batch"] == b for r in have):
                continue
            if kind != "reuse_uniform" and all(steps_to_alarm(have, k) for k in ("z_pit_w", "z_lik")):
                break  # both main statistics flagged it already
            llm = llm or make_llm(path, kv_cache_memory="256MiB" if max_tokens <= 256 else "1200MiB")
            t0 = time.perf_counter()
            chosen = prompts(b)
            if groups:  # a default step audits `groups` of its 8 groups (steps.audit_rows); only those are drawn
                chosen = [chosen[i] for i in choose_groups(len(chosen), groups, step_seed(0, b, AUDIT_SALT))]
            ps, cs = step_batch(llm, chosen, b, max_tokens=max_tokens, **sampling)
            row = {"mutant": name, "batch": b, "max_tokens": max_tokens, **statistics(ps, cs, b),
                   "s": time.perf_counter() - t0}
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
        engine_steps.verify = ORIGINAL_VERIFY


def table(out: Path) -> list[dict]:
    by: dict[str, list[dict]] = {}
    for r in read_jsonl(out):
        by.setdefault(r["mutant"], []).append(r)
    return [{"mutant": m, "batches": len(rs), **{f"steps_{k}": steps_to_alarm(rs, k) for k in KEYS},
             **{f"first_{k}": round(sorted(rs, key=lambda r: r["batch"])[0][k], 2) for k in KEYS}}
            for m, rs in by.items()]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mutants", nargs="+", default=list(MUTANTS))
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--method", default="ngram", help="the SD method the verify mutants run under")
    ap.add_argument("--groups", type=int, default=None,
                    help="audit only this many groups per batch, chosen as a run's step chooses them (default run: 2)")
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if not args.summary:
        run(args.out, args.mutants, args.batches, args.max_tokens, args.method, args.groups)
    for row in table(args.out):
        print(json.dumps(row))

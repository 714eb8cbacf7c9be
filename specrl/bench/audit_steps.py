"""The steps `specrl bench audit` measures: the default run's prompts of step s, generated on one engine path (or
with one injected fault) and scored under the shipped policy as the trainer scores them, one evidence a group.

Faults (built here, never in the product): temp_1.1 / temp_0.9 / top_p_0.9 are sampled so and audited at
temperature 1, top-p 1; bonus_pq (the bonus token after k accepted drafts drawn from max(p - q_k, 0)),
residual_p (a rejection resamples from p) and accept_all (every draft accepted) replace the engine's verify
under the default SD method (`auto`).
"""
from __future__ import annotations

import torch

from specrl.audit import StepEvidence, TokenScorer, choose_groups, score_completions, step_evidence

N, PROMPTS = 8, 8  # the default run: 8 prompts a step, 8 samples each
FAULTS = {"temp_1.1": ("off", {"temperature": 1.1}), "temp_0.9": ("off", {"temperature": 0.9}),
          "top_p_0.9": ("off", {"top_p": 0.9}), "bonus_pq": ("auto", {}), "residual_p": ("auto", {}),
          "accept_all": ("auto", {})}


def paths() -> dict:
    """SD off and every registered method (the method registry's names), each with its shipped drafter when the
    embedded policy has one."""
    from specrl.engine import METHODS, SHIPPED_DRAFTERS_DIR, SpecConfig
    out = {"off": {}}
    for name in METHODS:
        shipped = SHIPPED_DRAFTERS_DIR / name
        out[name] = {"spec": SpecConfig(method=name, draft_model=str(shipped) if shipped.is_dir() else None)}
    return out


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
    """The audited groups of the default run's step s (`groups` of its 8 a step, None: all, what a run audits),
    generated on one engine path and scored."""

    def __init__(self, path: str, seed: int, max_tokens: int, chunk: int = 1, groups: int | None = None,
                 dtype: str | None = None):
        from specrl.engine import LLM
        from specrl.model import load_model
        from specrl.tasks import default_policy_path
        from specrl.config.run import TrainConfig
        from specrl.trainer.data import PromptEncoder, build_sources
        policy = str(default_policy_path())
        self.source = build_sources(TrainConfig().data, seed)[0]
        self.encoder = PromptEncoder(policy, True)
        self.groups = PROMPTS if groups is None else min(groups, PROMPTS)
        seqs = chunk * self.groups * N
        kv = f"{seqs * (max_tokens + 400) * 10 // 1024 + 64}MiB"  # ~10 KiB a token of context
        extra = {"dtype": dtype} if dtype else {}
        self.llm = LLM(policy, seed=seed, max_num_seqs=seqs, kv_cache_memory=kv, **extra, **paths()[path])
        self.model = load_model(policy).eval()  # fp32: an engine in bf16 is audited against the fp32 policy
        self.seed, self.max_tokens = seed, max_tokens

    def __call__(self, steps: list[int], temperature: float = 1.0, top_p: float = 1.0) -> list[tuple]:
        """(groups, [StepEvidence a group], KL) of each of `steps`, generated in one engine call (seeded per step and
        prompt, so a step's samples do not depend on which steps share the call). KL: with another temperature
        than 1, the sum over the step's tokens of KL(sampled || audited), the most log-evidence any test can
        expect."""
        from specrl.engine import SamplingParams
        from specrl.pipeline.steps import AUDIT_SALT
        from specrl.trainer.data import step_seed
        prompts, params, chosen = [], [], []
        for step in steps:
            examples = self.source.batch(step, PROMPTS)
            chosen.append(choose_groups(len(examples), self.groups, step_seed(self.seed, step, salt=AUDIT_SALT)))
            for i in chosen[-1]:
                prompts.append(self.encoder.encode(examples[i].prompt))
                params.append(SamplingParams(n=N, temperature=temperature, top_p=top_p, max_tokens=self.max_tokens,
                                             seed=step_seed(self.seed, step, salt=i + 1)))
        outs = self.llm.generate(prompts, params)
        evidence = []
        for j, step in enumerate(steps):
            part = outs[j * self.groups:(j + 1) * self.groups]
            ps = [list(r.prompt_token_ids) for r in part for _ in r.outputs]
            cs = [list(c.token_ids) for r in part for c in r.outputs]
            scorer = TokenScorer(1.0, seed=self.seed * 1_000_003 + step)
            scores = score_completions(self.model, scorer, ps, cs, rows_per_batch=16)
            per_row = torch.tensor([len(c) for c in cs]).view(self.groups, N).sum(-1).tolist()  # tokens a group
            groups = [step_evidence(s) for s in scores.split(per_row)]
            kl = kl_tempered(self.model, ps, cs, temperature) if temperature != 1.0 else None
            evidence.append((chosen[j], groups, step_evidence(scores), kl))
        return evidence


def group_fields(chosen: list[int], groups: list[StepEvidence]) -> dict:
    """A row's per-group evidence, from which `alarms` replays a run that audits fewer groups a step."""
    return {"groups": chosen, "group_bets": [g.log_bets for g in groups], "group_tokens": [g.tokens for g in groups],
            "group_impossible": [g.impossible for g in groups]}


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

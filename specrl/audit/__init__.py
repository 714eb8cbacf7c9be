"""The sampler audit: were the rollouts drawn from the policy at the sampling settings it was given?

An exact, anytime-valid test: a test martingale over the audited tokens (an e-process), one per run. It assumes
the rows are independent draws (each its own random stream: `specrl train` and `specrl generate --seed` seed per
prompt); rows that share uniforms, such as one seed for every prompt of a dump, are coupled and can ring.

    bets.py      the bets: likelihood ratios against tempered, nucleus-cut and tail-inflated versions of p
    eprocess.py  a step's evidence, the run's e-process (checkpointed) and the alarm at 1/alpha
    pit.py       the randomized-PIT z, kept as a diagnostic
    scorer.py    token scores from the policy's logits with the engine's sampling functions
    rows.py      which rows a step audits (never chosen by reward)
    learner.py   the learner's side: `StepAudit`, the trainer's `logits_hook`, and the previous weights (async)
    offline.py   `audit_completions`: a file of completions from any engine (`specrl audit`, the benchmark)
    plot.py      the e-process's running value against 1/alpha
"""
from specrl.audit.eprocess import EProcess, SamplerAlarm, StepEvidence, step_evidence
from specrl.audit.learner import LearnerAudit, StepAudit
from specrl.audit.rows import AuditRows, choose_groups, group_rows
from specrl.audit.scorer import TokenScorer, score_completions

__all__ = ["AuditRows", "EProcess", "LearnerAudit", "SamplerAlarm", "StepAudit", "StepEvidence", "TokenScorer",
           "choose_groups", "group_rows", "score_completions", "step_evidence"]

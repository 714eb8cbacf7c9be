"""The adaptive engine ("auto"): each step, which drafter drafts how many tokens (0: none) for each running
sequence, chosen to maximise the expected tokens per second of the step.

Why it adapts: SD trades verify work for fewer sequential forwards, which pays while a forward is bound by
reading weights (small batches) and stops paying once the batch alone fills the hardware; RL rollouts pass
through both regimes every step (a full batch, then a long tail). Which drafter pays differs by workload
and by sequence: one that repeats itself (or its GRPO siblings) is cheap to draft for with suffix matching,
the others need a model drafter.

The decision is a choice among arms (arms.py), each a static strategy the engine could run: no draft; drafter
d drafts k tokens for every row; or a hybrid, where a model-free drafter's full-length matches (a long suffix
match: its own strong signal) keep its drafts and a model drafter drafts for the other rows. An arm's
predicted rate is

    rows x (1 + expected accepted drafts) / (target forward seconds + drafting seconds)

from the cost model (engine/cost_model.py: fit to this engine's own step timings after a warm-up profile of
the forward) and per-position acceptance counts (engine/acceptance.py), optimistic while a drafter has few
observations: that optimism is the exploration (UCB), so a drafter is tried where trying could pay and a
drafter that got better online is found again. What the model cannot see is read off the clock: each arm's
realised tokens per second against its prediction (ratecheck.py) scales its predicted rate, so an arm that
runs slower than priced loses its place. No arm beats plain decoding -> no draft: SD that proposes nothing
costs nothing (every drafter still observes the forward, so switching back needs no re-prefill).

    arms.py       the arms and the (drafter, kind) keys of the acceptance counts
    strategy.py   `AdaptiveStrategy`: the decision and what it learns (costs, acceptance, rate checks)
    ratecheck.py  realised / predicted rate per arm
    shadow.py     shadow drafts that score the model-free drafters without drafting
    profile.py    a saved profile (cost fits, acceptance counts, rate checks) as a fresh engine's prior
    factory.py    `build`: the DrafterPool of `spec.drafters` and the strategy over it, from its profile

Its hand-set constants are in engine/constants.py. Which drafters it chose for how many rows is telemetry,
kept by the engine (`Engine.choices`, engine/stats.py), not by the decision. Any draft is verified exactly,
so every choice is lossless; "measured" choices follow the clock, "deterministic" ones never read it (see
cost_model.py).
"""

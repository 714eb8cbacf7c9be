"""The adaptive engine ("auto"): each step, which drafter drafts how many tokens (0: none) for each running
sequence, chosen to maximise the expected tokens per second of the step.

Why it adapts: SD trades verify work for fewer sequential forwards, which pays while a forward is bound by
reading weights (small batches) and stops paying once the batch alone fills the hardware; RL rollouts pass
through both regimes every step (a full batch, then a long tail). Which drafter pays differs by workload and
by sequence: one that repeats itself (or its GRPO siblings) is cheap to draft for with suffix matching, the
others need a model drafter.

Each step it picks the arm (arms.py: no draft, one drafter at one k, or a hybrid where a model-free drafter's
full-length matches go first and a model drafter fills in) with the best predicted rate

    rows x (1 + expected accepted drafts) / (target forward seconds + drafting seconds)

from the cost model (cost_model.py) and the acceptance counts (acceptance.py). The counts are
optimistic while a drafter has few observations: that optimism (UCB) is the exploration. Each arm's realised
rate against its prediction (ratecheck.py) scales what it predicts, so an arm that runs slower than priced
loses its place. Drafting nothing costs nothing: every drafter still observes the forward, so switching back
needs no re-prefill. Any draft is verified exactly, so every choice is lossless.

`AdaptiveStrategy` (strategy.py) decides and learns; `build` (factory.py) makes it and its DrafterPool. Its
hand-set constants are in constants.py; which drafters it chose is telemetry the engine keeps.
"""

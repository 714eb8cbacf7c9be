"""The hand-set constants of the adaptive engine ("auto") and the parts it reads, each with the reason for its
value; everything else it decides from this machine's own timings and the counted acceptance. Torch-free."""

# ---- the schedule (engine/adaptive/strategy.py) ---------------------------------------------------------
PLAN_EVERY = 4  # steps a plan is reused while the batch keeps its size: deciding then costs microseconds a step
TRY_ROWS = 8.0  # a drafter observed on fewer rows is being tried: its plan lasts one step, so a bad try is short
# measured mode: after this many drafting steps one step decodes plainly, so plain decoding's price stays read off
# the clock (its rate check and the target fit's one-token forwards); without it, an engine that drafts every step
# sees only verify forwards, where tokens = (k + 1) x rows, and may keep drafting where it loses. ~1/32 of the steps
ANCHOR_EVERY = 32
ARM_KS = (1, 2, 4, 8, 16)  # draft lengths an arm may ask (with k_max): powers of two cover the curve at few arms
SHADOW_ROWS = 4  # rows per step the model-free drafters shadow-draft for: microseconds, yet every row in turn
CHECK_DECAY = 0.95  # weight of the past per step in an arm's realised / predicted rate: follows ~20 steps
PROFILE_TOKENS = (1, 2, 3, 5, 9)  # draft lengths + 1 the warm-up profile times the forward at: spans k = 0..8
PROFILE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # batch sizes it times (up to the engine's slots): octaves
# a cached context the shortest and longest forwards of the grid are timed at too (at most the engine's length
# less the longest forward): attention's price per key read, which decode pays on every step of a long answer
PROFILE_CONTEXT = 512
# times each point is timed, the fastest kept: one point slowed by another process would tilt every plan
PROFILE_REPEATS = 3
# the prior's weight in the grid's own fit (~40-60 points of weight 0.2-6 each): its least-squares line, nearly
# unshrunk; the counted prior under-prices attention about tenfold on a CPU, where a key read is no multiply-add
PROFILE_FIT_WEIGHT = 0.05

# ---- acceptance counts (engine/adaptive/acceptance.py) ------------------------------------------------------
ACCEPT_DECAY = 0.99  # weight of the past per step the drafter drafted: the estimate follows the last ~100 steps
PRIOR_ALPHA = 0.5  # acceptance assumed before any observation: no drafter is presumed good or useless ...
PRIOR_ROWS = 1.0  # ... counted as this many rows, so the first real rows overrule it
BONUS = 0.35  # optimism (UCB): alpha + BONUS / sqrt(rows that reached the position + 1), so few rows get tried
MAX_ALPHA = 0.98  # so that expected accepted drafts stay below k (a certain drafter would always ask k_max)
ROW_DECAY = 0.9  # weight of a row's past per draft it was scored on: a row's own rate follows its last ~10 drafts
ROW_PRIOR_DRAFTS = 4.0  # the running rows' own rate is shrunk to the counts' with this many expected drafts

# ---- a saved profile as a fresh engine's prior (engine/adaptive/profile.py) ----------------------------------
PROFILE_ROWS = 32.0  # a (drafter, kind)'s counts weigh at most this many rows: a batch of 64 outweighs them at once
PROFILE_FIT_STEPS = 4.0  # the cost fits weigh this many steps: this machine's own timings take over within ~10
PROFILE_CHECK_STEPS = 2.0  # an arm's rate check weighs this many of its steps

# ---- the cost model (engine/adaptive/cost_model.py) ---------------------------------------------------------
COST_DECAY = 0.98  # weight of the past per observation: the fit follows roughly the last 50 steps
SCALE = 64.0  # features are in units of 64 tokens / rows, so the ridge prior weighs them alike
PAIR_SCALE = 64.0 * 512.0  # query-key pairs in units of 64 queries reading 512 keys each, for the same reason
STEP_SCALE = 8.0  # a drafter's longest draft in units of 8 positions, for the same reason
PRIOR_WEIGHT = 2.0  # the target's prior counts as this many observations: the warm-up profile, soon refined
# a drafter's prior (counted work) is a guess its first timing should overrule: on a CPU overheads dwarf its weights
DRAFT_PRIOR_WEIGHT = 0.05
# counted work: one forward reads every weight once, priced as the multiply-adds of this many tokens; only the
# deterministic mode without a profile, and the measured mode's prior before its first timings, rest on it
WEIGHT_READ_TOKENS = 8.0

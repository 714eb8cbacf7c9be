"""The engine's record of the strategy's choices (`Choices`, engine/stats.py), worked by hand."""
from specrl.engine.sequence import StepResult
from specrl.engine.sampler import SamplingParams
from specrl.engine.sequence import Sequence
from specrl.engine.stats import Choices


def rows(n):
    return [Sequence(i, i, 0, [0, 1], SamplingParams(max_tokens=9), i, 64, slot=i) for i in range(n)]


def test_rows_per_drafter_the_drafts_asked_and_the_plan_of_each_step():
    choices = Choices()
    choices.history = []
    choices.add(StepResult("prefill", rows(3), tokens_in=6, emitted_tokens=3))  # a prefill chose nothing
    # a hybrid step: rows 0 and 2 suffix at k 4, row 1 eagle3 at k 4
    choices.add(StepResult("spec", rows(3), tokens_in=15, emitted_tokens=7,
                           drafters_asked=["suffix", "eagle3", "suffix"], asked=[4, 4, 4], plan="suffix+eagle3@4"))
    # SD off for the step: no drafter asked, every row counts as "none"
    choices.add(StepResult("spec", rows(2), tokens_in=2, emitted_tokens=2, asked=[0, 0]))
    assert choices.rows == {"suffix": 2, "eagle3": 1, "none": 2, "k_sum": 12}
    assert choices.history == [
        {"running": 3, "mix": {"suffix": 2, "eagle3": 1}, "mean_k": 4.0, "arm": "suffix+eagle3@4"},
        {"running": 2, "mix": {"none": 2}, "mean_k": 0.0, "arm": "off"}]
    choices.reset()
    assert choices.rows == {} and choices.history == []

"""Everything about drafters: each method is one class in its own folder, listed once in registry.py.

    registry.py   name -> "specrl.drafters.<m>.method:<Class>", imported when first asked for (torch-free list)
    base.py       what the classes share: Drafting, ModelFree (ngram, suffix), WithWeights (checkpoint or cold start)
    <m>/method.py the method's class: engine build, cold start, training members, save, vLLM config and refit,
                  simulator cost; torch-free at import, each member imports what it runs
    eagle3/       drafter.py (the engine's Drafter), head.py (the EAGLE-3 head, its checkpoint), train.py
                  (offline training with training-time test), export.py (reduced vocabulary, vLLM/SGLang layout),
                  vllm.py (the on-the-fly export and refit vLLM serves)
    draft_model/  drafter.py (a small causal LM), train.py (offline distillation)
    mtp/          drafter.py (the policy's MTP modules as a drafter, MTP-only checkpoints), train.py
    suffix/       drafter.py (SuffixDecoding), tree.py (the per-problem suffix tries and their state)
    ngram/        drafter.py (prompt lookup)
    auto/         method.py (the adaptive engine, engine/adaptive/), vllm.py (its batch-size schedule on vLLM)
    scratch.py    cold start: a model drafter built from the policy by its method's `scratch`
    weights.py    hot swap: new drafter weights into a running engine's drafter, all or nothing
    vllm.py       what the methods' vLLM members share: the refusal, the context, reading a checkpoint's tensors
    training/     data.py (offline fit, JSONL prompts), cache.py (its teacher-data cache), losses.py, capture.py
                  (the policy trainer's forward hook), online.py (OnlineDrafterTrainer), health.py (the alarm)

The settings (`SpecConfig`) and what the engine asks of a method (`DrafterMethod`) live in the engine core
(`specrl.engine.methods`); importing specrl hands it this registry's lookup, so the engine never imports this
package, and `specrl.trainer` imports nothing from it.
"""

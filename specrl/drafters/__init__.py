"""Everything about drafters: each method's drafter, head, training and export, and the shared training machinery.

    eagle3/       drafter.py (the engine's Drafter), head.py (the EAGLE-3 head, its checkpoint), train.py
                  (offline training with training-time test), export.py (reduced vocabulary, vLLM/SGLang layout)
    draft_model/  drafter.py (a small causal LM), train.py (offline distillation)
    mtp/          drafter.py (the policy's MTP modules as a drafter, MTP-only checkpoints), train.py
    suffix/       drafter.py (SuffixDecoding), tree.py (the per-problem suffix tries and their state)
    ngram/        drafter.py (prompt lookup)
    scratch.py    cold start: a model drafter built from the policy by its method's recipe
    weights.py    hot swap: new drafter weights into a running engine's drafter, all or nothing
    training/     data.py (offline fit, JSONL prompts), cache.py (its teacher-data cache), losses.py, capture.py
                  (the policy trainer's forward hook), online.py (OnlineDrafterTrainer), health.py (the alarm)

The settings and the table of methods live in the engine core (`specrl.engine.methods`), which builds a
drafter from its row's module path and so never imports this package; `specrl.train` imports nothing from it.
"""

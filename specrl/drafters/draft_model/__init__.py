"""A small causal LM as drafter: the drafter and its offline distillation."""

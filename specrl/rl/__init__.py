"""RL math as pure, batched tensor functions: advantages, policy losses, KL, entropy, logprobs. Imports nothing
from the rest of specrl: the engine and the trainers import from here."""
from specrl.rl.advantages import ADVANTAGES, compute_advantages, group_stats, register_advantage
from specrl.rl.logprobs import entropy_from_logits, token_logprobs
from specrl.rl.losses import (AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES, PolicyLoss, aggregate, aggregate_denom,
                              clipped_policy_loss, kl_penalty, masked_mean, masked_sum, register_aggregation,
                              register_kl, register_policy_loss, truncated_importance_ratio)
from specrl.rl.registry import Registry

__all__ = ["ADVANTAGES", "AGGREGATIONS", "KL_ESTIMATORS", "POLICY_LOSSES", "PolicyLoss", "Registry", "aggregate",
           "aggregate_denom", "clipped_policy_loss", "compute_advantages", "entropy_from_logits", "group_stats",
           "kl_penalty", "masked_mean", "masked_sum", "register_advantage", "register_aggregation", "register_kl",
           "register_policy_loss", "token_logprobs", "truncated_importance_ratio"]

"""Engine counters of several actors as the counters of one engine."""
from __future__ import annotations


def merge_stats(parts: list[dict]) -> dict:
    """Sums the counters; recomputes the ratios from the summed counts (token-weighted, as one engine would)."""
    if not parts:
        return {}
    out = {k: sum(p[k] for p in parts) for k, v in parts[0].items() if isinstance(v, (int, float))}
    out["acceptance_length"] = out.get("decode_tokens", 0) / max(out.get("seq_forwards", 0), 1)
    out["acceptance_rate"] = out.get("accepted_tokens", 0) / max(out.get("draft_tokens", 0), 1)
    depth = max(len(p.get("acceptance_rate_per_pos", [])) for p in parts)
    out["acceptance_rate_per_pos"] = [  # weighted by each actor's drafts, which the rates do not carry: a mean
        sum(p["acceptance_rate_per_pos"][i] for p in parts if len(p.get("acceptance_rate_per_pos", [])) > i) /
        max(sum(len(p.get("acceptance_rate_per_pos", [])) > i for p in parts), 1) for i in range(depth)]
    return out

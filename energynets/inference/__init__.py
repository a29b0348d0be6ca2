"""Inference engines over relaxed outputs (see docs/design.md, "Output domains and inference")."""

from energynets.inference import exhaustive  # noqa: F401  (the module, for its tables)
from energynets.inference import gbi
from energynets.inference.crf import crf_log_likelihood
from energynets.inference.crf import crf_log_partition
from energynets.inference.crf import crf_marginals
from energynets.inference.crf import crf_sequence_score
from energynets.inference.crf import viterbi_decode
from energynets.inference.directions import SGD
from energynets.inference.directions import Adam
from energynets.inference.directions import Direction
from energynets.inference.directions import Momentum
from energynets.inference.exhaustive import ExhaustiveResult
from energynets.inference.exhaustive import exhaustive_minimize
from energynets.inference.exhaustive import pairwise_table
from energynets.inference.gbi import GBIConfig
from energynets.inference.gbi import GBIResult
from energynets.inference.gbi import GBIState
from energynets.inference.gbi import GBITrace
from energynets.inference.gbi import gbi_scan
from energynets.inference.gbi import gbi_step
from energynets.inference.gbi import gbi_while
from energynets.inference.gbi import init_state
from energynets.inference.gbi import make_objective
from energynets.inference.gbi import validate_config
from energynets.inference.parametrizations import Logit
from energynets.inference.parametrizations import Mirror
from energynets.inference.parametrizations import Parametrization
from energynets.inference.parametrizations import Projected
from energynets.inference.unrolled import GradientStrategy
from energynets.inference.unrolled import HVPAdjoint
from energynets.inference.unrolled import Implicit
from energynets.inference.unrolled import Rematerialized
from energynets.inference.unrolled import Unrolled
from energynets.inference.unrolled import unrolled_gbi

EnergyFn = gbi.EnergyFn
"""The energy contract of every inference routine: `energy(params, x, y [B, ...]) -> [B]`,
one value per example with examples independent (no batch statistics); `params` and `x`
are any pytrees."""

__all__ = [
  "crf_log_likelihood",
  "crf_log_partition",
  "crf_marginals",
  "crf_sequence_score",
  "viterbi_decode",
  "EnergyFn",
  "ExhaustiveResult",
  "exhaustive_minimize",
  "pairwise_table",
  "GBIConfig",
  "GBIResult",
  "GBIState",
  "GBITrace",
  "gbi_scan",
  "gbi_step",
  "gbi_while",
  "init_state",
  "make_objective",
  "validate_config",
  "Parametrization",
  "Projected",
  "Mirror",
  "Logit",
  "Direction",
  "SGD",
  "Momentum",
  "Adam",
  "unrolled_gbi",
  "GradientStrategy",
  "HVPAdjoint",
  "Implicit",
  "Rematerialized",
  "Unrolled",
]

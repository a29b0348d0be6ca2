"""energynets: structured prediction with energy networks in JAX.

An energy network scores a relaxed candidate output, `E(x, y) -> [B]`, and prediction
is `argmin_y E(x, y)`: by gradient-based inference (GBI) over a continuous relaxation
of y, or by a feed-forward network trained against the energy. This module is the
public API, in the style of optax: the names below are the stable surface, importable
as `energynets.<name>`; the subpackages (`energynets.data`, `.domains`, `.energies`,
`.nets`, `.inference`, `.diff`, `.objectives`, `.metrics`, `.train`) hold them and
their building blocks, each listed in the subpackage's `__all__`. Modules below the
subpackages (e.g. `energynets.objectives.seal`) are implementation detail.

| what | names |
|---|---|
| output domains | `Box` ([0, 1]^L), `Simplex` (per position), `Real` |
| the energy protocol | `Energy` (what every objective accepts), `energy_from_function`, `energy_from_module`, `as_energy`, `check_energy`, `EnergyShapeError` |
| energies `E(x, y) -> [B]` | `SPENEnergy`, `ICNNEnergy`, `FieldOfExperts`, `DeepPriorEnergy`, `SequenceEnergy` (each `.as_energy()`) |
| networks | `MLP`, `CNNDenoiser`, `PackedTagger` |
| inference | `gbi_scan` (fixed T, differentiable), `gbi_while` (per-example convergence), options `GBIConfig` (with `inference.Projected` / `Mirror` / `Logit` steps and `inference.SGD` / `Momentum` / `Adam` directions, or your own), results `GBITrace` / `GBIResult`; `unrolled_gbi` (the gradient through T steps by a strategy value: `Unrolled`, `Rematerialized`, `HVPAdjoint`, `Implicit`, or your own) |
| second-order tools | `hvp`, `cross_hvp`, `neumann_inverse_hvp`, `cg_inverse_hvp`, `inverse_hvp`; solver values `Neumann`, `ConjugateGradient` (or your own `diff.InverseHVPSolver`); `implicit_gradient`, `implicit_solution` |
| objectives (`init` / `update` / `predict`) | `local_bce`, `local_token_ce`, `local_squared_error`, `spen_pretrain`, `ssvm_hinge`, `deep_mean_field`, `e2e_objective`, `inference_network`, `seal_objective`, `task_net_ranking`, `deep_value_network`, `implicit_objective`, `crf_objective`; losses `seal_losses`, `infnet_losses` |
| options as values | `SSVMOptions` (solvers `GBISolver`, `ExhaustiveSolver`), `E2EOptions`, `DVNOptions` (sources in `objectives.dvn`, or a `Sampler` of your own); task surrogates `Squared`, `Log`, `L1` (or your own callable) |
| SEAL's options as values | `SealOptions` (the family's options); loss-net objectives `SealMargin`, `SealRegression`, `SealRegressionS`, `SealNCE` (or your own, computing L_E from `LossNetInputs`) |
| InfNet's and the implicit objective's options as values | `InfNetOptions`, with architectures `InfNetSeparated`, `InfNetShared`, `InfNetStacked` (or your own `objectives.InfNetArchitecture`) and `InfNetTruncation`; energy objectives `InfNetMargin`, `InfNetPerceptron`, `InfNetCompound` (or your own, computing the E-step loss from `objectives.InfNetEnergyInputs`); `ImplicitOptions`; primary losses `ImplicitSSVM`, `ImplicitCD` (negatives `StraightThroughNegatives`, `RelaxedNegatives`), `ImplicitDVN` (or your own, from `objectives.ImplicitPrimaryInputs`) |
| metrics | `example_f1`, `micro_f1`, `macro_f1`, `hamming_loss`, `binarize`, `tune_threshold`, `evaluate_multilabel`, `soft_f1`, `soft_iou`, `psnr`, `token_accuracy`, `span_f1` |
| data | `load_dataset` (a registered name, `'synthetic'`, or a MULAN folder), `load_denoising`, `load_sequence_dataset`, `block_exclusivity` |
| training | `fit` with `LoopOptions` (and `Validation`: evaluation, selection, early stopping) -> `FitResult`; `build_train_step`, `build_init`, `build_predict`, `make_mesh`, `predict_in_batches` |
| runs on disk | `load_run(workdir)` -> `Predictor` (`predict`: soft outputs, `labels`: decoded) of a `fit` / `experiments.main` run |

A minimal session (shapes: B examples, L labels):

    import jax, optax
    import energynets as en

    data = en.load_dataset("synthetic", num_train=512)          # x [N, 64], y [N, 16]
    spen = en.SPENEnergy(num_labels=16, feature_hidden=(), num_measurements=8)
    params = spen.init(jax.random.key(0), data.train.x[:2], data.train.y[:2])["params"]
    energy = lambda p, x, y: spen.apply({"params": p}, x, y)     # [B, 64], [B, 16] -> [B]
    y0 = en.Box().uniform_init((32, 16))
    y, trace = en.gbi_scan(energy, params, data.train.x[:32], y0, en.Box(),
                           en.GBIConfig(num_steps=20))            # y [32, 16] in [0, 1]

    objective = en.seal_objective(spen, en.MLP((), 16), optax.adam(1e-3), optax.adam(1e-3))
    result = en.fit(objective, {"x": data.train.x, "y": data.train.y},
                    en.LoopOptions(steps=200, batch_size=32, select_metric=None,
                                   tensorboard=False), workdir="/tmp/seal")

See `notebooks/quickstart.ipynb` and `notebooks/differentiation.ipynb`.
"""

from energynets import data
from energynets import diff
from energynets import domains
from energynets import energies
from energynets import inference
from energynets import metrics
from energynets import nets
from energynets import objectives
from energynets import train
from energynets.data import MultiLabelDataset
from energynets.data import Split
from energynets.data import block_exclusivity
from energynets.data import load_dataset
from energynets.data import load_denoising
from energynets.data import load_sequence_dataset
from energynets.diff import ConjugateGradient
from energynets.diff import ImplicitGradient
from energynets.diff import Neumann
from energynets.diff import cg_inverse_hvp
from energynets.diff import cross_hvp
from energynets.diff import finite_difference_hvp
from energynets.diff import hvp
from energynets.diff import implicit_gradient
from energynets.diff import implicit_solution
from energynets.diff import inverse_hvp
from energynets.diff import neumann_inverse_hvp
from energynets.domains import Box
from energynets.domains import Domain
from energynets.domains import Real
from energynets.domains import Simplex
from energynets.energies import DeepPriorEnergy
from energynets.energies import Energy
from energynets.energies import EnergyShapeError
from energynets.energies import FieldOfExperts
from energynets.energies import ICNNEnergy
from energynets.energies import SequenceEnergy
from energynets.energies import SPENEnergy
from energynets.energies import as_energy
from energynets.energies import check_energy
from energynets.energies import energy_from_function
from energynets.energies import energy_from_module
from energynets.inference import GBIConfig
from energynets.inference import GBIResult
from energynets.inference import GBITrace
from energynets.inference import HVPAdjoint
from energynets.inference import Implicit
from energynets.inference import Rematerialized
from energynets.inference import Unrolled
from energynets.inference import gbi_scan
from energynets.inference import gbi_while
from energynets.inference import unrolled_gbi
from energynets.metrics import binarize
from energynets.metrics import evaluate_multilabel
from energynets.metrics import example_f1
from energynets.metrics import hamming_loss
from energynets.metrics import macro_f1
from energynets.metrics import micro_f1
from energynets.metrics import psnr
from energynets.metrics import soft_f1
from energynets.metrics import soft_iou
from energynets.metrics import span_f1
from energynets.metrics import token_accuracy
from energynets.metrics import tune_threshold
from energynets.nets import MLP
from energynets.nets import CNNDenoiser
from energynets.nets import PackedTagger
from energynets.objectives import L1
from energynets.objectives import DVNOptions
from energynets.objectives import E2EOptions
from energynets.objectives import ExhaustiveSolver
from energynets.objectives import GBISolver
from energynets.objectives import ImplicitCD
from energynets.objectives import ImplicitDVN
from energynets.objectives import ImplicitOptions
from energynets.objectives import ImplicitSSVM
from energynets.objectives import InfNetCompound
from energynets.objectives import InfNetMargin
from energynets.objectives import InfNetOptions
from energynets.objectives import InfNetPerceptron
from energynets.objectives import InfNetSeparated
from energynets.objectives import InfNetShared
from energynets.objectives import InfNetStacked
from energynets.objectives import InfNetTruncation
from energynets.objectives import Log
from energynets.objectives import LossNetInputs
from energynets.objectives import Objective
from energynets.objectives import ParamGroup
from energynets.objectives import RelaxedNegatives
from energynets.objectives import SealMargin
from energynets.objectives import SealNCE
from energynets.objectives import SealOptions
from energynets.objectives import SealRegression
from energynets.objectives import SealRegressionS
from energynets.objectives import Squared
from energynets.objectives import SSVMOptions
from energynets.objectives import StraightThroughNegatives
from energynets.objectives import crf_objective
from energynets.objectives import deep_mean_field
from energynets.objectives import deep_value_network
from energynets.objectives import e2e_objective
from energynets.objectives import implicit_objective
from energynets.objectives import inference_network
from energynets.objectives import infnet_losses
from energynets.objectives import local_bce
from energynets.objectives import local_squared_error
from energynets.objectives import local_token_ce
from energynets.objectives import seal_losses
from energynets.objectives import seal_objective
from energynets.objectives import spen_pretrain
from energynets.objectives import ssvm_hinge
from energynets.objectives import task_net_ranking
from energynets.train import FitResult
from energynets.train import LoopOptions
from energynets.train import Predictor
from energynets.train import Validation
from energynets.train import build_init
from energynets.train import build_predict
from energynets.train import build_train_step
from energynets.train import fit
from energynets.train import load_run
from energynets.train import make_mesh
from energynets.train import predict_in_batches

__version__ = "0.1.0"

__all__ = [
  # Subpackages.
  "data",
  "diff",
  "domains",
  "energies",
  "inference",
  "metrics",
  "nets",
  "objectives",
  "train",
  # Output domains.
  "Box",
  "Domain",
  "Real",
  "Simplex",
  # The energy protocol.
  "Energy",
  "EnergyShapeError",
  "as_energy",
  "check_energy",
  "energy_from_function",
  "energy_from_module",
  # Energies and networks.
  "DeepPriorEnergy",
  "FieldOfExperts",
  "ICNNEnergy",
  "SPENEnergy",
  "SequenceEnergy",
  "CNNDenoiser",
  "MLP",
  "PackedTagger",
  # Gradient-based inference and the gradient through it.
  "GBIConfig",
  "GBIResult",
  "GBITrace",
  "gbi_scan",
  "gbi_while",
  "unrolled_gbi",
  "HVPAdjoint",
  "Implicit",
  "Rematerialized",
  "Unrolled",
  # Second-order differentiation: HVPs, inverse HVPs, implicit gradients.
  "ConjugateGradient",
  "ImplicitGradient",
  "Neumann",
  "cg_inverse_hvp",
  "cross_hvp",
  "finite_difference_hvp",
  "hvp",
  "implicit_gradient",
  "implicit_solution",
  "inverse_hvp",
  "neumann_inverse_hvp",
  # Objectives: the interface, every method's constructor, the SEAL / InfNet losses.
  "Objective",
  "ParamGroup",
  "crf_objective",
  "deep_mean_field",
  "deep_value_network",
  "e2e_objective",
  "implicit_objective",
  "inference_network",
  "infnet_losses",
  "local_bce",
  "local_squared_error",
  "local_token_ce",
  "seal_losses",
  "seal_objective",
  "spen_pretrain",
  "ssvm_hinge",
  "task_net_ranking",
  # Options of SSVM, e2e and DVN, SSVM's solvers and the task surrogates as values.
  "DVNOptions",
  "E2EOptions",
  "SSVMOptions",
  "ExhaustiveSolver",
  "GBISolver",
  "L1",
  "Log",
  "Squared",
  # SEAL's options and loss-net objectives as values.
  "LossNetInputs",
  "SealMargin",
  "SealNCE",
  "SealOptions",
  "SealRegression",
  "SealRegressionS",
  # InfNet's and the implicit objective's options and losses as values.
  "InfNetCompound",
  "InfNetMargin",
  "InfNetOptions",
  "InfNetPerceptron",
  "InfNetSeparated",
  "InfNetShared",
  "InfNetStacked",
  "InfNetTruncation",
  "ImplicitCD",
  "ImplicitDVN",
  "ImplicitOptions",
  "ImplicitSSVM",
  "RelaxedNegatives",
  "StraightThroughNegatives",
  # Metrics.
  "binarize",
  "evaluate_multilabel",
  "example_f1",
  "hamming_loss",
  "macro_f1",
  "micro_f1",
  "psnr",
  "soft_f1",
  "soft_iou",
  "span_f1",
  "token_accuracy",
  "tune_threshold",
  # Data.
  "MultiLabelDataset",
  "Split",
  "block_exclusivity",
  "load_dataset",
  "load_denoising",
  "load_sequence_dataset",
  # Training.
  "FitResult",
  "LoopOptions",
  "build_init",
  "build_predict",
  "build_train_step",
  "fit",
  "make_mesh",
  "predict_in_batches",
  "Validation",
  # Runs on disk.
  "Predictor",
  "load_run",
]

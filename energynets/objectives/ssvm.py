"""`ssvm`: SPEN training with the structured SVM loss (Belanger & McCallum 2016, §4).

Per example, with ŷ from loss-augmented inference,

    ŷ = argmin_{ȳ ∈ [0,1]^L}  E(x, ȳ) − Δ(ȳ, y)                       (Eq. 9, by GBI)
    ℓ = [ Δ(ŷ, y) − E(x, ŷ) + E(x, y) ]_+                             (Eq. 8)

averaged over the batch, plus `l2 · ½‖W‖²` on the weight matrices of the trained
parameter groups (SPEN A.5 uses l2 during SSVM training). Choices, with reasons:

- Loss-augmented inference runs `gbi_scan` for a fixed `T = loss_aug_gbi.num_steps`
  on the Box relaxation (the paper: momentum 0.95, η 0.1, entropic mirror descent).
  Its inputs are `stop_gradient`-ed and so is ŷ: the loss is differentiated at a fixed
  ŷ, the sub-gradient of Eq. 8 (Danskin), and nothing back-propagates through the
  unroll. ŷ is the final relaxed iterate, not rounded ("we do not round the output of
  (9)", §4).
- Δ is a differentiable surrogate of the Hamming loss, summed over labels (§4: "such
  as the squared loss or log loss"): a value of `energynets.objectives.task_losses`
  (`Squared()`, `Log(eps)` with ȳ clipped to [ε, 1−ε], or `L1()`), or your own.
  The log loss diverges at the wrong face, so loss-augmented inference with it is
  unbounded below without the clip; the paper relies on mirror descent keeping
  iterates interior, which bounds Δ only through the step count. The clip makes the
  bound explicit (−log ε per label) and keeps every gradient finite; ε is not in the
  paper and is an assumption (default 1e-3, i.e. at most ≈6.9 per label). Use the
  `'mirror'` or `'logit'` GBI method with it.
- The hinge is zero-truncated (`jax.nn.relu`, whose derivative at 0 is 0): exact
  minimization would make the bracket non-negative already, GBI on a non-convex
  energy does not.
- On a small Box (L ≤ `exhaustive.MAX_LABELS`) either inference problem can instead be
  solved exactly over {0, 1}^L by enumeration (`loss_aug_solver` / `predict_solver`
  `ExhaustiveSolver()`): the classical discrete SSVM, whose loss-augmented ŷ is a vertex and
  whose sub-gradient is exact, and the energy's exact MAP at test time. This separates
  what the energy can represent from what GBI finds (SPEN's synthetic task, L = 16).
- Entropy smoothing (`GBIConfig.entropy_weight`) belongs to test-time inference
  (`predict_gbi`, SPEN A.4: "only done at test time, not in the inner loop of
  learning"); `loss_aug_gbi.entropy_weight` should normally stay 0.

Staged training (SPEN §4, A.4) uses one state structure, `{"energy": ParamGroup}`,
holding the whole `SPENEnergy` parameter dict:

1. `spen_pretrain`: the local head and features (`local_net`) trained with per-label
   BCE on the local logits; every other group frozen. (Equivalently, train
   `local_bce(energy MLP)` and hand its state to stage 2's `init_from`.)
2. `ssvm_hinge(..., trainable=("global",))`: features and local head clamped, global energy
   trained (the paper's choice for small data).
3. `ssvm_hinge(..., trainable=None)`: fine-tune everything with a small learning rate.

Each stage's `init_from` carries the previous stage's parameters (an `{"energy": ...}`
state, or a `local_bce` state `{"net": ...}` whose params become `local_net`) and
starts a fresh optimizer state. Clamped groups are frozen twice over: their gradients
are stopped inside the loss (so the backward pass skips the feature network) and the
optimizer is an `optax.multi_transform` that gives them `set_to_zero` updates (so no
momentum, weight decay or schedule can move them, and they carry no optimizer state).
"""

import dataclasses
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from energynets.inference.gbi import GBIConfig
from energynets.objectives import base
from energynets.objectives import task_losses
from energynets.objectives.ssvm_solvers import GOLD
from energynets.objectives.ssvm_solvers import ExhaustiveSolver
from energynets.objectives.ssvm_solvers import GBISolver
from energynets.objectives.ssvm_solvers import Solver
from energynets.objectives.ssvm_solvers import _loss_aug_starts
from energynets.objectives.ssvm_solvers import _loss_augmented
from energynets.objectives.ssvm_solvers import check_solver
from energynets.objectives.ssvm_solvers import exact_infer
from energynets.objectives.ssvm_solvers import infer
from energynets.objectives.ssvm_solvers import loss_augmented_inference
from energynets.objectives.ssvm_solvers import search_statistics

__all__ = [
  "check_solver",
  "exact_infer",
  "ExhaustiveSolver",
  "GBISolver",
  "GOLD",
  "infer",
  "loss_augmented_inference",
  "Margins",
  "margins",
  "search_statistics",
  "Solver",
  "spen_pretrain",
  "ssvm_hinge",
  "SSVMOptions",
]


class Margins(NamedTuple):
  """Per-example terms of the SSVM bracket, all `[B]`.

  `margin = delta − energy_pred + energy_gold`; the loss is `mean(relu(margin))`.
  """

  margin: jax.Array
  delta: jax.Array
  energy_pred: jax.Array
  energy_gold: jax.Array


def _margins(model, params, encoding, y, y_hat, surrogate) -> Margins:
  delta = task_losses.structured_task_loss(model.domain, y_hat, y, surrogate)
  e_pred = model.energy(params, encoding, y_hat)
  e_gold = model.energy(params, encoding, y)
  return Margins(delta - e_pred + e_gold, delta, e_pred, e_gold)


def margins(
  energy,
  params,
  x: jax.Array,
  y: jax.Array,
  y_hat: jax.Array,
  *,
  surrogate: task_losses.Surrogate = task_losses.Squared(),
) -> Margins:
  """The SSVM bracket at a given ŷ (deterministic forward pass); Δ is `surrogate`."""
  model = protocol.as_energy(energy)
  return _margins(model, params, model.encode(params, x), y, y_hat, surrogate)


# ---------------------------------------------------------------------------------------
# Objectives.


def _objective(model, optimizer, trainable, loss_fn, predict) -> base.Objective:
  """init/update/init_from shared by both SPEN stages: state `{"energy": ParamGroup}`."""
  opt = base.masked_optimizer(optimizer, trainable)

  def init(rng, batch):
    params = protocol.init_checked(model, rng, batch["x"], batch["y"], trainable)
    return {"energy": base.init_group(params, opt)}

  def update(state, batch, rng):
    group, metrics = base.minimize_step(loss_fn, opt, state["energy"], batch, rng)
    return {"energy": group}, metrics

  def init_from(prev_state, rng, batch):
    protocol.check_y(model, batch["x"], batch["y"])
    params = model.continue_from(prev_state, rng, batch["x"], batch["y"])
    protocol.check_trainable(trainable, params, model.name)
    return {"energy": base.init_group(params, opt)}

  return base.Objective(init, update, predict, init_from)


def spen_pretrain(
  energy: Any, optimizer: optax.GradientTransformation, *, l2: float = 0.0
) -> base.Objective:
  """Stage 1: the energy's local classifier (`local_net`) alone, with per-label BCE.

  The loss is `local_bce`'s (BCE summed over labels, averaged over examples, plus
  `l2 · ½‖W‖²` on `local_net`'s weight matrices); the other groups are frozen and
  keep their initialization. Prediction is `sigmoid(local_logits)`, the MLP baseline.

  Args:
    energy: an `Energy` (or a library energy) with `local_logits` and a `local_net`
      parameter group (SPEN, ICNN).
    optimizer: applied to `local_net`.
    l2: weight of `½‖W‖²` on `local_net`'s weight matrices.

  Returns:
    An `Objective` with state `{"energy": ParamGroup}`.
  """
  model = protocol.as_energy(energy)
  if model.local_logits is None:
    raise ValueError(
      f"spen_pretrain trains an energy's local classifier; {model.name} has no local_logits"
    )
  trainable = frozenset({"local_net"})

  def loss_fn(params, batch, rng):
    params = base.clamp_groups(params, trainable)
    logits = model.local_logits(params, batch["x"], True, rng)
    bce = base.multilabel_bce(logits, batch["y"])
    loss = bce + l2 * base.groups_l2(params, trainable) if l2 else bce
    return loss, {"bce": bce}

  def predict(state, x):
    return jax.nn.sigmoid(model.local_logits(state["energy"].params, x))

  return _objective(model, optimizer, trainable, loss_fn, predict)


@dataclasses.dataclass(frozen=True)
class SSVMOptions:
  """The SSVM hinge's options (defaults: SPEN's, §4 and A.4-A.5).

  Attributes:
    loss_aug_gbi: GBI for Eq. 9 inside training, run by `gbi_scan` for `num_steps`
      (needed when `loss_aug_solver` uses GBI).
    predict_gbi: GBI for prediction, run by `gbi_while` to per-example convergence;
      its `entropy_weight` is the test-time entropy temperature (SPEN A.4, §7.1)
      (needed when `predict_solver` uses GBI).
    surrogate: Δ, a `task_losses` value (`Squared()`, `Log(eps)`, `L1()`) or your own
      callable `(y_hat, y) -> per-coordinate terms`.
    trainable: top-level parameter groups that are updated (e.g. `("global",)` to
      clamp a SPEN's pretrained features and local head), checked against the real
      parameter tree at `init`; `None`: all.
    l2: weight of `½‖W‖²` on the trainable groups' weight matrices.
    init: GBI start for both inference problems, a name of the energy's starts: SPEN
      `'uniform'` (0.5) or `'local'` (`sigmoid` of the local logits; SPEN §7.4: saves
      about 5 test-time steps); image energies `'input'` (the noisy x), ....
    loss_aug_init: overrides `init` for loss-augmented inference only: a name or names
      of the energy's starts or `'gold'`. With several, GBI runs from each and ŷ is,
      per example, the final iterate of lowest `E − Δ` (a better approximation of
      Eq. 9's argmin, so fewer margin violators are missed, at one GBI run per start).
      `None`: `(init,)`.
    loss_aug_solver: a `Solver`: `GBISolver()` (`loss_aug_gbi`) or `ExhaustiveSolver()`
      (the exact minimizer of `E − Δ` over {0, 1}^L: Box domain and
      L ≤ `exhaustive.MAX_LABELS` only).
    predict_solver: `GBISolver()` (`predict_gbi`) or `ExhaustiveSolver()` (the energy's
      exact minimizer over {0, 1}^L, a binary prediction).
  """

  loss_aug_gbi: GBIConfig | None = None
  predict_gbi: GBIConfig | None = None
  surrogate: task_losses.Surrogate = task_losses.Squared()
  trainable: tuple[str, ...] | None = None
  l2: float = 0.0
  init: str = "uniform"
  loss_aug_init: tuple[str, ...] | str | None = None
  loss_aug_solver: Solver = GBISolver()
  predict_solver: Solver = GBISolver()

  def __post_init__(self):
    task_losses.check_surrogate(self.surrogate)
    for name in ("loss_aug", "predict"):
      solver, config = getattr(self, f"{name}_solver"), getattr(self, f"{name}_gbi")
      if not (hasattr(solver, "loss_augmented") and hasattr(solver, "predict")):
        raise TypeError(
          f"{name}_solver is a value such as GBISolver() or ExhaustiveSolver(), not {solver!r}"
        )
      if solver.uses_gbi:
        if config is None:
          raise ValueError(
            f"the SSVM hinge with a GBI {name}_solver needs {name}_gbi (a GBIConfig)"
          )
        gbi_lib.validate_config(config)


def ssvm_hinge(
  energy: Any, optimizer: optax.GradientTransformation, *, options: SSVMOptions | None = None
) -> base.Objective:
  """Stages 2 and 3: the SSVM hinge with loss-augmented GBI (see the module docstring).

  Args:
    energy: an `Energy` (`en.energy_from_function`, `en.energy_from_module`) or a
      library energy (SPEN, ICNN, sequence, segmentation, FoE, DeepPrior).
    optimizer: applied to the `trainable` groups (SPEN A.5: SGD, momentum 0.9).
    options: an `SSVMOptions` (required: it holds the GBI configs).

  Returns:
    An `Objective` with state `{"energy": ParamGroup}`; `update`'s metrics are `loss`,
    `grad_norm`, `hinge` (mean truncated hinge), `active` (fraction of examples with a
    positive bracket), `delta` (mean Δ(ŷ, y)) and `energy_gap` (mean E(x,ŷ) − E(x,y);
    negative means some ŷ scores below the gold output).

  Raises:
    TypeError: `options` is not an `SSVMOptions`.
  """
  if not isinstance(options, SSVMOptions):
    raise TypeError(f"ssvm_hinge takes options=SSVMOptions(...), not {options!r}")
  o = options
  model = protocol.as_energy(energy)
  init = o.init
  if init not in model.inits:
    raise ValueError(f"unknown init {init!r}; expected one of {model.inits}")
  starts = _loss_aug_starts(init, o.loss_aug_init, model.inits)
  check_solver(o.loss_aug_solver, model)
  check_solver(o.predict_solver, model)
  trainable = protocol.trainable_groups(model, o.trainable)
  loss_aug_gbi, predict_gbi, surrogate, l2 = o.loss_aug_gbi, o.predict_gbi, o.surrogate, o.l2
  loss_aug_solver, predict_solver = o.loss_aug_solver, o.predict_solver

  def loss_fn(params, batch, rng):
    params = base.clamp_groups(params, trainable)
    y = batch["y"]
    inputs = model.encode(params, batch["x"], True, rng)
    y_hat = _loss_augmented(
      model, params, inputs, batch["x"], y, loss_aug_gbi, surrogate, starts, loss_aug_solver
    )
    m = _margins(model, params, inputs, y, y_hat, surrogate)
    hinge = jnp.mean(jax.nn.relu(m.margin))
    loss = hinge + l2 * base.groups_l2(params, trainable) if l2 else hinge
    return loss, {
      "hinge": hinge,
      "active": jnp.mean((m.margin > 0).astype(hinge.dtype)),
      "delta": jnp.mean(m.delta),
      "energy_gap": jnp.mean(m.energy_pred - m.energy_gold),
    }

  def predict(state, x):
    return predict_solver.predict(model, state["energy"].params, x, predict_gbi, init)

  return _objective(model, optimizer, trainable, loss_fn, predict)

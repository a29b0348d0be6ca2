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
  as the squared loss or log loss"): one of `energynets.objectives.task_losses`
  (`'squared'`, `'log'` with ȳ clipped to [ε, 1−ε], `ε = surrogate_eps`, or `'l1'`).
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
  `'exhaustive'`): the classical discrete SSVM, whose loss-augmented ŷ is a vertex and
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
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import optax

from energynets import domains
from energynets.energies import protocol
from energynets.inference import exhaustive
from energynets.inference import gbi as gbi_lib
from energynets.inference.gbi import GBIConfig, GBIResult
from energynets.objectives import base
from energynets.objectives import task_losses
from energynets.objectives.task_losses import DEFAULT_SURROGATE_EPS

# How an inference problem is solved: GBI over the relaxation, or exactly by enumerating
# {0, 1}^L (Box domain, small L only).
SOLVERS = ("gbi", "exhaustive")
# Loss-augmented inference may also start at the gold label y (descent from y finds the
# violators nearest to it). Caveat: mirror steps from the clipped faces [eps, 1 − eps]
# move only once the accumulated η·g reaches |logit(eps)|, and the squared surrogate has
# zero gradient at y, so alone 'gold' mostly returns y itself (on the synthetic task:
# Δ ≈ 0); combine it with another start, or use projected GBI.
GOLD = "gold"
INITS = ("uniform", "local")  # the SPEN starts; an energy's own are `Energy.inits`
LOSS_AUG_INITS = INITS + (GOLD,)


# ---------------------------------------------------------------------------------------
# The energy as GBI sees it, and the two inference problems.


def _loss_aug_starts(init, loss_aug_init, inits=INITS) -> tuple[str, ...]:
  """The loss-augmented GBI starts: `loss_aug_init` (a name or names), default `(init,)`;
  each a name of `inits` (the model's starts) or `'gold'`."""
  if loss_aug_init is None:
    starts = (init,)
  elif isinstance(loss_aug_init, str):
    starts = (loss_aug_init,)
  else:
    starts = tuple(loss_aug_init)
  allowed = tuple(inits) + (GOLD,)
  bad = [s for s in starts if s not in allowed]
  if bad or not starts:
    raise ValueError(f"unknown loss-augmented init {starts!r}; expected names from "
                     f"{allowed}")
  return starts


def check_solver(solver: str, model) -> None:
  """ValueError for an unknown solver, or `'exhaustive'` off the Box domain."""
  if solver not in SOLVERS:
    raise ValueError(f"unknown inference solver {solver!r}; expected one of {SOLVERS}")
  if solver == "exhaustive" and not isinstance(model.domain, domains.Box):
    raise ValueError(f"the 'exhaustive' solver enumerates {{0, 1}}^L and needs the Box "
                     f"domain; this energy's domain is {type(model.domain).__name__}")


def _candidate_table(model) -> exhaustive.TableFn:
  """The model's energy of every (example, labeling) pair."""
  return model.candidate_energy or exhaustive.pairwise_table(model.energy)


def _exhaustive_loss_augmented(model, params, inputs, y, surrogate, eps, dtype):
  """The exact vertex argmin of `E − Δ` (the discrete SSVM's loss-augmented inference)."""
  energy_table = _candidate_table(model)

  def table(p, inputs_and_gold, candidates):
    enc, gold = inputs_and_gold
    return energy_table(p, enc, candidates) - task_losses.task_loss_table(
        candidates, gold, surrogate, eps)

  y = jnp.asarray(y, dtype)
  return exhaustive.exhaustive_minimize(table, params, (inputs, y), y).y


def _loss_augmented(model, params, inputs, x, y, config, surrogate, eps, starts,
                    solver="gbi"):
  """ŷ from `gbi_scan` on `E − Δ` over `model.domain`, with no gradient path to anything
  (or, with `solver='exhaustive'`, the exact minimizer over {0, 1}^L; `starts` unused).

  One run per start in `starts` (names of the model's inits, or `'gold'`); per example,
  the final iterate with the lowest `E − Δ` is returned (the best available
  approximation of the argmin of Eq. 9; with one start, simply that run's final iterate).
  """
  def augmented(p, inputs_and_gold, y_bar):
    enc, gold = inputs_and_gold
    return model.energy(p, enc, y_bar) - task_losses.structured_task_loss(
        model.domain, y_bar, gold, surrogate, eps)

  params, inputs, y = jax.lax.stop_gradient((params, inputs, y))
  best_y = best_obj = None
  dtype = jax.eval_shape(lambda: model.start(inputs, x, model.inits[0])).dtype
  if solver == "exhaustive":
    return _exhaustive_loss_augmented(model, params, inputs, y, surrogate, eps, dtype)
  for name in starts:
    y0 = jnp.asarray(y, dtype) if name == GOLD else model.start(inputs, x, name)
    y_hat, _ = gbi_lib.gbi_scan(augmented, params, (inputs, y), y0, model.domain, config)
    if len(starts) == 1:
      return jax.lax.stop_gradient(y_hat)
    obj = augmented(params, (inputs, y), y_hat)
    if best_y is None:
      best_y, best_obj = y_hat, obj
    else:
      better = (obj < best_obj).reshape(obj.shape + (1,) * (y_hat.ndim - 1))
      best_y = jnp.where(better, y_hat, best_y)
      best_obj = jnp.where(obj < best_obj, obj, best_obj)
  return jax.lax.stop_gradient(best_y)


def loss_augmented_inference(energy, params, x: jax.Array, y: jax.Array,
                             config: GBIConfig, *, surrogate: str = "squared",
                             surrogate_eps: float = DEFAULT_SURROGATE_EPS,
                             init: str = "uniform",
                             loss_aug_init: Optional[Sequence[str] | str] = None,
                             solver: str = "gbi") -> jax.Array:
  """ŷ ≈ argmin E(x, ŷ) − Δ(ŷ, y) over the energy's domain (SPEN Eq. 9), not rounded.

  `energy`: any energy `protocol.as_energy` accepts. `loss_aug_init`: the start(s) of
  GBI, names of the energy's inits or `'gold'` (default `init`); with several, per
  example the final iterate of lowest `E − Δ` is returned. `solver='exhaustive'`: the exact argmin over {0, 1}^L
  (`config` and the starts are then unused).
  """
  model = protocol.as_energy(energy)
  check_solver(solver, model)
  inputs = model.encode(params, x)
  return _loss_augmented(model, params, inputs, x, y, config, surrogate, surrogate_eps,
                         _loss_aug_starts(init, loss_aug_init, model.inits), solver)


def infer(energy, params, x: jax.Array, config: GBIConfig, *,
          init: str = "uniform") -> GBIResult:
  """Test-time prediction: `gbi_while` on `E − τ·entropy` (τ = `config.entropy_weight`).

  Returns the whole `GBIResult` (y in the energy's domain, objective, per-example step
  counts).
  """
  model = protocol.as_energy(energy)
  inputs = jax.lax.stop_gradient(model.encode(params, x))
  return gbi_lib.gbi_while(model.energy, params, inputs, model.start(inputs, x, init),
                           model.domain, config)


def exact_infer(energy, params, x: jax.Array) -> exhaustive.ExhaustiveResult:
  """Test-time prediction by enumeration: the energy's exact minimizer over {0, 1}^L
  (Box domain, L ≤ `exhaustive.MAX_LABELS`). Returns `ExhaustiveResult(y, objective)`,
  `objective` the minimum energy."""
  model = protocol.as_energy(energy)
  check_solver("exhaustive", model)
  inputs = jax.lax.stop_gradient(model.encode(params, x))
  return _exact_minimum(model, params, inputs, model.start(inputs, x, model.inits[0]))


def _exact_minimum(model, params, inputs, y_like) -> exhaustive.ExhaustiveResult:
  """The energy's minimum over {0, 1}^L given an encoded x (`y_like`: shape and dtype)."""
  return exhaustive.exhaustive_minimize(_candidate_table(model), params, inputs, y_like)


def search_statistics(energy: Any, params: Any, x: jax.Array, y: jax.Array,
                      config: GBIConfig, *, init: str = "uniform") -> dict[str, jax.Array]:
  """How test-time GBI behaves on a batch (SPEN §7.4): steps taken and search error.

  Runs exactly the test-time prediction, `infer(energy, params, x, config, init=init)`
  (`gbi_while` on the Box from `init`, deterministic forward pass), and measures, with
  ŷ the final *relaxed* iterate and E the energy (`SPENEnergy`, without the
  `config.entropy_weight` term GBI may subtract):

  - `gbi_steps_mean`: mean over examples of the update steps `gbi_while` took for the
    example before it was frozen (it converged, the batch met `stop_fraction`, or
    `max_steps` was hit);
  - `gbi_steps_max`: the largest of those counts, which is also the number of
    while-loop iterations the batch ran (the batch's cost, SPEN's "last reducer");
  - `gbi_converged_fraction`: fraction of examples that met `rel_tol`/`abs_tol`
    within the loop (below 1 when `stop_fraction < 1` or `max_steps` cut it short);
  - `search_error`: fraction of examples with `E(x, ŷ) > E(x, y)`, y the gold label
    vector; a strict float comparison with no tolerance. This is SPEN §7.4's upper
    bound on optimization failures ("the energy returned by our optimization is
    greater than the value of the energy evaluated at the ground truth", 8% on
    Bibtex). Note that mirror/logit iterates never reach a face exactly (the Box
    clips logits at `eps`), so an example whose gold vertex is the minimizer still
    counts when ŷ only approaches it;
  - `search_error_rounded`: the same with ŷ rounded at 0.5 (`ŷ ≥ 0.5`, the decoded
    prediction);
  - `energy_gap_mean`: mean of `E(x, ŷ) − E(x, y)` (negative: GBI beats the gold on
    average);
  - on a Box with `L ≤ exhaustive.MAX_LABELS` labels, also the *exact* search error,
    against the energy's true minimum E* over {0, 1}^L (`exact_infer`):
    `exact_search_error`, the fraction of examples whose rounded output has
    `E(x, round(ŷ)) > E* + 1e-4·max(1, |E*|)` (GBI missed the minimizer; the
    tolerance absorbs the two formulas' float rounding), and `exact_gap_mean`, the mean
    of `E(x, round(ŷ)) − E*` (≥ 0).

  Pure and jit-compatible (`energy` and `init` static; `config` static or a pytree);
  returns 0-d arrays. `float(v)` each value for reporting.

  Args:
    energy: the energy (an `Energy` or a library energy).
    params: its parameters.
    x: `[B, D]` inputs.
    y: `[B, L]` gold labels in {0, 1}.
    config: the test-time `GBIConfig` (e.g. the objective's `predict_gbi`).
    init: GBI start, `'uniform'` (0.5) or `'local'` (sigmoid of the local logits).

  Returns:
    `{"gbi_steps_mean", "gbi_steps_max", "gbi_converged_fraction", "search_error",
    "search_error_rounded", "energy_gap_mean"}` (+ `"exact_search_error",
    "exact_gap_mean"` on small label spaces), all 0-d (`gbi_steps_max` int32, the rest
    floating).
  """
  model = protocol.as_energy(energy)
  result = infer(model, params, x, config, init=init)
  inputs = jax.lax.stop_gradient(model.encode(params, x))
  y = jnp.asarray(y, result.y.dtype)
  e_gold = model.energy(params, inputs, y)
  e_pred = model.energy(params, inputs, result.y)
  e_rounded = model.energy(params, inputs, model.domain.decode(result.y, 0.5))
  fraction = lambda mask: jnp.mean(mask.astype(result.y.dtype))
  stats = {
      "gbi_steps_mean": jnp.mean(result.steps.astype(result.y.dtype)),
      "gbi_steps_max": jnp.max(result.steps),
      "gbi_converged_fraction": fraction(result.converged),
      "search_error": fraction(e_pred > e_gold),
      "search_error_rounded": fraction(e_rounded > e_gold),
      "energy_gap_mean": jnp.mean(e_pred - e_gold),
  }
  if (isinstance(model.domain, domains.Box) and result.y.ndim == 2
      and result.y.shape[-1] <= exhaustive.MAX_LABELS):
    e_min = _exact_minimum(model, params, inputs, result.y).objective
    stats["exact_search_error"] = fraction(
        e_rounded > e_min + 1e-4 * jnp.maximum(1.0, jnp.abs(e_min)))
    stats["exact_gap_mean"] = jnp.mean(e_rounded - e_min)
  return stats


class Margins(NamedTuple):
  """Per-example terms of the SSVM bracket, all `[B]`.

  `margin = delta − energy_pred + energy_gold`; the loss is `mean(relu(margin))`.
  """
  margin: jax.Array
  delta: jax.Array
  energy_pred: jax.Array
  energy_gold: jax.Array


def _margins(model, params, encoding, y, y_hat, surrogate, eps) -> Margins:
  delta = task_losses.structured_task_loss(model.domain, y_hat, y, surrogate, eps)
  e_pred = model.energy(params, encoding, y_hat)
  e_gold = model.energy(params, encoding, y)
  return Margins(delta - e_pred + e_gold, delta, e_pred, e_gold)


def margins(energy, params, x: jax.Array, y: jax.Array, y_hat: jax.Array, *,
            surrogate: str = "squared",
            surrogate_eps: float = DEFAULT_SURROGATE_EPS) -> Margins:
  """The SSVM bracket at a given ŷ (deterministic forward pass)."""
  model = protocol.as_energy(energy)
  return _margins(model, params, model.encode(params, x), y, y_hat, surrogate,
                  surrogate_eps)




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


def spen_pretrain(energy: Any, optimizer: optax.GradientTransformation, *,
                  l2: float = 0.0) -> base.Objective:
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
    raise ValueError(f"spen_pretrain trains an energy's local classifier; {model.name} "
                     f"has no local_logits")
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
      (needed unless `loss_aug_solver='exhaustive'`).
    predict_gbi: GBI for prediction, run by `gbi_while` to per-example convergence;
      its `entropy_weight` is the test-time entropy temperature (SPEN A.4, §7.1)
      (needed unless `predict_solver='exhaustive'`).
    surrogate: Δ, one of `task_losses.SURROGATES` (`'squared'`, `'log'`, `'l1'`).
    surrogate_eps: the clip of the `'log'` surrogate.
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
    loss_aug_solver: `'gbi'` (`loss_aug_gbi`) or `'exhaustive'` (the exact minimizer of
      `E − Δ` over {0, 1}^L: Box domain and L ≤ `exhaustive.MAX_LABELS` only).
    predict_solver: `'gbi'` (`predict_gbi`) or `'exhaustive'` (the energy's exact
      minimizer over {0, 1}^L, a binary prediction).
  """
  loss_aug_gbi: Optional[GBIConfig] = None
  predict_gbi: Optional[GBIConfig] = None
  surrogate: str = "squared"
  surrogate_eps: float = DEFAULT_SURROGATE_EPS
  trainable: Optional[tuple[str, ...]] = None
  l2: float = 0.0
  init: str = "uniform"
  loss_aug_init: Optional[tuple[str, ...] | str] = None
  loss_aug_solver: str = "gbi"
  predict_solver: str = "gbi"

  def __post_init__(self):
    if self.surrogate not in task_losses.SURROGATES:
      raise ValueError(f"unknown surrogate {self.surrogate!r}; expected one of "
                       f"{task_losses.SURROGATES}")
    for name in ("loss_aug", "predict"):
      solver, config = getattr(self, f"{name}_solver"), getattr(self, f"{name}_gbi")
      if solver not in SOLVERS:
        raise ValueError(f"unknown inference solver {solver!r}; expected one of {SOLVERS}")
      if solver == "gbi":
        if config is None:
          raise ValueError(f"the SSVM hinge with {name}_solver='gbi' needs {name}_gbi "
                           "(a GBIConfig)")
        gbi_lib.validate_config(config)


def ssvm_hinge(energy: Any, optimizer: optax.GradientTransformation, *,
               options: Optional[SSVMOptions] = None, **flat_options: Any) -> base.Objective:
  """Stages 2 and 3: the SSVM hinge with loss-augmented GBI (see the module docstring).

  Args:
    energy: an `Energy` (`en.energy_from_function`, `en.energy_from_module`) or a
      library energy (SPEN, ICNN, sequence, segmentation, FoE, DeepPrior).
    optimizer: applied to the `trainable` groups (SPEN A.5: SGD, momentum 0.9).
    options: an `SSVMOptions`.
    **flat_options: instead of `options`, its fields as keywords
      (`loss_aug_gbi=..., predict_gbi=..., surrogate='l1'`).

  Returns:
    An `Objective` with state `{"energy": ParamGroup}`; `update`'s metrics are `loss`,
    `grad_norm`, `hinge` (mean truncated hinge), `active` (fraction of examples with a
    positive bracket), `delta` (mean Δ(ŷ, y)) and `energy_gap` (mean E(x,ŷ) − E(x,y);
    negative means some ŷ scores below the gold output).
  """
  o = base.resolve_options(SSVMOptions, options, flat_options)
  model = protocol.as_energy(energy)
  init = o.init
  if init not in model.inits:
    raise ValueError(f"unknown init {init!r}; expected one of {model.inits}")
  starts = _loss_aug_starts(init, o.loss_aug_init, model.inits)
  check_solver(o.loss_aug_solver, model)
  check_solver(o.predict_solver, model)
  trainable = protocol.trainable_groups(model, o.trainable)
  loss_aug_gbi, predict_gbi, surrogate, surrogate_eps, l2 = (
      o.loss_aug_gbi, o.predict_gbi, o.surrogate, o.surrogate_eps, o.l2)
  loss_aug_solver, predict_solver = o.loss_aug_solver, o.predict_solver

  def loss_fn(params, batch, rng):
    params = base.clamp_groups(params, trainable)
    y = batch["y"]
    inputs = model.encode(params, batch["x"], True, rng)
    y_hat = _loss_augmented(model, params, inputs, batch["x"], y, loss_aug_gbi, surrogate,
                            surrogate_eps, starts, loss_aug_solver)
    m = _margins(model, params, inputs, y, y_hat, surrogate, surrogate_eps)
    hinge = jnp.mean(jax.nn.relu(m.margin))
    loss = hinge + l2 * base.groups_l2(params, trainable) if l2 else hinge
    return loss, {"hinge": hinge,
                  "active": jnp.mean((m.margin > 0).astype(hinge.dtype)),
                  "delta": jnp.mean(m.delta),
                  "energy_gap": jnp.mean(m.energy_pred - m.energy_gold)}

  def predict(state, x):
    if predict_solver == "exhaustive":
      return exact_infer(model, state["energy"].params, x).y
    return infer(model, state["energy"].params, x, predict_gbi, init=init).y

  return _objective(model, optimizer, trainable, loss_fn, predict)

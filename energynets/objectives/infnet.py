"""`infnet`: an energy trained jointly with inference networks (Tu, Pang & Gimpel 2020).

Two feed-forward networks replace gradient-based inference (GBI): a cost-augmented
network F_Φ for the hinge's inner maximization, and a test-time network A_Ψ for
prediction,

    F_Φ(x) ≈ argmin_{ȳ ∈ [0,1]^L}  E_Θ(x, ȳ) − Δ(ȳ, y)                (Eq. 3)
    A_Ψ(x) ≈ argmin_{ȳ ∈ [0,1]^L}  E_Θ(x, ȳ)                          (Eq. 2)

and the energy E_Θ (LOW energy = good; any `Energy`, reached only through its fields:
`encode` once per x, `energy(params, encoding, ȳ) -> [B]`) is trained on their outputs.
Per example, with ŷ_F = F_Φ(x), ŷ_A = A_Ψ(x) and y the gold labels,

    margin-rescaled hinge  h_F = Δ(ŷ_F, y) − E(x, ŷ_F) + E(x, y)        (Eq. 4)
    perceptron             h_A =          − E(x, ŷ_A) + E(x, y)        (Eq. 5, 2nd term)

    energy step (Θ)      min  mean( [h_F]_+ )                     InfNetMargin()
                         min  mean( [h_A]_+ )                     InfNetPerceptron()
                         min  mean( [h_F]_+ + λ_c [h_A]_+ )       InfNetCompound() (Eq. 6)
                              + l2 · ½‖W_Θ‖²

    inference step (Φ, Ψ)  min  mean( E(x, ŷ_F) − Δ(ŷ_F, y) )  + c · CE(F_Φ(x), y)
                                + λ_A · mean( E(x, ŷ_A) )      + c · CE(A_Ψ(x), y)
                                + net_l2 · ½‖W_{Φ,Ψ}‖²

i.e. the nets maximize the untruncated game value Δ(F) − E(F) − λE(A) of §3 (E(x, y)
does not depend on Φ, Ψ) and also fit the gold labels (the local CE of §4.3, weight
c = `ce_weight`, 1 in the paper, 0 for the ablation). Δ is the L1 distance Σ_l|ŷ_l − y_l|
(`ssvm.task_loss(·, ·, 'l1')`, the paper's choice; for binary y it is the multilinear
extension of the Hamming loss). CE is `multilabel_bce` on the nets' logits (BCE summed
over labels, averaged over examples), and ŷ = σ(logits): the nets output logits [B, L].
Prediction is A_Ψ(x) = σ(logits) — one forward pass, no search.

Sequences (the paper's POS and NER experiments) use the same objective with an energy
on the per-token Simplex (a `SequenceEnergy`) and taggers as nets: outputs are per-token logits `[B, T, L]`, ŷ the
per-token softmax, CE the token cross-entropy over real tokens and Δ the L1 distance
over real tokens (padded positions, all-zero gold rows, never count); the stacked F_Φ
is then exactly the paper's `softmax(W_q[A_Ψ(x)_t; y_t] + b_q)` per position. The
pieces come from `outputs.OutputStructure`, picked from the energy's domain (`output=`
overrides it).

The energy step's loss is a value, the energy objective (`energy_objective=`): a small
frozen dataclass carrying its own options whose `loss(InfNetEnergyInputs)` computes the
loss of a batch from E at the gold output and at the nets' outputs; a user's own value
with that method plugs in the same way (`InfNetEnergyObjective`). The family's other
options are one value, `InfNetOptions` (architecture, λ_A, CE weight, k, truncation, Δ,
L2). Configs write one flat block: `infnet_options_from_config` maps it onto both values
(`get_energy_objective` maps the names `'margin'`, `'perceptron'`, `'compound'`).

Choices, with reasons:

- One `update` = k = `num_inner_steps` inference steps ("I steps") on (Φ, Ψ), then one
  energy step ("E step") on Θ (§4.2: k = 5 balanced the two players; k = 1, Tu & Gimpel
  2018's setting, lets the nets lag). The I steps are a `jax.lax.scan` carrying the two
  nets' `ParamGroup`s, so one `jax.jit` covers the whole alternation. All k I steps use
  the update's batch (the trainer hands one batch per update); their dropout masks
  differ. The E step sees the nets after their k steps.
- Zero truncation ([·]_+) only in the energy step (`truncate='energy'`, §4.1): a
  truncated hinge gives the nets no gradient on examples the energy already separates,
  which early in training are exactly those where the nets are bad, and training
  failed without CE (Table 1). `truncate='both'` also truncates F_Φ's term (the nets
  then maximize mean([h_F]_+), Tu & Gimpel 2018, Table 1's "zero trunc. yes" rows);
  `'none'` truncates nothing. A_Ψ's term is never truncated: its problem is Eq. 2,
  which has no hinge (the paper's I-step objective has −λE(x, A_Ψ(x)) bare).
- λ_A (`energy_weight`) defaults to the compound weight λ_c under `InfNetCompound` — one
  λ in the paper's minimax — and to 1 otherwise (`InfNetPerceptron`: A_Ψ is the
  perceptron's inference network; `InfNetMargin`: A_Ψ solves Eq. 2 for the current
  energy).
- `InfNetMargin` trains A_Ψ jointly instead of fine-tuning it from Φ after training as Tu &
  Gimpel 2018 did (the paper, §2, calls that fine-tune "minimal change"): A_Ψ does not
  enter the energy's loss, so this is the same problem solved alongside, at no extra
  stage. A stage that only fine-tunes the nets against a fixed energy is this objective
  with `optax.set_to_zero()` as the energy optimizer, continuing from this state.
- `InfNetPerceptron` has no F_Φ (`uses_cost_net = False`): the state then holds no
  `cost_net` and `architecture` is unused.
- Architectures of (F_Φ, A_Ψ) (§3.1, Fig. 1), with `net(x) -> [B, L]` logits (an `MLP`):
  `'separated'`: F_Φ and A_Ψ two independent copies of `net`; `'shared'`: one feature
  network (`net`'s hidden layers, read with `return_features=True`) and two heads, A_Ψ's
  the net's own `head` and F_Φ's a second `Dense(L)` — the shared features are trained
  by both nets' terms; `'stacked'`: F_Φ(x, y) = σ(W[A_Ψ(x); y] + b), W [2L → L], the
  multi-label form of the paper's per-position `softmax(W_q[A_Ψ(x)_t; y_t] + b_q)`, with
  `stop_gradient` at A_Ψ(x) so that F_Φ's terms never move Ψ ("we block the gradient at
  A_Ψ when updating Φ"). Both nets' parameters move in every I step, each with its own
  optimizer, on the one joint loss above; the shared feature network belongs to A_Ψ's
  group (`test_net`: it is needed at test time) and is updated by A_Ψ's optimizer.
- Within the E step the energy runs in training mode (dropout, one mask for y, ŷ_F and
  ŷ_A through one `encode`) and the nets' outputs are deterministic (`train=False`) and
  `stop_gradient`-ed: the energy is pushed up at what the nets actually predict. Within
  the I steps the nets run in training mode and the energy is a fixed, deterministic
  critic whose encoding of x is computed once for all k steps.
- `update`'s `loss` and `grad_norm` are the energy step's (the objective Θ minimizes;
  the trainer's non-finite guard reads `loss`, and non-finite nets make it non-finite
  too, since it evaluates E at their outputs); the last I step's values are reported as
  `infnet_*`.

Staged training (`init_from`). The paper pretrains nothing for its sequence tasks but
pretrains the feature network and both inference networks with local CE for parsing
(appendix); SPEN pretrains its local MLP. `init_from(prev_state, rng, batch)` carries
what the previous stage trained, fresh-initializes the rest (from `rng`) and starts new
optimizer states:

- energy ← `prev["energy"]` (a SPEN `ssvm`/`spen_pretrain` state or an infnet state;
  shapes must match), else a `local_bce` state's `prev["net"]` becomes the energy's
  `local_net` when the energy's parameters have such a group of the same shapes (a
  SPEN's local classifier; other energies start fresh);
- A_Ψ ← `prev["test_net"]` (an infnet state; shapes must match), else `prev["net"]`
  (`local_bce`), else the energy's pretrained `local_net` (itself a multi-label MLP
  classifier), each when shapes match;
- F_Φ ← `prev["cost_net"]` when shapes match; otherwise `'separated'` copies A_Ψ's
  pretrained parameters and `'shared'` copies A_Ψ's head (F_Φ starts at the pretrained
  classifier, as the parsing appendix pretrains both nets with CE); `'stacked'` is
  fresh (W acts on [A_Ψ(x); y], which no local classifier has).

What was carried and what was fresh is logged.
"""

import dataclasses
from typing import Any, Callable, ClassVar, Mapping, NamedTuple, Optional, Protocol

from absl import logging
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets.energies import protocol
from energynets.objectives import base
from energynets.objectives import outputs
from energynets.objectives import ssvm

ARCHITECTURES = ("separated", "shared", "stacked")
TRUNCATIONS = ("energy", "both", "none")

NetParams = dict[str, Any]  # {"test_net": Ψ, "cost_net": Φ (absent without F_Φ)}
EnergyOf = Callable[[jax.Array], jax.Array]  # ȳ [B, L] -> E(x, ȳ) [B] for a fixed x


# ---------------------------------------------------------------------------------------
# The cost-augmented network's extra heads.


class CostHead(nn.Module):
  """`'shared'` F_Φ: `features [B, H] -> logits [B, L]` on A_Ψ's feature network."""
  num_labels: int

  @nn.compact
  def __call__(self, features: jax.Array) -> jax.Array:
    return nn.Dense(self.num_labels, name="head")(features)


class StackedCostNet(nn.Module):
  """`'stacked'` F_Φ: `(A_Ψ(x) [B, L] probabilities, y [B, L]) -> logits [B, L]`.

  `W[A_Ψ(x); y] + b`; the caller stops the gradient at A_Ψ(x).
  """
  num_labels: int

  @nn.compact
  def __call__(self, test_probs: jax.Array, y: jax.Array) -> jax.Array:
    inputs = jnp.concatenate([test_probs, y.astype(test_probs.dtype)], axis=-1)
    return nn.Dense(self.num_labels, name="head")(inputs)


# ---------------------------------------------------------------------------------------
# The energy as the losses see it.


def energy_evaluator(energy, params, x: jax.Array, *, train: bool = False,
                     rng: Optional[jax.Array] = None) -> EnergyOf:
  """`ȳ [B, L] -> E(x, ȳ) [B]` for a fixed `x [B, D]`.

  `energy` is anything `protocol.as_energy` accepts; x is encoded once here
  (`Energy.encode`, with the dropout `rng` in training) and every evaluation reuses the
  encoding (same dropout mask).
  """
  model = protocol.as_energy(energy)
  encoding = model.encode(params, x, train, rng if train else None)
  return lambda y: model.energy(params, encoding, y)


# ---------------------------------------------------------------------------------------
# Energy objectives: values that carry their own options and compute the E-step loss.


class InfNetEnergyInputs(NamedTuple):
  """What an energy objective computes the E-step loss from, for one batch.

  Attributes:
    energy_of: `ȳ -> E(x, ȳ) [B]` at the energy's current parameters, the only thing the
      loss is differentiated in (training mode: x encoded once, one dropout mask for
      every ȳ).
    y: the gold outputs, as floats.
    energy_gold: `E(x, y) [B]`.
    y_cost: F_Φ(x), the cost-augmented network's outputs, without a gradient path; None
      for an objective that builds no F_Φ (`uses_cost_net = False`).
    y_test: A_Ψ(x), the test-time network's outputs, without a gradient path.
    delta: `Δ(y_cost, y) [B]` over real positions (`InfNetOptions.surrogate`); None when
      y_cost is.
    truncate: the hinge's zero truncation `[·]_+` (`InfNetOptions.truncate` `'energy'`
      or `'both'`), or the identity (`'none'`).
    structure: the `outputs.OutputStructure` of the outputs (link, local loss, padding).
  """
  energy_of: EnergyOf
  y: jax.Array
  energy_gold: jax.Array
  y_cost: Optional[jax.Array]
  y_test: jax.Array
  delta: Optional[jax.Array]
  truncate: Callable[[jax.Array], jax.Array]
  structure: outputs.OutputStructure


class InfNetEnergyObjective(Protocol):
  """The energy's loss in the E step of `inference_network`: a value carrying its options.

  `loss(inputs)` returns `(scalar loss, metrics)` for one batch, differentiable through
  `inputs.energy_of` only (the nets' outputs carry no gradient). The library's are
  `InfNetMargin`, `InfNetPerceptron` and `InfNetCompound` (`get_energy_objective` maps
  their names, for configs); any value with this method plugs into
  `inference_network(..., energy_objective=...)`. Two optional attributes:
  `uses_cost_net` (default True) says whether the objective reads F_Φ's outputs (False
  builds no F_Φ: no `cost_net` in the state, no cost-augmented term in the I steps), and
  `default_energy_weight` (default 1) is λ_A, the weight of E(x, A_Ψ(x)) in A_Ψ's loss,
  where `InfNetOptions.energy_weight` is None.
  """

  def loss(self, inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
    """The E-step loss of one batch and its metrics."""


def _margin_hinge(inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
  """`mean [Δ(ŷ_F, y) − E(x, ŷ_F) + E(x, y)]_+` (Eq. 4) and its metrics."""
  e_cost = inputs.energy_of(inputs.y_cost)
  margin = inputs.delta - e_cost + inputs.energy_gold
  hinge = jnp.mean(inputs.truncate(margin))
  return hinge, dict(hinge_margin=hinge, active_margin=_fraction(margin > 0),
                     energy_cost=jnp.mean(e_cost), delta=jnp.mean(inputs.delta))


def _perceptron_hinge(inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
  """`mean [E(x, y) − E(x, ŷ_A)]_+` (Eq. 5's second term) and its metrics."""
  e_test = inputs.energy_of(inputs.y_test)
  gap = inputs.energy_gold - e_test
  perceptron = jnp.mean(inputs.truncate(gap))
  return perceptron, dict(hinge_perceptron=perceptron, active_perceptron=_fraction(gap > 0),
                          energy_test=jnp.mean(e_test))


@dataclasses.dataclass(frozen=True)
class InfNetMargin:
  """The margin-rescaled hinge on F_Φ (Eq. 4): `mean [Δ(ŷ_F, y) − E(x, ŷ_F) + E(x, y)]_+`.

  A_Ψ does not enter this loss; it is trained alongside on Eq. 2 for the current energy
  (Tu & Gimpel 2018 fine-tuned it from Φ after training instead).
  """
  uses_cost_net: ClassVar[bool] = True

  def loss(self, inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged hinge, its active fraction, E(x, ŷ_F) and Δ."""
    return _margin_hinge(inputs)


@dataclasses.dataclass(frozen=True)
class InfNetPerceptron:
  """The perceptron loss on A_Ψ: `mean [E(x, y) − E(x, ŷ_A)]_+`; builds no F_Φ."""
  uses_cost_net: ClassVar[bool] = False

  def loss(self, inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged perceptron hinge, its active fraction and E(x, ŷ_A)."""
    return _perceptron_hinge(inputs)


@dataclasses.dataclass(frozen=True)
class InfNetCompound:
  """The compound loss (Eq. 6): the margin hinge on F_Φ plus λ_c times the perceptron's.

  Attributes:
    compound_weight: λ_c, the perceptron term's weight; also λ_A, the weight of
      E(x, A_Ψ(x)) in A_Ψ's loss, unless `InfNetOptions.energy_weight` sets it (the
      paper's minimax has one λ).
  """
  compound_weight: float = 1.0
  uses_cost_net: ClassVar[bool] = True

  def __post_init__(self):
    _non_negative("compound_weight", self.compound_weight)

  @property
  def default_energy_weight(self) -> float:
    """λ_A where `InfNetOptions.energy_weight` is None: λ_c."""
    return self.compound_weight

  def loss(self, inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
    """Both hinges' sum and both terms' metrics."""
    hinge, metrics = _margin_hinge(inputs)
    perceptron, perceptron_metrics = _perceptron_hinge(inputs)
    return hinge + self.compound_weight * perceptron, dict(metrics, **perceptron_metrics)


# Names of the library's energy objectives, for configs (`get_energy_objective`).
ENERGY_OBJECTIVES: dict[str, type] = {
    "margin": InfNetMargin, "perceptron": InfNetPerceptron, "compound": InfNetCompound}
OBJECTIVES = tuple(ENERGY_OBJECTIVES)


def _non_negative(name: str, value) -> None:
  if value is not None and not value >= 0:  # `not >=` also refuses NaN
    raise ValueError(f"{name} must be >= 0, got {value}")


def get_energy_objective(name: str, **options: Any) -> InfNetEnergyObjective:
  """The library's energy objective called `name`, built with `options`.

  Args:
    name: one of `OBJECTIVES` (`'margin'`, `'perceptron'`, `'compound'`).
    **options: fields of that objective (e.g. `compound_weight=0.5` for `'compound'`).

  Returns:
    The objective value, e.g. `InfNetCompound(compound_weight=0.5)`.

  Raises:
    ValueError: one line naming an unknown `name` and the known ones, or options that
      `name` does not take.
  """
  if name not in ENERGY_OBJECTIVES:
    raise ValueError(f"unknown InfNet energy objective {name!r}; known: {OBJECTIVES}")
  cls = ENERGY_OBJECTIVES[name]
  foreign, fields = base.options_not_taken(cls, options)
  if foreign:
    raise ValueError(f"options {foreign} do not apply to the InfNet energy objective "
                     f"{name!r} (its options: {fields})")
  return cls(**options)


# ---------------------------------------------------------------------------------------
# The family's options.


@dataclasses.dataclass(frozen=True)
class InfNetOptions:
  """InfNet's options other than the energy objective (defaults: the paper's best setting).

  Attributes:
    architecture: `'separated'`, `'shared'` or `'stacked'` (F_Φ from [A_Ψ(x); y]; see
      the module docstring).
    energy_weight: λ_A, the weight of E(x, A_Ψ(x)) in A_Ψ's loss; None: the energy
      objective's `default_energy_weight` (λ_c under `InfNetCompound`, the paper's one
      λ), else 1.
    ce_weight: weight of the local CE of both nets (paper: 1; 0 for the ablation).
    num_inner_steps: k ≥ 1 I steps per E step (paper: 5).
    truncate: where the hinge is zero-truncated: `'energy'` (the E step only; the
      paper), `'both'` (also F_Φ's I-step term; Tu & Gimpel 2018) or `'none'`.
    surrogate: Δ, a name of `ssvm.SURROGATES` (paper: `'l1'`).
    l2: weight of `½‖W‖²` on the energy's weight matrices.
    net_l2: weight of `½‖W‖²` on the inference nets' weight matrices.
    output: the `OutputStructure` (or its name); None: `outputs.for_domain` of the
      energy's domain, i.e. per-token softmax outputs on the Simplex (a
      `SequenceEnergy`), σ per label otherwise.
    carry_energy: whether `init_from` carries a previous stage into the energy (see the
      module docstring); False starts it fresh while the nets are still carried. A
      pretrained local term can make every margin inactive from the start: a
      token-CE tagger's confident logits put E(x, y) far below E(x, F_Φ(x)) − Δ
      (Twitter POS: −289 vs −217 with Δ = 19), so the hinge and its gradient stay zero.
  """
  architecture: str = "stacked"
  energy_weight: Optional[float] = None
  ce_weight: float = 1.0
  num_inner_steps: int = 5
  truncate: str = "energy"
  surrogate: str = "l1"
  l2: float = 0.0
  net_l2: float = 0.0
  output: str | outputs.OutputStructure | None = None
  carry_energy: bool = True

  def __post_init__(self):
    for value, choices, what in ((self.architecture, ARCHITECTURES, "architecture"),
                                 (self.truncate, TRUNCATIONS, "truncate"),
                                 (self.surrogate, ssvm.SURROGATES, "surrogate")):
      if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; expected one of {choices}")
    for name in ("energy_weight", "ce_weight", "l2", "net_l2"):
      _non_negative(name, getattr(self, name))
    if not isinstance(self.num_inner_steps, int) or self.num_inner_steps < 1:
      raise ValueError(f"num_inner_steps must be an integer >= 1, got "
                       f"{self.num_inner_steps!r}")


_OPTION_FIELDS = base.field_names(InfNetOptions)


def infnet_options_from_config(config: Mapping[str, Any], **values: Any
                               ) -> tuple[InfNetOptions, InfNetEnergyObjective]:
  """InfNet's options and energy objective from a flat block of options.

  `objective` names the energy objective (`get_energy_objective`, default
  `'compound'`); the keys that are `InfNetOptions` fields go to the options, the chosen
  objective's fields to it. A key of another library objective is ignored: a config
  block carries every objective's options (`compound_weight` stays in it under
  `objective='margin'`).

  Args:
    config: a config's `infnet` block.
    **values: Python values (e.g. `l2`, or a whole flat set of options given as
      keywords); they override `config`.

  Returns:
    `(InfNetOptions, energy objective)`.

  Raises:
    ValueError: one line naming an unknown key and the known ones (or a bad value).
  """
  merged = {**config, **values}
  objective_fields = tuple(dict.fromkeys(
      f for cls in ENERGY_OBJECTIVES.values() for f in base.field_names(cls)))
  known = ("objective",) + _OPTION_FIELDS + objective_fields
  unknown = sorted(k for k in merged if k not in known)
  if unknown:
    raise ValueError(f"unknown InfNet options {unknown}; known: {known}")
  name = merged.get("objective", "compound")
  taken = base.field_names(ENERGY_OBJECTIVES[name]) if name in ENERGY_OBJECTIVES else ()
  objective = get_energy_objective(name, **{k: v for k, v in merged.items() if k in taken})
  options = InfNetOptions(**{k: v for k, v in merged.items() if k in _OPTION_FIELDS})
  return options, objective


def _resolve(options: Optional[InfNetOptions],
             energy_objective: Optional[InfNetEnergyObjective],
             flat: dict) -> tuple[InfNetOptions, InfNetEnergyObjective]:
  """The options and objective of `infnet_losses` / `inference_network`, from values or
  from flat keywords (`infnet_options_from_config`'s `values`)."""
  if flat:
    if options is not None:
      raise ValueError(f"give InfNet's options either as options=InfNetOptions(...) or as "
                       f"keywords, not both; got options and {sorted(flat)}")
    for_objective = sorted(k for k in flat if k not in _OPTION_FIELDS)
    if energy_objective is not None and for_objective:
      raise ValueError(f"energy objective options {for_objective} given beside "
                       "energy_objective: set them on the objective value")
    options, named = infnet_options_from_config({}, **flat)
    energy_objective = named if energy_objective is None else energy_objective
  return (InfNetOptions() if options is None else options,
          InfNetCompound() if energy_objective is None else energy_objective)


# ---------------------------------------------------------------------------------------
# The two losses.


class InfNetLosses(NamedTuple):
  """The pure functions `inference_network` is built from (exposed for tests and reuse).

  Attributes:
    net_logits: `(net_params, x [B, D], y [B, L], train, rng) -> (test_logits [B, L],
      cost_logits [B, L] or None)`; `y` only feeds the `'stacked'` F_Φ.
    init_nets: `(rng, batch) -> net_params`, fresh `{"test_net", "cost_net"}`.
    inference_loss: `(net_params, energy_of, batch, rng) -> (loss, metrics)`, the I-step
      loss (module docstring) at a fixed energy `energy_of = energy_evaluator(...)`.
    energy_loss: `(energy_params, batch, y_cost, y_test, rng) -> (loss, metrics)`, the
      E-step loss at fixed net outputs (`[B, L]` probabilities; `y_cost` is None for
      an objective without F_Φ, `y_test` is unused by `InfNetMargin`).
    structure: the `OutputStructure` (link, local CE, padding) the losses use.
  """
  net_logits: Callable[..., tuple[jax.Array, Optional[jax.Array]]]
  init_nets: Callable[[jax.Array, base.Batch], NetParams]
  inference_loss: Callable[..., tuple[jax.Array, base.Metrics]]
  energy_loss: Callable[..., tuple[jax.Array, base.Metrics]]
  structure: outputs.OutputStructure = outputs.MULTILABEL


def infnet_losses(energy: Any, net: nn.Module, *, options: Optional[InfNetOptions] = None,
                  energy_objective: Optional[InfNetEnergyObjective] = None,
                  **flat_options: Any) -> InfNetLosses:
  """The I-step and E-step losses and the nets' forward pass (see `inference_network`).

  Args:
    energy: E_Θ, anything `protocol.as_energy` accepts.
    net: the inference networks' architecture (see `inference_network`).
    options: `InfNetOptions` (default: `InfNetOptions()`).
    energy_objective: the E-step loss, an `InfNetEnergyObjective` value (default
      `InfNetCompound()`).
    **flat_options: instead of the two values, the flat form configs use
      (`objective='margin', truncate='both', ...`; `infnet_options_from_config`).

  Returns:
    `InfNetLosses`.
  """
  options, objective = _resolve(options, energy_objective, flat_options)
  architecture, surrogate = options.architecture, options.surrogate
  ce_weight, l2, net_l2 = options.ce_weight, options.l2, options.net_l2
  model = protocol.as_energy(energy)
  structure = (outputs.for_domain(model.domain) if options.output is None
               else outputs.get_structure(options.output))
  link = structure.link
  truncate_cost = options.truncate == "both"
  truncated = jax.nn.relu if options.truncate != "none" else (lambda v: v)

  def delta_of(y_hat, y):  # Δ over real positions (sequences: padding excluded)
    return ssvm.task_loss(structure.mask_padding(y_hat, y), y, surrogate)
  uses_cost = bool(getattr(objective, "uses_cost_net", True))
  energy_weight = options.energy_weight
  if energy_weight is None:
    energy_weight = getattr(objective, "default_energy_weight", 1.0)

  def net_logits(net_params, x, y, train=False, rng=None):
    test_rng = cost_rng = None
    if train:
      test_rng, cost_rng = jax.random.split(rng)
    test_vars = {"params": net_params["test_net"]}
    test_kwargs = {"train": train, "rngs": {"dropout": test_rng} if train else None}
    if not uses_cost:
      return net.apply(test_vars, x, **test_kwargs), None
    if architecture == "shared":
      # One pass of the feature network feeds both heads (one dropout mask).
      test_logits, features = net.apply(test_vars, x, return_features=True, **test_kwargs)
      cost_logits = CostHead(test_logits.shape[-1]).apply(
          {"params": net_params["cost_net"]}, features)
      return test_logits, cost_logits
    test_logits = net.apply(test_vars, x, **test_kwargs)
    if architecture == "separated":
      cost_logits = net.apply({"params": net_params["cost_net"]}, x, train=train,
                              rngs={"dropout": cost_rng} if train else None)
    else:  # stacked: F_Φ's terms must not reach Ψ
      test_probs = jax.lax.stop_gradient(link(test_logits))
      cost_logits = StackedCostNet(test_logits.shape[-1]).apply(
          {"params": net_params["cost_net"]}, test_probs, y)
    return test_logits, cost_logits

  def init_nets(rng, batch):
    test_rng, cost_rng = jax.random.split(rng)
    x, y = batch["x"], batch["y"]
    params = {"test_net": flax.core.unfreeze(net.init({"params": test_rng}, x)["params"])}
    if not uses_cost:
      return params
    num_labels = y.shape[-1]
    if architecture == "separated":
      cost = net.init({"params": cost_rng}, x)["params"]
    elif architecture == "shared":
      _, features = net.apply({"params": params["test_net"]}, x, return_features=True)
      cost = CostHead(num_labels).init({"params": cost_rng}, features)["params"]
    else:
      probs = jnp.zeros(y.shape, x.dtype)
      cost = StackedCostNet(num_labels).init({"params": cost_rng}, probs, y)["params"]
    params["cost_net"] = flax.core.unfreeze(cost)
    return params

  def inference_loss(net_params, energy_of, batch, rng):
    y = batch["y"]
    test_logits, cost_logits = net_logits(net_params, batch["x"], y, train=True, rng=rng)
    y_test = link(test_logits)
    e_test = jnp.mean(energy_of(y_test))
    ce_test = structure.local_loss(test_logits, y)
    loss = energy_weight * e_test + ce_weight * ce_test
    metrics = {"energy_test": e_test, "ce_test": ce_test}
    if uses_cost:
      y_cost = link(cost_logits)
      delta = delta_of(y_cost, y)
      e_cost = energy_of(y_cost)
      if truncate_cost:  # Tu & Gimpel 2018: maximize the truncated hinge
        cost_term = -jnp.mean(jax.nn.relu(delta - e_cost + energy_of(y)))
      else:  # −(Δ − E(F)); E(x, y) is constant in Φ
        cost_term = jnp.mean(e_cost - delta)
      ce_cost = structure.local_loss(cost_logits, y)
      loss = loss + cost_term + ce_weight * ce_cost
      metrics.update(cost_augmented=jnp.mean(delta - e_cost), delta=jnp.mean(delta),
                     ce_cost=ce_cost)
    if net_l2:
      loss = loss + net_l2 * base.l2_penalty(net_params)
    return loss, metrics

  def energy_loss(energy_params, batch, y_cost, y_test, rng):
    energy_of = energy_evaluator(model, energy_params, batch["x"], train=True, rng=rng)
    y = batch["y"]
    gold = jnp.asarray(y, _float_dtype(energy_params))
    e_gold = energy_of(gold)
    gold_metric = jnp.mean(e_gold)
    delta = None
    if uses_cost:
      y_cost = jax.lax.stop_gradient(y_cost)
      delta = delta_of(y_cost, y)
    loss, metrics = objective.loss(InfNetEnergyInputs(
        energy_of=energy_of, y=gold, energy_gold=e_gold,
        y_cost=y_cost if uses_cost else None, y_test=jax.lax.stop_gradient(y_test),
        delta=delta, truncate=truncated, structure=structure))
    metrics = {"energy_gold": gold_metric, **metrics}
    if l2:
      loss = loss + l2 * base.l2_penalty(energy_params)
    return loss, metrics

  return InfNetLosses(net_logits, init_nets, inference_loss, energy_loss, structure)


def _float_dtype(params) -> jnp.dtype:
  """The dtype of a parameter pytree's first leaf (gold labels are cast to it)."""
  leaves = jax.tree.leaves(params)
  return leaves[0].dtype if leaves else jnp.float32


def _fraction(mask: jax.Array) -> jax.Array:
  return jnp.mean(mask.astype(jnp.float32))


# ---------------------------------------------------------------------------------------
# Carrying parameters between stages.


def _local_net(energy_params) -> Any:
  """The `local_net` group of an energy's parameter tree (a SPEN's local classifier),
  None when the tree has none."""
  if isinstance(energy_params, Mapping):
    return energy_params.get("local_net")
  return None


def carry_params(prev_state, fresh_energy, fresh_nets: NetParams, architecture: str,
                 carry_energy: bool = True) -> tuple[Any, NetParams, dict[str, str]]:
  """(energy params, net params, {group: source}) continuing `prev_state`.

  See the module docstring for the rules; `fresh_*` supply every group not carried
  and the shapes a carried group must have. `carry_energy=False` keeps the fresh
  energy (the nets are still carried).
  """
  prev = {k: getattr(v, "params", v) for k, v in prev_state.items()}
  if not {"energy", "net", "test_net"} & set(prev):
    raise ValueError(f"cannot continue from a state with keys {sorted(prev)}; expected "
                     "'energy' (a SPEN or infnet stage), 'net' (local_bce) or 'test_net'")
  sources = {}
  energy_params = fresh_energy
  if not carry_energy:
    sources["energy"] = "fresh (carry_energy=False)"
  elif "energy" in prev:
    energy_params = base.carried(prev["energy"], fresh_energy, "the previous energy")
    sources["energy"] = "energy"
  elif _local_net(fresh_energy) is not None and base.first_match(
      [("net", prev.get("net"))], _local_net(fresh_energy)):
    energy_params = dict(fresh_energy, local_net=flax.core.unfreeze(prev["net"]))
    sources["energy"] = "net -> local_net"
  else:
    sources["energy"] = "fresh"

  nets = dict(fresh_nets)
  energy_local = _local_net(prev["energy"]) if "energy" in prev else None
  if "test_net" in prev:
    nets["test_net"] = base.carried(prev["test_net"], fresh_nets["test_net"],
                                     "the previous test-time network")
    sources["test_net"] = "test_net"
  else:
    match = base.first_match([("net", prev.get("net")), ("energy.local_net", energy_local)],
                         fresh_nets["test_net"])
    if match:
      sources["test_net"], nets["test_net"] = match
    else:
      sources["test_net"] = "fresh"

  if "cost_net" in fresh_nets:
    reference = fresh_nets["cost_net"]
    pretrained = sources["test_net"] != "fresh"
    candidates = [("cost_net", prev.get("cost_net"))]
    if architecture == "separated" and pretrained:
      candidates.append((f"{sources['test_net']} (copy of test_net)", nets["test_net"]))
    elif architecture == "shared" and pretrained and "head" in nets["test_net"]:
      candidates.append((f"{sources['test_net']} head (copy of test_net's)",
                         {"head": nets["test_net"]["head"]}))
    match = base.first_match(candidates, reference)
    if match:
      sources["cost_net"], nets["cost_net"] = match
    else:
      sources["cost_net"] = "fresh"
  return energy_params, nets, sources


# ---------------------------------------------------------------------------------------
# The objective.


def inference_network(
    energy: Any,
    net: nn.Module,
    energy_optimizer: optax.GradientTransformation,
    test_optimizer: optax.GradientTransformation,
    cost_optimizer: Optional[optax.GradientTransformation] = None,
    *,
    options: Optional[InfNetOptions] = None,
    energy_objective: Optional[InfNetEnergyObjective] = None,
    **flat_options: Any,
) -> base.Objective:
  """The joint energy / inference-network objective (see the module docstring).

  Args:
    energy: E_Θ, any `Energy` (`energy_from_function`, `energy_from_module`) or a
      library energy (`SPENEnergy`, `SequenceEnergy`, ...; `protocol.as_energy`).
    net: the inference networks' architecture, `net(x, train=..., return_features=...)
      -> [B, L]` logits (an `energynets.nets.MLP`); `'shared'` needs `return_features`
      and a final layer named `head`.
    energy_optimizer: for Θ (the paper: Adam).
    test_optimizer: for Ψ, and the shared feature network under `'shared'` (the paper:
      SGD with momentum with CE, Adam without it for POS; Adam for NER).
    cost_optimizer: for Φ; None uses `test_optimizer`'s transformation (own state).
    options: the family's options, `InfNetOptions` (default: the paper's best setting:
      stacked nets, local CE of weight 1, truncation in the E step only, k = 5, Δ = L1).
    energy_objective: the E-step loss, an `InfNetEnergyObjective` value:
      `InfNetMargin()` (the margin-rescaled hinge on F_Φ), `InfNetPerceptron()` (on A_Ψ;
      no F_Φ), `InfNetCompound(compound_weight=λ_c)` (their sum, the default) or your own.
    **flat_options: instead of the two values, the flat form configs use
      (`objective='margin', architecture='shared', ...`; `infnet_options_from_config`).

  Returns:
    An `Objective` whose state is `{"energy", "test_net", "cost_net"}` `ParamGroup`s
    (no `cost_net` for an objective without F_Φ). `update`'s metrics: `loss` and
    `grad_norm` (the E step), `energy_gold` and the energy objective's metrics (the
    library's: `hinge_margin`, `active_margin`, `energy_cost`, `delta` of the margin
    term, `hinge_perceptron`, `active_perceptron`, `energy_test` of the perceptron
    term), and the last I step's `infnet_loss`, `infnet_grad_norm`,
    `infnet_energy_test`, `infnet_ce_test` (+ `infnet_cost_augmented` = mean
    Δ − E(x, F_Φ(x)), the paper's l1, `infnet_delta`, `infnet_ce_cost`).
    `predict(state, x)` is σ(A_Ψ(x)) `[B, L]`.
  """
  options, energy_objective = _resolve(options, energy_objective, flat_options)
  num_inner_steps, architecture = options.num_inner_steps, options.architecture
  carry_energy = options.carry_energy
  model = protocol.as_energy(energy)
  losses = infnet_losses(model, net, options=options, energy_objective=energy_objective)
  optimizers = {"energy": energy_optimizer, "test_net": test_optimizer,
                "cost_net": cost_optimizer if cost_optimizer is not None else test_optimizer}

  def init_energy(rng, batch):
    # Checked against the batch: a wrong-shaped energy fails here, in one line.
    x = batch["x"]
    y = jnp.zeros(batch["y"].shape, x.dtype)
    return flax.core.unfreeze(protocol.init_checked(model, rng, x, y))

  def make_state(energy_params, net_params):
    state = {"energy": base.init_group(energy_params, optimizers["energy"])}
    for name, params in net_params.items():
      state[name] = base.init_group(params, optimizers[name])
    return state

  def init(rng, batch):
    energy_rng, nets_rng = jax.random.split(rng)
    return make_state(init_energy(energy_rng, batch), losses.init_nets(nets_rng, batch))

  def init_from(prev_state, rng, batch):
    energy_rng, nets_rng = jax.random.split(rng)
    energy_params, net_params, sources = carry_params(
        prev_state, init_energy(energy_rng, batch), losses.init_nets(nets_rng, batch),
        architecture, carry_energy)
    logging.info("infnet init_from: %s", ", ".join(f"{k} <- {v}" for k, v in
                                                   sorted(sources.items())))
    return make_state(energy_params, net_params)

  def update(state, batch, rng):
    inner_rng, energy_rng = jax.random.split(rng)
    net_names = [k for k in ("test_net", "cost_net") if k in state]
    # The energy is a fixed critic for all k I steps: encode x once.
    energy_params = jax.lax.stop_gradient(state["energy"].params)
    energy_of = energy_evaluator(model, energy_params, batch["x"])

    def inference_step(groups, step_rng):
      params = {k: g.params for k, g in groups.items()}
      metrics, grads = base.metrics_and_grads(losses.inference_loss, params, energy_of,
                                              batch, step_rng)
      groups = {k: base.apply_gradients(groups[k], grads[k], optimizers[k]) for k in groups}
      return groups, metrics

    # Unrolled: XLA:CPU ran the loop around the taggers' BiLSTMs 7.5x slower than the
    # unrolled body (Twitter POS, k = 5: 2.5 s vs 0.33 s per update); k is small.
    groups, inner_metrics = jax.lax.scan(
        inference_step, {k: state[k] for k in net_names},
        jax.random.split(inner_rng, num_inner_steps), unroll=True)

    net_params = {k: g.params for k, g in groups.items()}
    test_logits, cost_logits = losses.net_logits(net_params, batch["x"], batch["y"])
    y_test = losses.structure.link(test_logits)
    y_cost = None if cost_logits is None else losses.structure.link(cost_logits)
    energy_group, metrics = base.minimize_step(losses.energy_loss, optimizers["energy"],
                                               state["energy"], batch, y_cost, y_test,
                                               energy_rng)
    metrics.update({f"infnet_{k}": v[-1] for k, v in inner_metrics.items()})
    return dict(groups, energy=energy_group), metrics

  def predict(state, x):
    logits = net.apply({"params": state["test_net"].params}, x, train=False)
    return losses.structure.link(logits)

  return base.Objective(init, update, predict, init_from)

"""`implicit`: an energy trained by the implicit gradient of a bilevel problem
(Shankar & Piratla, "Implicit Training of Energy Model for Structured Prediction").

An inference network A_θ (`net(x, train=...) -> logits [B, L]`, prediction σ(A_θ(x)))
learns from an energy E_φ (any `Energy`, low = good, reached only through its `encode`
and `energy` fields) used as a loss; the energy is
trained so that the network trained on it does well on a primary loss (the same with a
tagger and a `SequenceEnergy`, the implicit paper's POS / NER setting: σ becomes the
per-token softmax, BCE the token CE, Bernoulli negatives categorical ones per token, and
every Δ and score counts real tokens only; `outputs.for_domain` of the energy's domain
picks these pieces):

    inner  θ*(φ) = argmin_θ L_aux(θ, φ),
           L_aux = BCE(y, σ(A_θ(x))) + λ · mean E_φ(x, σ(A_θ(x)))   (+ net_l2 ½‖W_θ‖²)  (Eq. 6)
    outer  min_φ L_prim(θ*(φ), φ)                         (+ l2 ½‖W_φ‖², explicit only)

and the outer gradient is Eq. 4 (`diff.implicit_gradient`): the explicit `∂_φ L_prim`
plus the implicit term `−(∂²L_aux/∂φ∂θ) H⁻¹ ∂_θ L_prim`, `H⁻¹` by the truncated von
Neumann series (the paper) or CG (`inverse_hvp`). Every Hessian product is exact
(`jax.jvp` of `jax.grad`), where the paper used finite differences — a documented
deviation.

The primary loss is a value (`primary=`): a small frozen dataclass carrying its own
options whose `loss(ImplicitPrimaryInputs)` computes L_prim of a batch from the net's
logits, the gold output, the energy of any samples and the task score; a user's own value
with that method plugs in the same way (`ImplicitPrimary`). The family's other options
are one value, `ImplicitOptions`. Configs write one flat block:
`implicit_options_from_config` maps it onto both values (`get_primary_loss` maps the
names `'ssvm'`, `'cd'`, `'dvn'`).

The library's primary losses, per example, ȳ_A = σ(A_θ(x)):

- `ImplicitSSVM` (`'ssvm'`): `[Δ(ȳ_A, y) − E(x, ȳ_A) + E(x, y)]_+`, Δ = `margin_cost` (L1 by default, as
  InfNet; `'score'` is 1 − soft-F1). The network's output is the margin's ŷ, the
  paper's "ȳ replaced by the prediction of the inference net".
- `ImplicitCD` (`'cd'`): the contrastive divergence with a cost,
  `L_CD = −log [exp(−E(x, y)) / Σ_{k=0..K} exp(−E(x, ȳ_k) + s(ȳ_k, y))]`, ȳ_0 = y,
  s = 1 − `score` (s(y, y) = 0). The paper prints `log[...]`, i.e. the sign flipped:
  minimizing that would *raise* the gold's energy. ȳ_1..K are K = `num_samples`
  Bernoulli samples of σ(A_θ(x)) that keep a gradient path to θ (`negatives`):
  `'straight_through'` (hard samples forward, ∂ȳ/∂p = I backward) or `'relaxed'`
  (binary-concrete samples at `temperature`); `include_net_output` adds σ(A_θ(x))
  itself as one more negative. Hard samples without a path would make ∂_θ L_prim = 0
  and the implicit term vanish (the tests check it does not).
- `ImplicitDVN` (`'dvn'`): the DVN regression (`dvn.value_regression_loss`) of σ(−E(x, ȳ)) to the
  soft-F1 s(ȳ, y), on ȳ ∈ {σ(A_θ(x)), y}: the network's output (the path to θ) and the
  gold output that anchors the top of the scale (DVN's sources `'inference'` and
  `'gold'`, with the network replacing GBI).

One `update` (Algorithm 1, one `jax.jit`): T_inner = `inner_steps` steps of
`inner_optimizer` on L_aux from the current θ (warm start: θ_{t+1} is where the inner
loop ended, and the inner optimizer's state persists across updates), then one step of
`optimizer` on φ with the implicit gradient at that θ. A step whose inverse-HVP solve failed
(relative residual above `max_residual`: the truncated Neumann series diverges where
α λ_max(H) > 2, and the energy's curvature can spike during training) steps on the
explicit term alone and reports `implicit_used` = 0. `gradient='explicit'` drops the
implicit term always: the energy then follows `∂_φ L_prim` only, which is the alternating
(InfNet-style) training the paper argues is biased — the ablation of the method.

Choices, with reasons:

- The batch is the update's batch for the inner steps, L_prim and both Hessians (the
  paper's Algorithm 1 samples one (x, y) per outer iteration).
- Dropout: the inner steps run the net in training mode with a fresh mask each; the
  Hessian and cross-Hessian are those of L_aux under one further fixed mask (a sample of
  the stochastic inner objective, as the batch is). L_prim reads the net in eval mode
  (the prediction it is about). The energy is deterministic in both L_aux and L_prim:
  the bilevel problem is about one function E_φ. (With dropout in L_prim only, as the
  energy step of `infnet` has it, the energy was trained as a dropout-perturbed function
  while the network minimized its deterministic version, and on bibtex the network found
  outputs of very low deterministic energy that the dropout energy ranked as bad: the
  inner BCE rose from 2.2 to 56 in 600 steps while L_prim fell to 0.19.)
- The energy's L2 is part of L_prim's explicit term; the net's L2 is part of L_aux (so
  it also regularizes H).
- L_prim is differentiated as the function it is: CD's cost s(ȳ_k, y) and DVN's
  target s(ȳ, y) move with θ through ȳ. (DVN itself regresses at fixed targets, which
  changes nothing for ∂_φ, since s does not depend on φ; but a `stop_gradient` on the
  target would make ∂_θ L_prim, hence the implicit term, the derivative of some other
  function: the finite-difference test of the bilevel value catches it.)

Metrics of `update`: `loss` (L_prim), `grad_norm` (of the total outer gradient; the
trainer's non-finite guard reads both), `explicit_norm`, `implicit_norm`,
`prim_grad_theta_norm` (‖∂_θ L_prim‖: zero means no implicit term), `ihvp_residual`
(relative residual of the inverse-HVP solve: how well K terms solved it),
`implicit_used` (1 if the implicit term entered the step), and the last
inner step's `aux_loss`, `aux_bce`, `aux_energy`, `aux_grad_norm`.

Staged training (`init_from`): the energy continues a previous stage by its
`Energy.continue_from`: a previous energy state (`prev["energy"]`), or for the library's
energies a `local_bce` MLP (a `local_token_ce` tagger, or a CRF's tagger and transitions,
on sequences) as its `local_net`; the inference net continues `prev["inference_net"]`,
else the first of `prev["test_net"]` (infnet), `prev["net"]` (local_bce, local_token_ce)
or, when the energy's parameters have a `local_net` group shaped like the net (a SPEN's
local classifier), that group, else starts fresh. The paper starts both at random;
pretraining is the configs' choice.
"""

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple, Optional, Protocol

from absl import logging
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets import diff
from energynets.diff.implicit import MAX_UNROLL
from energynets.energies import protocol
from energynets.objectives import base
from energynets.objectives import dvn
from energynets.objectives import outputs
from energynets.objectives import scores as scores_lib
from energynets.objectives import seal
from energynets.objectives import ssvm

NEGATIVES = ("straight_through", "relaxed")
GRADIENTS = ("implicit", "explicit")


def contrastive_divergence_loss(energies: jax.Array, costs: jax.Array) -> jax.Array:
  """`[B, 1+K] x2 -> [B]`: `−log [exp(−E_0) / Σ_k exp(−E_k + s_k)]`.

  Column 0 is the gold output (its cost s_0 = s(y, y) is 0 for a proper cost, so its
  term in the normalizer is the numerator's).
  """
  logits = -energies + costs
  return jax.nn.logsumexp(logits, axis=-1) + energies[:, 0]


def sampled_negatives(structure: outputs.OutputStructure, rng: jax.Array,
                      logits: jax.Array, num_samples: int, kind: str,
                      temperature: float = 0.5, y: Optional[jax.Array] = None) -> jax.Array:
  """`[B, ...] -> [B, K, ...]`: samples of the net's output distribution with a gradient
  path; on sequences zero at `y`'s padded tokens, in value and gradient.

  `'straight_through'`: hard samples (0/1 labels, one-hot tokens) whose gradient is that
  of the link's probabilities; `'relaxed'`: binary concrete
  `σ((logits + log u − log(1 − u)) / τ)` / Gumbel-softmax `softmax((logits + g) / τ)`.
  """
  if kind == "straight_through":
    samples = outputs.straight_through_samples(structure, rng, logits, num_samples, y)
  elif kind == "relaxed":
    samples = structure.relaxed_sample(rng, logits, num_samples, temperature, y)
  else:
    raise ValueError(f"unknown negatives {kind!r}; expected one of {NEGATIVES}")
  if y is None:
    return samples
  # The straight-through term carries the softmax's gradient to padded tokens too,
  # where the value is a constant 0: `mask_padding` (a `where`; the identity on
  # multi-label outputs) cuts it.
  return structure.mask_padding(samples, y[:, None])


def bernoulli_negatives(rng: jax.Array, logits: jax.Array, num_samples: int, kind: str,
                        temperature: float = 0.5) -> jax.Array:
  """`sampled_negatives` of multi-label outputs: `Bernoulli(σ(logits))` per label."""
  return sampled_negatives(outputs.MULTILABEL, rng, logits, num_samples, kind, temperature)


def _check(value: str, choices, what: str) -> None:
  if value not in choices:
    raise ValueError(f"unknown {what} {value!r}; expected one of {tuple(choices)}")


# ---------------------------------------------------------------------------------------
# Primary losses: values that carry their own options and compute L_prim for a batch.


class ImplicitPrimaryInputs(NamedTuple):
  """What a primary loss computes L_prim from, for one batch.

  Attributes:
    logits: the inference net's logits A_θ(x) `[B, ...]` (eval mode), with their
      gradient path to θ: the implicit term needs ∂_θ L_prim ≠ 0.
    y_net: the net's outputs `link(logits)`, with the same path.
    y: the gold outputs `[B, ...]`.
    energies: `ys [B, S, ...] -> [B, S]`, the energy E_φ of every sample (x encoded
      once), differentiable in φ and in ys.
    score: the task score `(ȳ, y) -> [B]` over real positions (`ImplicitOptions.score`;
      sequences: padding excluded).
    structure: the `outputs.OutputStructure` of the energy's domain (link, samples,
      `mask_padding`).
    rng: the key of the loss's samples.
  """
  logits: jax.Array
  y_net: jax.Array
  y: jax.Array
  energies: Callable[[jax.Array], jax.Array]
  score: scores_lib.Score
  structure: outputs.OutputStructure
  rng: jax.Array


class ImplicitPrimary(Protocol):
  """A primary loss L_prim of `implicit_objective`: a value that carries its options.

  `loss(inputs)` returns `(scalar loss, metrics)` for one batch, averaged over examples,
  differentiated in both θ (through `inputs.logits` / `inputs.y_net`) and φ (through
  `inputs.energies`) as the function it is. The library's are `ImplicitSSVM`,
  `ImplicitCD` and `ImplicitDVN` (`get_primary_loss` maps their names, for configs); any
  value with this method plugs into `implicit_objective(..., primary=...)`.
  """

  def loss(self, inputs: ImplicitPrimaryInputs) -> tuple[jax.Array, base.Metrics]:
    """L_prim of one batch (without the energy's L2) and its metrics."""


@dataclasses.dataclass(frozen=True)
class ImplicitSSVM:
  """The SSVM primary loss: `mean [Δ(ȳ_A, y) − E(x, ȳ_A) + E(x, y)]_+`, ȳ_A = σ(A_θ(x)).

  The network's output is the margin's ŷ (the paper's "ȳ replaced by the prediction of
  the inference net").

  Attributes:
    margin_cost: Δ, one of `seal.MARGIN_COSTS`: an `ssvm.SURROGATES` name (default
      `'l1'`, as InfNet) or `'score'`, 1 − the task score.
  """
  margin_cost: str = "l1"

  def __post_init__(self):
    _check(self.margin_cost, seal.MARGIN_COSTS, "margin cost")

  def loss(self, inputs: ImplicitPrimaryInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged hinge and its active fraction."""
    y_net, y = inputs.y_net, inputs.y
    if self.margin_cost == "score":
      delta = 1.0 - inputs.score(y_net, y)
    else:
      delta = ssvm.task_loss(inputs.structure.mask_padding(y_net, y), y, self.margin_cost)
    energies = inputs.energies(jnp.stack([y_net, y], axis=1))
    hinge = delta - energies[:, 0] + energies[:, 1]
    return jnp.mean(jax.nn.relu(hinge)), {"active": jnp.mean(hinge > 0)}


@dataclasses.dataclass(frozen=True)
class ImplicitCD:
  """The contrastive divergence with a cost (the paper's L_CD, sign corrected).

  `−log [exp(−E(x, y)) / Σ_{k=0..K} exp(−E(x, ȳ_k) + s(ȳ_k, y))]`, ȳ_0 = y, s = 1 −
  the task score; ȳ_1..K are samples of the net's output distribution that keep a
  gradient path to θ (hard samples without one would make the implicit term vanish).

  Attributes:
    num_samples: K, the sampled negatives.
    negatives: how the samples keep a gradient path (`NEGATIVES`): `'straight_through'`
      (hard samples forward, the probabilities' gradient backward) or `'relaxed'`
      (binary-concrete / Gumbel-softmax samples at `temperature`).
    temperature: the relaxed samples' temperature.
    include_net_output: add σ(A_θ(x)) itself as one more negative.
  """
  num_samples: int = 10
  negatives: str = "straight_through"
  temperature: float = 0.5
  include_net_output: bool = False

  def __post_init__(self):
    _check(self.negatives, NEGATIVES, "negatives")
    if not isinstance(self.num_samples, int) or self.num_samples < 1:
      raise ValueError(f"the CD primary loss needs num_samples >= 1; got {self.num_samples}")
    if not self.temperature > 0:
      raise ValueError(f"temperature must be > 0; got {self.temperature}")

  def loss(self, inputs: ImplicitPrimaryInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged CD loss (no further metrics)."""
    y, score = inputs.y, inputs.score
    samples = [y[:, None],
               sampled_negatives(inputs.structure, inputs.rng, inputs.logits,
                                 self.num_samples, self.negatives, self.temperature, y)]
    if self.include_net_output:
      samples.append(inputs.y_net[:, None])
    ys = jnp.concatenate(samples, axis=1)
    costs = jax.vmap(lambda s: 1.0 - score(s, y), in_axes=1, out_axes=1)(ys)
    return jnp.mean(contrastive_divergence_loss(inputs.energies(ys), costs)), {}


@dataclasses.dataclass(frozen=True)
class ImplicitDVN:
  """The DVN primary loss: the regression of σ(−E(x, ȳ)) to the task score s(ȳ, y).

  `dvn.value_regression_loss` summed over ȳ ∈ {σ(A_θ(x)), y}: the network's output (the
  path to θ) and the gold output, which anchors the top of the scale (DVN's sources
  `'inference'` and `'gold'`, with the network replacing GBI). The target moves with θ:
  a `stop_gradient` on it would make ∂_θ L_prim the derivative of another function.
  """

  def loss(self, inputs: ImplicitPrimaryInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged regression loss (no further metrics)."""
    y, score = inputs.y, inputs.score
    ys = jnp.stack([inputs.y_net, y], axis=1)
    targets = jax.vmap(lambda s: score(s, y), in_axes=1, out_axes=1)(ys)
    per_example = jnp.sum(dvn.value_regression_loss(inputs.energies(ys), targets), axis=1)
    return jnp.mean(per_example), {}


# Names of the library's primary losses, for configs (`get_primary_loss`).
PRIMARIES: dict[str, type] = {"ssvm": ImplicitSSVM, "cd": ImplicitCD, "dvn": ImplicitDVN}
PRIMARY_LOSSES = tuple(PRIMARIES)


def get_primary_loss(name: str, **options: Any) -> ImplicitPrimary:
  """The library's primary loss called `name`, built with `options`.

  Args:
    name: one of `PRIMARY_LOSSES` (`'ssvm'`, `'cd'`, `'dvn'`).
    **options: fields of that loss (e.g. `num_samples=4` for `'cd'`).

  Returns:
    The primary loss value, e.g. `ImplicitCD(num_samples=4)`.

  Raises:
    ValueError: one line naming an unknown `name` and the known ones, or options that
      `name` does not take.
  """
  if name not in PRIMARIES:
    raise ValueError(f"unknown primary loss {name!r}; known: {PRIMARY_LOSSES}")
  cls = PRIMARIES[name]
  foreign, fields = base.options_not_taken(cls, options)
  if foreign:
    raise ValueError(f"options {foreign} do not apply to the primary loss {name!r} "
                     f"(its options: {fields})")
  return cls(**options)


# ---------------------------------------------------------------------------------------
# The family's options.


@dataclasses.dataclass(frozen=True)
class ImplicitOptions:
  """The implicit objective's options other than the primary loss.

  Attributes:
    energy_weight: λ of L_aux.
    inner_steps: T_inner ≥ 1, inner steps on θ per update.
    inverse_hvp: the inverse-HVP solver of the implicit term: `diff.Neumann(...)` (the
      default `Neumann()`: K = 10, α = 0.01), `diff.ConjugateGradient(...)`, any object
      with `solve(hvp_fn, v)`, or an `InverseHVP` record (`diff.get_solver`).
    gradient: `'implicit'` (Eq. 4) or `'explicit'` (∂_φ L_prim only, the ablation).
    score: the task score (a `scores.SCORES` name or a function `(ȳ, y) -> [B]`): CD's
      cost is 1 − score, DVN's target, SSVM's Δ under `margin_cost='score'`.
    l2: ½‖W‖² weight on the energy (in L_prim).
    net_l2: ½‖W‖² weight on the net (in L_aux).
    max_residual: a step whose inverse-HVP relative residual exceeds this drops the
      implicit term and steps on the explicit one (a residual above 1 is a worse solve
      of `H w = ∂_θ L_prim` than w = 0: a diverging Neumann series, αλ_max(H) > 2).
  """
  energy_weight: float = 1.0
  inner_steps: int = 5
  inverse_hvp: diff.implicit.SolverLike = diff.Neumann()
  gradient: str = "implicit"
  score: str | scores_lib.Score = "soft_f1"
  l2: float = 0.0
  net_l2: float = 0.0
  max_residual: float = float("inf")

  def __post_init__(self):
    _check(self.gradient, GRADIENTS, "gradient")
    diff.get_solver(self.inverse_hvp)  # ValueError / TypeError on a bad solver
    if self.inner_steps < 1:
      raise ValueError(f"inner_steps must be >= 1; got {self.inner_steps}")
    if not self.max_residual > 0:
      raise ValueError(f"max_residual must be > 0; got {self.max_residual}")
    if isinstance(self.score, str):
      scores_lib.get_score(self.score)

  def score_fn(self) -> scores_lib.Score:
    """The task score as a function."""
    return scores_lib.get_score(self.score) if isinstance(self.score, str) else self.score


_OPTION_FIELDS = base.field_names(ImplicitOptions)


def implicit_options_from_config(config: Mapping[str, Any], **values: Any
                                 ) -> tuple[ImplicitOptions, ImplicitPrimary]:
  """The implicit objective's options and primary loss from a flat block of options.

  `primary` names the primary loss (`get_primary_loss`, default `'cd'`); the keys that
  are `ImplicitOptions` fields go to the options, the chosen loss's fields to it. A key
  of another library primary loss is ignored: a config block carries every loss's
  options (CD's `num_samples` stays in it under `primary='ssvm'`).

  Args:
    config: a config's `implicit` block.
    **values: Python values (e.g. `inverse_hvp=diff.InverseHVP(...)`, `l2`, or a whole
      flat set of options given as keywords); they override `config`.

  Returns:
    `(ImplicitOptions, primary loss)`.

  Raises:
    ValueError: one line naming an unknown key and the known ones (or a bad value).
  """
  merged = {**config, **values}
  primary_fields = tuple(dict.fromkeys(
      f for cls in PRIMARIES.values() for f in base.field_names(cls)))
  known = ("primary",) + _OPTION_FIELDS + primary_fields
  unknown = sorted(k for k in merged if k not in known)
  if unknown:
    raise ValueError(f"unknown implicit options {unknown}; known: {known}")
  name = merged.get("primary", "cd")
  taken = base.field_names(PRIMARIES[name]) if name in PRIMARIES else ()
  primary = get_primary_loss(name, **{k: v for k, v in merged.items() if k in taken})
  options = ImplicitOptions(**{k: v for k, v in merged.items() if k in _OPTION_FIELDS})
  return options, primary


def _resolve(options: Optional[ImplicitOptions], primary: ImplicitPrimary | str | None,
             flat: dict) -> tuple[ImplicitOptions, ImplicitPrimary]:
  """The options and primary loss of `implicit_objective` / `ImplicitLosses`, from values
  or from flat keywords (`implicit_options_from_config`'s `values`); a `primary` given by
  name is one of those keywords."""
  if isinstance(primary, str):
    flat, primary = dict(flat, primary=primary), None
  if flat:
    if options is not None:
      raise ValueError(f"give the implicit objective's options either as "
                       f"options=ImplicitOptions(...) or as keywords, not both; got options "
                       f"and {sorted(flat)}")
    for_primary = sorted(k for k in flat if k not in _OPTION_FIELDS)
    if primary is not None and for_primary:
      raise ValueError(f"primary loss options {for_primary} given beside a primary loss "
                       "value: set them on the value")
    options, named = implicit_options_from_config({}, **flat)
    primary = named if primary is None else primary
  return (ImplicitOptions() if options is None else options,
          ImplicitCD() if primary is None else primary)


class ImplicitLosses:
  """L_aux and L_prim as pure functions of (θ, φ, batch, rng), and the net's logits."""

  def __init__(self, net: nn.Module, energy: Any, *,
               options: Optional[ImplicitOptions] = None,
               primary: ImplicitPrimary | str | None = None, **flat_options: Any):
    options, primary = _resolve(options, primary, flat_options)
    self.net, self.energy, self.primary, self.options = net, energy, primary, options
    self.energy_weight = options.energy_weight
    self.score = options.score_fn()
    self.l2, self.net_l2 = options.l2, options.net_l2
    self.model = protocol.as_energy(energy)
    self.energy_fn = self.model.energy
    self.structure = outputs.for_domain(self.model.domain)

  def real_score(self, y_soft: jax.Array, y: jax.Array) -> jax.Array:
    """The task score over real positions (sequences: padding excluded)."""
    return self.score(self.structure.mask_padding(y_soft, y), y)

  def logits(self, theta, x: jax.Array, rng: Optional[jax.Array] = None) -> jax.Array:
    if rng is None:
      return self.net.apply({"params": theta}, x, train=False)
    return self.net.apply({"params": theta}, x, train=True, rngs={"dropout": rng})

  def aux(self, theta, phi, batch, rng, encoding=None):
    """`(L_aux, metrics)`; `encoding` (of φ, precomputed) saves re-encoding x."""
    if encoding is None:
      encoding = self.model.encode(phi, batch["x"])
    logits = self.logits(theta, batch["x"], rng)
    bce = self.structure.local_loss(logits, batch["y"])  # BCE, or token CE on sequences
    energy = jnp.mean(self.energy_fn(phi, encoding, self.structure.link(logits)))
    loss = bce + self.energy_weight * energy + self.net_l2 * base.l2_penalty(theta)
    return loss, {"bce": bce, "energy": energy}

  def prim(self, theta, phi, batch, rng):
    """`(L_prim, metrics)`; `rng` draws the primary loss's samples (CD's negatives)."""
    x, y = batch["x"], batch["y"]
    logits = self.logits(theta, x)
    y_net = self.structure.link(logits)
    encoding = self.model.encode(phi, x)
    energy_of = lambda ys: seal.sample_energies(self.energy_fn, phi, encoding, ys)
    primary, metrics = self.primary.loss(ImplicitPrimaryInputs(
        logits=logits, y_net=y_net, y=y, energies=energy_of, score=self.real_score,
        structure=self.structure, rng=rng))
    metrics = dict(metrics, primary=primary, gold_energy=jnp.mean(energy_of(y[:, None])))
    return primary + self.l2 * base.l2_penalty(phi), metrics


def implicit_objective(net: nn.Module, energy: Any,
                       optimizer: optax.GradientTransformation,
                       inner_optimizer: optax.GradientTransformation, *,
                       options: Optional[ImplicitOptions] = None,
                       primary: ImplicitPrimary | str | None = None,
                       **flat_options: Any) -> base.Objective:
  """The implicit bilevel objective; state `{"inference_net", "energy"}` (`ParamGroup`s).

  Args:
    net: the inference network A_θ, `net(x, train=...) -> logits [B, L]` (a tagger's
      `[B, T, L]` on sequences).
    energy: the energy E_φ: any `Energy` (`energy_from_function`, `energy_from_module`)
      or a library energy (`protocol.as_energy`); on the per-token Simplex (a
      `SequenceEnergy`, for taggers) outputs are per-token softmax, token CE,
      categorical negatives (`outputs.for_domain`).
    optimizer: the outer optimizer of φ.
    inner_optimizer: the inner optimizer of θ (its state persists across updates).
    options: the family's options, `ImplicitOptions` (default: λ = 1, T_inner = 5,
      `diff.Neumann()`, the implicit gradient, soft-F1 score).
    primary: L_prim, an `ImplicitPrimary` value: `ImplicitSSVM(...)`,
      `ImplicitCD(...)` (the default, K = 10 straight-through negatives),
      `ImplicitDVN()` or your own; or a name of `PRIMARY_LOSSES`, whose options then
      come as flat keywords.
    **flat_options: instead of the two values, the flat form configs use
      (`primary='cd', num_samples=4, inner_steps=3, ...`;
      `implicit_options_from_config`).

  Returns:
    An `Objective`; `update`'s metrics are listed in the module docstring.
  """
  options, primary = _resolve(options, primary, flat_options)
  inverse_hvp = diff.get_solver(options.inverse_hvp)
  inner_steps, gradient = options.inner_steps, options.gradient
  max_residual = options.max_residual
  losses = ImplicitLosses(net, energy, options=options, primary=primary)

  model = losses.model

  def fresh(rng, batch):
    net_rng, energy_rng = jax.random.split(rng)
    x = batch["x"]
    return (flax.core.unfreeze(net.init({"params": net_rng}, x)["params"]),
            # Checked against the batch: a wrong-shaped energy fails here, in one line.
            protocol.init_checked(model, energy_rng, x, batch["y"]))

  def make_state(theta, phi):
    return {"inference_net": base.init_group(theta, inner_optimizer),
            "energy": base.init_group(phi, optimizer)}

  def init(rng, batch):
    return make_state(*fresh(rng, batch))

  def init_from(prev_state, rng, batch):
    theta, _ = fresh(rng, batch)
    phi = model.continue_from(prev_state, rng, batch["x"], batch["y"])
    prev = {k: getattr(v, "params", v) for k, v in prev_state.items()}
    # The carried local_net, where the energy's parameter tree has one (a SPEN's): the
    # previous energy's, a local_bce MLP or token-CE tagger, or a CRF's tagger (whose
    # {"tagger", "crf"} params match no inference net themselves).
    local = phi.get("local_net") if isinstance(phi, Mapping) else None
    match = base.first_match([("inference_net", prev.get("inference_net")),
                              ("test_net", prev.get("test_net")), ("net", prev.get("net")),
                              ("energy.local_net", local)], theta)
    source = match[0] if match else "fresh"
    theta = match[1] if match else theta
    logging.info("implicit init_from: inference_net <- %s, energy <- %s", source,
                 "energy" if "energy" in prev else "net -> local_net")
    return make_state(theta, phi)

  def update(state, batch, rng):
    inner_rng, hessian_rng, prim_rng = jax.random.split(rng, 3)
    phi = state["energy"].params
    # φ is fixed during the inner loop: encode x once.
    encoding = jax.lax.stop_gradient(model.encode(phi, batch["x"]))

    def inner_step(group, step_rng):
      return base.minimize_step(losses.aux, inner_optimizer, group, phi, batch, step_rng,
                                encoding)

    # Unrolled, as are the Neumann terms: a loop around the BiLSTM taggers ran several
    # times slower on XLA:CPU (Twitter POS update: 14 s scanned, 1.8 s unrolled). Up to
    # MAX_UNROLL steps per loop iteration: the configs' T_inner (≤ 10) unrolls
    # fully, while a long inner loop (the tests' 1500 steps) compiles in seconds instead
    # of minutes.
    theta_group, inner_metrics = jax.lax.scan(inner_step, state["inference_net"],
                                              jax.random.split(inner_rng, inner_steps),
                                              unroll=min(inner_steps, MAX_UNROLL))
    theta = theta_group.params
    aux = lambda t, p: losses.aux(t, p, batch, hessian_rng)[0]
    prim = lambda t, p: losses.prim(t, p, batch, prim_rng)
    norm = optax.tree.norm
    if gradient == "implicit":
      g = diff.implicit_gradient(aux, prim, theta, phi, inverse_hvp, has_aux=True)
      value, prim_metrics = g.value, g.aux
      used = g.residual <= max_residual
      grads = jax.tree.map(lambda e, t: jnp.where(used, t, e), g.explicit, g.total)
      extra = dict(explicit_norm=norm(g.explicit), implicit_norm=norm(g.implicit),
                   prim_grad_theta_norm=norm(g.prim_grad_theta), ihvp_residual=g.residual,
                   implicit_used=used.astype(jnp.float32))
    else:
      (value, prim_metrics), grads = jax.value_and_grad(prim, argnums=1, has_aux=True)(
          theta, phi)
      extra = dict(explicit_norm=norm(grads))
    energy_group = base.apply_gradients(state["energy"], grads, optimizer)
    metrics = dict(prim_metrics, loss=value, grad_norm=norm(grads), **extra)
    metrics.update({f"aux_{k}": v[-1] for k, v in inner_metrics.items()
                    if k in ("loss", "bce", "energy", "grad_norm")})
    return {"inference_net": theta_group, "energy": energy_group}, metrics

  def predict(state, x):
    return losses.structure.link(losses.logits(state["inference_net"].params, x))

  return base.Objective(init, update, predict, init_from)

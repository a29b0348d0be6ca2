"""`seal`: Structured Energy As Loss (Lee et al. 2022): an energy network trains a task-net.

Two networks: a feed-forward *task-net* `F_Φ(x) -> logits [B, L]` (any flax module
called as `net(x, train=...)`, e.g. `nets.MLP`), which alone makes the prediction
`σ(F_Φ(x))`, and a *loss-net* `E_Θ(x, ȳ) -> [B]` (any energy: e.g. a `SPENEnergy`, with
its own feature network, local term and label-measurement term; low energy = good
output), used only as a trainable loss for the task-net.

Task-net loss (Eq. 1), averaged over the batch:

    L_F(Φ; Θ) = λ1 · E_Θ(x, σ(F_Φ(x))) + λ2 · Σ_i BCE(y_i, σ(F_Φ(x))_i)

(`energy_weight` λ1, `bce_weight` λ2). The loss-net is a fixed function inside L_F: its
parameters are `stop_gradient`-ed and by default it runs deterministically (no dropout:
a loss should not be noisy), as does the task-net that draws the loss-net's samples.
`train_mode=True` puts both in training mode there, as SEAL's public trainer does (it
calls `model.train()` for both networks throughout): the samples and P_N then come from
a dropped-out task-net, and the loss-net's dropout is on inside L_F.
`energy_term='neg_value'` replaces E by `−σ(−E)`, the predicted score of a regression
loss-net (what SEAL's public code does for its DVN loss-nets); the default `'energy'` is
the paper's Eq. 1.

The family's options are one value, `SealOptions` (phase, λ1, λ2, `energy_term`, score,
`train_mode`, prediction, `task_net_init`, the schedule `loss_net_steps` / `rounds`);
the loss-net objective L_E is another (`loss_net_objective=`), a small frozen dataclass
carrying its own options whose `loss(LossNetInputs)` computes L_E for a batch. A user's
own value with that method plugs in the same way. Configs write one flat block of
options: `seal_options_from_config` maps it onto both values (`get_loss_net_objective`
maps the names `'margin'`, `'regression'`, `'regression_s'`, `'nce'`), and
`seal_config_defaults` is that block's defaults, read from the dataclasses.

The library's loss-net objectives, with ŷ or the samples always `stop_gradient`-ed (the
loss-net loss is differentiated at fixed outputs):

- `SealMargin` (`'margin'`, Eq. 6): `[Δ(ŷ, y) − E(x, ŷ) + E(x, y)]_+`. SEAL-dynamic
  uses the special case the paper identifies with InfNet: ŷ = the task-net output
  σ(F_{Φ_{t−1}}(x)); the task-net loss keeps no margin term. SEAL-static pretrains the
  loss-net as SPEN does: ŷ from loss-augmented GBI, `gbi_scan` on `E − Δ` from uniform for
  `loss_aug_gbi.num_steps`. Δ (`margin_cost`) is one of `ssvm.SURROGATES` (default
  `'l1'`, the InfNet/DESIGN choice; the paper does not state it) or `'score'`,
  `1 − s(ŷ, y)`.
- `SealRegression` (`'regression'`, Eq. 7, DVN): the cross-entropy between the soft-F1
  score s(ȳ, y) and σ(−E(x, ȳ)) (`dvn.value_regression_loss`; the printed `log(1 + σ)`
  is a typo for `log(1 − σ)`). SEAL-dynamic uses ȳ = the task-net output (one sample per
  example); SEAL-static uses DVN's samples (`dvn.draw_samples`: the GBI prediction, an adversarial
  sample and the gold output by default, `dvn_samples` / `dvn_sample_weights`), GBI
  by `loss_aug_gbi`.
- `SealRegressionS` (`'regression_s'`): the regression loss summed over the sample set
  S = {σ(F(x))} ∪ {σ(F(x) + σ_n ε_k)}_{k=1..K}, ε_k ~ N(0, I): the task-net output and
  K = `num_samples` Gaussian perturbations of its logits, std σ_n = `noise_std` (the
  paper perturbs "the task-net output" without saying where; logit space keeps the
  samples in [0,1]^L, and keeping the unperturbed output follows SEAL's public code).
- Extra samples (`extra_samples`, weights `extra_sample_weights`; our addition, for
  `'regression'` and `'regression_s'` outside static `'regression'`): DVN's GBI-free
  sources (`dvn.GBI_FREE_SOURCES`: the gold output, a uniform random output, another
  example's gold) added to the regression's sample set. Trained only on the task-net's
  own near-gold outputs, a regression loss-net can learn how confident a mask is rather
  than whether it fits the input; another example's gold is as confident as the gold
  and is scored low unless it happens to fit.
- `SealNCE` (`'nce'`, Eq. 8-9, Ma & Collins' ranking NCE):
  `−log [exp(s(y⁰)) / Σ_{k=0..K} exp(s(yᵏ))]`, `s(y) = −E(x, y) − log P_N(y)`, with y⁰
  the gold output *included in the denominator* (the printed Eq. 8 sums from k = 1, which
  is not a ranking loss: it would reward pushing the gold's score up without bound;
  SEAL's public code is the cross-entropy over [gold; samples]). The K = `num_samples`
  noise samples are Bernoulli draws of `P_N(y) = Π_i σ(G(x))_i^{y_i} (1−σ(G(x))_i)^{1−y_i}`
  where G is the task-net of the previous step (dynamic) or the frozen pretrained
  feed-forward net (static); log P_N is exact (binary y).

Static and dynamic (`phase`), one state structure `{"task_net": ParamGroup,
"loss_net": ParamGroup}` for all three; a group that a phase does not train has an
`optax.EmptyState` optimizer state and never moves:

- `'dynamic'` (Eq. 4-5): each `update` first takes one loss-net step on L_E with
  samples from the current task-net Φ_{t−1}, then one task-net step on L_F with the
  *updated* loss-net Θ_t, on the same batch (`loss_net_steps` and `rounds` repeat
  these as SEAL's public trainer does: t rounds of s loss-net steps + 1 task-net step).
- `'loss_net'` (SEAL-static, stage 1): trains the loss-net alone; the task-net group is
  frozen and serves as the fixed noise network Ψ of static NCE (and of `regression_s`);
  margin and regression use GBI samples instead and ignore it.
- `'task_net'` (SEAL-static, stage 2): trains the task-net alone against the frozen
  loss-net. It must continue a state with a trained loss-net (`init_from`); `init`
  raises, since a random frozen loss-net is no loss at all.

Stages hand state over with `init_from`: a `local_bce` state `{"net": ...}` gives the
task-net (e.g. the pretrained noise net Ψ), a SPEN/DVN state `{"energy": ...}` gives the
loss-net (e.g. an SSVM-trained SPEN as the static margin loss-net), a SEAL state gives
both. `task_net_init='fresh'` re-initializes the task-net instead of carrying it (SEAL's
public static runs train the task-net from scratch against the pretrained loss-net).

Prediction (`predict`): `'task_net'` (SEAL: one forward pass, `σ(F(x))`), or `'gbi'`
(the ablation "energy network with GBI", e.g. the NCE-trained energy as a predictor):
`gbi_while` on the loss-net's energy with `predict_gbi`, from uniform 0.5 or from the
task-net's output (`predict_init`).

Metrics of `update`: each trained group's metrics with a `loss_net_` / `task_net_`
prefix (its `loss`, `grad_norm` and terms); `loss` is the sum of the trained groups'
losses and `grad_norm` the global norm of all their gradients (what the trainer logs and
guards against NaN). `task_net_score_grad_cosine` measures how much of the task score
the loss-net hands the task-net: the cosine between the loss-net term's gradient in ȳ
and the score's (`score`), per example at the task-net's output, averaged. NCE and the
margin are invariant to a per-input shift of E, so under them the energy level
(`task_net_energy`, hence `loss`) may drift freely; the shift does not depend on ȳ and
so never reaches the task-net's gradient.

`seal_losses` builds L_E and L_F as pure functions (what `seal_objective` steps on, and
what tests differentiate). `task_net_ranking` is the ablation "ranking loss without a
loss-net" (§5): the NCE ranking loss applied to the task-net itself,
`s(y) = Σ_i log P(y_i | x; Φ)`, noise from the task-net's own Bernoulli samples, plus
λ2·BCE.

Multi-label and sequences. The task-net is any `net(x, train=...) -> logits`; the
loss-net is any `Energy` (`energies.protocol`: a library energy such as `SPENEnergy` or
`SequenceEnergy`, or a user's own through `energy_from_module` / `energy_from_function`),
reached only through its fields: `encode` once per x, then `energy` of every sample,
checked against the first batch at `init`. What depends on the outputs comes from
`outputs.for_domain(energy.domain)`: on the Box (multi-label labels, segmentation masks)
the link is σ, the local loss BCE and noise per-label Bernoulli; on the per-token Simplex
(e.g. a `SequenceEnergy`) the task-net is a tagger, outputs are per-token
distributions (softmax link, token CE, one categorical draw per token, GBI over the
simplices), and every Δ, score and sample log-probability counts real tokens only
(`mask_padding`; the soft F1 of per-token distributions over real tokens is the soft
token accuracy). Static `'regression'` (DVN's GBI samples) is multi-label only.
"""

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple, Optional, Protocol, Sequence

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets import domains
from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from energynets.inference.gbi import GBIConfig
from energynets.objectives import base
from energynets.objectives import dvn
from energynets.objectives import outputs
from energynets.objectives import scores as scores_lib
from energynets.objectives import ssvm

PHASES = ("dynamic", "loss_net", "task_net")
PREDICTIONS = ("task_net", "gbi")
PREDICT_INITS = ("uniform", "task_net")
TASK_NET_INITS = ("carry", "fresh")
ENERGY_TERMS = ("energy", "neg_value")
MARGIN_COSTS = ssvm.SURROGATES + ("score",)
BOX = domains.Box()


# ---------------------------------------------------------------------------------------
# Building blocks (pure functions; public for tests and for the sequence/image variants).


def nce_ranking_loss(energies: jax.Array, log_noise: jax.Array) -> jax.Array:
  """`[B, 1+K] x2 -> [B]`: `−log softmax(s)_0` with `s = −E − log P_N`.

  Column 0 is the gold output y⁰ and is part of the normalizer `Σ_{k=0..K}`.
  """
  ranking_scores = -energies - log_noise
  return jax.nn.logsumexp(ranking_scores, axis=-1) - ranking_scores[:, 0]


bernoulli_log_prob = outputs.bernoulli_log_prob
bernoulli_samples = outputs.bernoulli_samples


def gaussian_perturbations(rng: jax.Array, logits: jax.Array, num_samples: int,
                           std: float, link=jax.nn.sigmoid) -> jax.Array:
  """`[B, ...] -> [B, 1+K, ...]`: `link(logits)` then K draws `link(logits + std·ε)`,
  ε ~ N(0, I) (σ per label; a per-token softmax for sequences)."""
  noise = jax.random.normal(rng, (logits.shape[0], num_samples) + logits.shape[1:],
                            logits.dtype)
  perturbed = link(logits[:, None] + std * noise)
  return jnp.concatenate([link(logits)[:, None], perturbed], axis=1)


def sample_energies(energy_fn: gbi_lib.EnergyFn, params, encoding,
                    ys: jax.Array) -> jax.Array:
  """`ys [B, S, L] -> [B, S]`: the energy of every sample, the encoding computed once."""
  return jax.vmap(lambda y: energy_fn(params, encoding, y), in_axes=1, out_axes=1)(ys)


def margin_delta(y_hat: jax.Array, y: jax.Array, cost: str, score: scores_lib.Score,
                 eps: float = ssvm.DEFAULT_SURROGATE_EPS) -> jax.Array:
  """`[B, L] x2 -> [B]`: Δ(ŷ, y), an `ssvm.task_loss` surrogate or `1 − score`."""
  if cost == "score":
    return 1.0 - score(y_hat, y)
  return ssvm.task_loss(y_hat, y, cost, eps)


def loss_augmented_output(energy_fn: gbi_lib.EnergyFn, params, encoding, y: jax.Array,
                          config: GBIConfig, cost_fn, domain=BOX) -> jax.Array:
  """`[B, L]`: ŷ ≈ argmin E − Δ(·, y) by `gbi_scan` over `domain` from its uniform
  point, with no gradient path."""
  def augmented(p, inputs, y_bar):
    enc, gold = inputs
    return energy_fn(p, enc, y_bar) - cost_fn(y_bar, gold)

  params, encoding, y = jax.lax.stop_gradient((params, encoding, y))
  y0 = domain.uniform_init(y.shape, y.dtype)
  y_hat, _ = gbi_lib.gbi_scan(augmented, params, (encoding, y), y0, domain, config)
  return jax.lax.stop_gradient(y_hat)


def _check_choice(value: str, choices: Sequence[str], what: str) -> None:
  if value not in choices:
    raise ValueError(f"unknown {what} {value!r}; expected one of {tuple(choices)}")


def _first_present(state, keys: Sequence[str]) -> Optional[str]:
  """The first of `keys` that `state` has, else None (the group a stage carries)."""
  return next((k for k in keys if k in state), None)


def _task_logits(task_net: nn.Module, params, x: jax.Array, rng: Optional[jax.Array] = None
                 ) -> jax.Array:
  """The task-net's logits; with `rng`, in training mode (dropout)."""
  if rng is None:
    return task_net.apply({"params": params}, x, train=False)
  return task_net.apply({"params": params}, x, train=True, rngs={"dropout": rng})


def _frozen(params) -> base.ParamGroup:
  return base.ParamGroup(params, optax.EmptyState())


# ---------------------------------------------------------------------------------------
# Loss-net objectives: values that carry their own options and compute L_E for a batch.


class LossNetInputs(NamedTuple):
  """What a loss-net objective computes L_E from, for one batch.

  Attributes:
    energy: the loss-net, an `Energy` (`energy.energy(params, encoding, y) -> [B]`).
    params: the loss-net's parameters, the only thing L_E is differentiated in.
    encoding: `energy.encode(params, x, ...)` of this batch, in training mode.
    x: the inputs `[B, ...]`.
    y: the gold outputs `[B, ...]`, as floats.
    task_logits: the task-net's logits `[B, ...]`, without a gradient path: the source
      of the dynamic samples and of the noise distribution.
    rng: the key of the objective's samples.
    extra_rng: a second, independent key (the library's regression objectives draw
      their extra samples with it).
    phase: the SEAL phase, one of `PHASES`: `'dynamic'` samples from the current
      task-net; in the static `'loss_net'` phase samples may come from GBI instead.
    structure: the `outputs.OutputStructure` of the energy's domain: `link` (logits to
      outputs), `sample` / `log_prob` (the task-net's distribution), `domain`,
      `mask_padding`.
    score: the task score `(ȳ, y) -> [B]`, counting real positions only.
  """
  energy: protocol.Energy
  params: Any
  encoding: Any
  x: jax.Array
  y: jax.Array
  task_logits: jax.Array
  rng: jax.Array
  extra_rng: jax.Array
  phase: str
  structure: outputs.OutputStructure
  score: scores_lib.Score


class LossNetObjective(Protocol):
  """A loss-net objective L_E: a value that carries its options.

  `loss(inputs)` returns `(scalar loss, metrics)` for one batch, differentiable in
  `inputs.params` only (samples, ŷ and scores carry no gradient). The library's are
  `SealMargin`, `SealRegression`, `SealRegressionS` and `SealNCE`
  (`get_loss_net_objective` maps their names, for configs); any value with this method
  plugs into `seal_objective(..., loss_net_objective=...)`. An optional
  `check(phase, structure)` is called once when the losses are built, so that a phase
  or output structure the objective cannot serve fails there (ValueError), not inside
  a compiled step.
  """

  def loss(self, inputs: LossNetInputs) -> tuple[jax.Array, base.Metrics]:
    """L_E of one batch and its metrics."""


def _positive_int(value, name: str) -> None:
  if not isinstance(value, int) or value < 1:
    raise ValueError(f"{name} must be a positive integer; got {value!r}")


def _require_gbi(config: Optional[GBIConfig], objective: str) -> None:
  """The static loss-net of `objective` draws its samples by GBI: it needs options."""
  if config is None:
    raise ValueError(f"loss_aug_gbi is required: the static {objective!r} loss-net draws "
                     "its samples by GBI")
  gbi_lib.validate_config(config)


def _extra_weights(samples, weights) -> dict[str, float]:
  """`{source: weight}` of the extra regression samples (GBI-free DVN sources)."""
  if not samples:
    return {}
  extra = dvn.check_samples(samples, weights)
  needs_gbi = [name for name in extra if name not in dvn.GBI_FREE_SOURCES]
  if needs_gbi:
    raise ValueError(f"extra_samples {needs_gbi} need GBI; SEAL's extra samples are "
                     f"drawn from {dvn.GBI_FREE_SOURCES}")
  return extra


def _check_extras_multilabel(extra: dict, structure: outputs.OutputStructure) -> None:
  if extra and structure is not outputs.MULTILABEL:
    raise ValueError("extra_samples live in the Box [0,1]^L (multi-label labels, "
                     "segmentation masks); a tagger's outputs are per-token simplices")


def _draw_extras(extra: dict, inputs: LossNetInputs) -> dict:
  if not extra:
    return {}
  return dvn.draw_samples(inputs.energy, inputs.params, inputs.encoding, inputs.x, inputs.y,
                          inputs.extra_rng, sources=tuple(extra), inference_gbi=None,
                          adversarial_gbi=None, score=inputs.score)


@dataclasses.dataclass(frozen=True)
class SealMargin:
  """The margin loss-net objective (Eq. 6): `[Δ(ŷ, y) − E(x, ŷ) + E(x, y)]_+`, averaged.

  Dynamic: ŷ is the task-net's output σ(F(x)), the special case the paper identifies
  with InfNet. Static (`'loss_net'` phase): ŷ from loss-augmented GBI, `gbi_scan` on
  `E − Δ` from the domain's uniform point, as SPEN's SSVM.

  Attributes:
    margin_cost: Δ, one of `MARGIN_COSTS`: an `ssvm.SURROGATES` name (default `'l1'`,
      the InfNet choice; the paper does not state it) or `'score'`, `1 − s(ŷ, y)`.
    surrogate_eps: clip of the `'log'` surrogate.
    loss_aug_gbi: `gbi_scan` options of the static loss-augmented GBI; required in the
      `'loss_net'` phase.
  """
  margin_cost: str = "l1"
  surrogate_eps: float = ssvm.DEFAULT_SURROGATE_EPS
  loss_aug_gbi: Optional[GBIConfig] = None

  def __post_init__(self):
    _check_choice(self.margin_cost, MARGIN_COSTS, "SEAL margin cost")

  def check(self, phase: str, structure: outputs.OutputStructure) -> None:
    """Refuses a static phase without GBI options (ValueError)."""
    del structure
    if phase == "loss_net":
      _require_gbi(self.loss_aug_gbi, "margin")

  def loss(self, inputs: LossNetInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged hinge, with its active fraction, Δ and energy gap."""
    structure, y = inputs.structure, inputs.y
    real = structure.mask_padding

    def cost_fn(y_hat, gold):
      if self.margin_cost == "score":
        return 1.0 - inputs.score(y_hat, gold)
      return ssvm.task_loss(real(y_hat, gold), gold, self.margin_cost, self.surrogate_eps)

    energy_fn = inputs.energy.energy
    if inputs.phase == "dynamic":
      y_hat = structure.link(inputs.task_logits)
    else:
      y_hat = loss_augmented_output(energy_fn, inputs.params, inputs.encoding, y,
                                    self.loss_aug_gbi, cost_fn, structure.domain)
    delta = cost_fn(y_hat, y)
    energy_pred = energy_fn(inputs.params, inputs.encoding, y_hat)
    energy_gold = energy_fn(inputs.params, inputs.encoding, y)
    bracket = delta - energy_pred + energy_gold
    hinge = jnp.mean(jax.nn.relu(bracket))
    return hinge, {"hinge": hinge, "active": jnp.mean((bracket > 0).astype(hinge.dtype)),
                   "delta": jnp.mean(delta),
                   "energy_gap": jnp.mean(energy_pred - energy_gold)}


@dataclasses.dataclass(frozen=True)
class SealRegression:
  """The regression loss-net objective (Eq. 7, DVN): cross-entropy of σ(−E(x, ȳ)) to s(ȳ, y).

  `dvn.value_regression_loss` (the printed `log(1 + σ)` is a typo for `log(1 − σ)`).
  Dynamic: ȳ is the task-net's output (one sample per example), plus any
  `extra_samples`. Static (`'loss_net'` phase, multi-label only): DVN's samples
  (`dvn.draw_samples`), GBI by `loss_aug_gbi`.

  Attributes:
    loss_aug_gbi: `gbi_scan` options of DVN's prediction and adversarial ascent in the
      static phase (required there).
    dvn_samples: DVN sample sources of the static phase (`dvn.SAMPLE_SOURCES`).
    dvn_sample_weights: their weights (None: 1 each).
    extra_samples: `dvn.GBI_FREE_SOURCES` added to the dynamic samples (our addition:
      a regression loss-net trained only on the task-net's near-gold outputs can learn
      how confident an output is rather than whether it fits the input); None for none.
    extra_sample_weights: their weights (None: 1 each).
  """
  loss_aug_gbi: Optional[GBIConfig] = None
  dvn_samples: Optional[tuple[str, ...]] = dvn.DEFAULT_SAMPLES
  dvn_sample_weights: Optional[tuple[float, ...]] = None
  extra_samples: Optional[tuple[str, ...]] = None
  extra_sample_weights: Optional[tuple[float, ...]] = None

  def __post_init__(self):
    dvn.check_samples(self.dvn_samples, self.dvn_sample_weights)
    _extra_weights(self.extra_samples, self.extra_sample_weights)

  def check(self, phase: str, structure: outputs.OutputStructure) -> None:
    """Refuses extras in the static phase, extras or a static phase off the Box, and a
    static phase without GBI options (ValueError)."""
    extra = _extra_weights(self.extra_samples, self.extra_sample_weights)
    if extra and phase == "loss_net":
      raise ValueError("extra_samples apply to the dynamic 'regression' and to "
                       "'regression_s' loss-nets, not to 'regression' in phase 'loss_net' "
                       "(static 'regression' takes dvn_samples)")
    _check_extras_multilabel(extra, structure)
    if phase == "loss_net":
      if structure is not outputs.MULTILABEL:
        raise ValueError("static 'regression' (DVN's GBI samples) is multi-label only; on "
                         "sequences use 'regression_s', 'margin' or 'nce'")
      _require_gbi(self.loss_aug_gbi, "regression")

  def loss(self, inputs: LossNetInputs) -> tuple[jax.Array, base.Metrics]:
    """The weighted regression over the sample set, with per-source scores and values."""
    if inputs.phase == "dynamic":
      extra = _extra_weights(self.extra_samples, self.extra_sample_weights)
      samples = {"task_net": inputs.structure.link(inputs.task_logits),
                 **_draw_extras(extra, inputs)}
      weights = {"task_net": 1.0, **extra}
    else:
      weights = dvn.check_samples(self.dvn_samples, self.dvn_sample_weights)
      samples = dvn.draw_samples(inputs.energy, inputs.params, inputs.encoding, inputs.x,
                                 inputs.y, inputs.rng, sources=tuple(weights),
                                 inference_gbi=self.loss_aug_gbi,
                                 adversarial_gbi=self.loss_aug_gbi, score=inputs.score)
    regression, metrics = dvn.regression_on_samples(inputs.energy.energy, inputs.params,
                                                    inputs.encoding, inputs.y, samples,
                                                    weights, inputs.score)
    return regression, dict(metrics, regression=regression)


@dataclasses.dataclass(frozen=True)
class SealRegressionS:
  """The regression-s loss-net objective: the regression loss summed over perturbed outputs.

  The sample set is S = {σ(F(x))} ∪ {σ(F(x) + σ_n ε_k)}_{k=1..K}, ε_k ~ N(0, I): the
  task-net's output and K Gaussian perturbations of its logits (the paper perturbs "the
  task-net output" without saying where; logit space keeps the samples in the domain,
  and keeping the unperturbed output follows SEAL's public code). In the static phase
  the task-net is the frozen noise network.

  Attributes:
    num_samples: K, the perturbations.
    noise_std: σ_n, their standard deviation.
    extra_samples: `dvn.GBI_FREE_SOURCES` added to S (multi-label only); None for none.
    extra_sample_weights: their weights (None: 1 each).
  """
  num_samples: int = 10
  noise_std: float = 1.0
  extra_samples: Optional[tuple[str, ...]] = None
  extra_sample_weights: Optional[tuple[float, ...]] = None

  def __post_init__(self):
    _positive_int(self.num_samples, "num_samples")
    if not self.noise_std > 0:
      raise ValueError(f"noise_std must be positive; got {self.noise_std!r}")
    _extra_weights(self.extra_samples, self.extra_sample_weights)

  def check(self, phase: str, structure: outputs.OutputStructure) -> None:
    """Refuses extra samples off the Box (ValueError)."""
    del phase
    _check_extras_multilabel(_extra_weights(self.extra_samples, self.extra_sample_weights),
                             structure)

  def loss(self, inputs: LossNetInputs) -> tuple[jax.Array, base.Metrics]:
    """Σ over S of the regression loss, averaged over the batch, with the mean score and
    predicted value (and the extra samples' metrics)."""
    y = inputs.y
    ys = jax.lax.stop_gradient(gaussian_perturbations(
        inputs.rng, inputs.task_logits, self.num_samples, self.noise_std,
        inputs.structure.link))
    targets = jax.vmap(lambda v: inputs.score(v, y), in_axes=1, out_axes=1)(ys)  # [B, 1+K]
    energies = sample_energies(inputs.energy.energy, inputs.params, inputs.encoding, ys)
    per_sample = dvn.value_regression_loss(energies, jax.lax.stop_gradient(targets))
    regression = jnp.mean(jnp.sum(per_sample, axis=-1))  # Σ over S (the paper's sum)
    metrics = {"score": jnp.mean(targets), "value": jnp.mean(dvn.predicted_value(energies))}
    extra = _extra_weights(self.extra_samples, self.extra_sample_weights)
    if extra:
      extra_loss, extra_metrics = dvn.regression_on_samples(
          inputs.energy.energy, inputs.params, inputs.encoding, y,
          _draw_extras(extra, inputs), extra, inputs.score)
      regression = regression + extra_loss
      metrics.update(extra_metrics)
    return regression, dict(metrics, regression=regression)


@dataclasses.dataclass(frozen=True)
class SealNCE:
  """The NCE ranking loss-net objective (Eq. 8-9, Ma & Collins' ranking NCE).

  `−log [exp(s(y⁰)) / Σ_{k=0..K} exp(s(yᵏ))]`, `s(y) = −E(x, y) − log P_N(y)`, with y⁰
  the gold output included in the normalizer (the printed Eq. 8 sums from k = 1, which
  would reward pushing the gold's score up without bound; SEAL's public code is the
  cross-entropy over [gold; samples]). The K noise samples are draws of the task-net's
  distribution P_N (Bernoulli per label, one categorical per token): the task-net of
  the previous step (dynamic) or the frozen pretrained net (static); log P_N is exact.

  Attributes:
    num_samples: K, the noise samples per example.
  """
  num_samples: int = 10

  def __post_init__(self):
    _positive_int(self.num_samples, "num_samples")

  def loss(self, inputs: LossNetInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged ranking loss, the gold's probability and the mean energies."""
    structure, y, task_logits = inputs.structure, inputs.y, inputs.task_logits
    noise = structure.sample(inputs.rng, task_logits, self.num_samples, y)
    ys = jnp.concatenate([y[:, None], noise], axis=1)  # [B, 1+K, ...], gold first
    log_noise = jax.lax.stop_gradient(structure.log_prob(task_logits, ys))
    energies = sample_energies(inputs.energy.energy, inputs.params, inputs.encoding, ys)
    per_example = nce_ranking_loss(energies, log_noise)
    nce = jnp.mean(per_example)
    return nce, {"nce": nce, "gold_prob": jnp.mean(jnp.exp(-per_example)),
                 "energy_gold": jnp.mean(energies[:, 0]),
                 "energy_noise": jnp.mean(energies[:, 1:])}


# Names of the library's loss-net objectives, for configs (`get_loss_net_objective`).
LOSS_NET_OBJECTIVES: dict[str, type] = {
    "margin": SealMargin, "regression": SealRegression, "regression_s": SealRegressionS,
    "nce": SealNCE}
OBJECTIVES = tuple(LOSS_NET_OBJECTIVES)


def get_loss_net_objective(name: str, **options: Any) -> LossNetObjective:
  """The library's loss-net objective called `name`, built with `options`.

  Args:
    name: one of `OBJECTIVES` (`'margin'`, `'regression'`, `'regression_s'`, `'nce'`).
    **options: fields of that objective (e.g. `num_samples=20` for `'nce'`).

  Returns:
    The objective value, e.g. `SealNCE(num_samples=20)`.

  Raises:
    ValueError: one line naming an unknown `name`, or options that `name` does not take.
  """
  _check_choice(name, OBJECTIVES, "SEAL loss-net objective")
  cls = LOSS_NET_OBJECTIVES[name]
  foreign, fields = base.options_not_taken(cls, options)
  if foreign:
    raise ValueError(f"options {foreign} apply to other loss-net objectives, not to "
                     f"{name!r} (its options: {fields})")
  return cls(**options)


# ---------------------------------------------------------------------------------------
# The family's options.


@dataclasses.dataclass(frozen=True)
class SealOptions:
  """SEAL's options other than the loss-net objective (defaults: the paper's SEAL-dynamic).

  Attributes:
    phase: one of `PHASES`: `'dynamic'` (Eq. 4-5), `'loss_net'` (static stage 1) or
      `'task_net'` (static stage 2).
    energy_weight: λ1 of Eq. 1.
    bce_weight: λ2 of Eq. 1.
    energy_term: `'energy'` (Eq. 1, λ1·E) or `'neg_value'` (λ1·(−σ(−E)), SEAL's public
      code for regression loss-nets).
    score: the task score (a `scores.SCORES` name or a function `(ȳ, y) -> [B]`) of the
      regression targets, of Δ = `'score'` and of the alignment metric.
    train_mode: run both networks in training mode (dropout) wherever SEAL's public
      trainer does: the task-net that gives the loss-net's samples (and P_N) and the
      loss-net inside L_F. Default False: both deterministic there, our choice (a loss
      should not be noisy).
    predict: `'task_net'` (σ(F(x))) or `'gbi'` (GBI on the loss-net; needs `predict_gbi`).
    predict_gbi: `gbi_while` options of `predict='gbi'`.
    predict_init: start of that GBI: `'uniform'` or `'task_net'` (σ(F(x))).
    task_net_init: in `init_from`, `'carry'` the previous task-net (or `local_bce` net)
      or start a `'fresh'` one.
    loss_net_steps: s, loss-net updates per round (on the same batch).
    rounds: t, rounds per `update`; a round is s loss-net updates then one task-net
      update (phases that train one group take only its updates). SEAL's public trainer
      does this per minibatch with s ∈ {3..12}, t ∈ {1, 5, 10}; the paper's Eq. 4-5 is
      s = t = 1 (the default).
  """
  phase: str = "dynamic"
  energy_weight: float = 1.0
  bce_weight: float = 1.0
  energy_term: str = "energy"
  score: str | scores_lib.Score = "soft_f1"
  train_mode: bool = False
  predict: str = "task_net"
  predict_gbi: Optional[GBIConfig] = None
  predict_init: str = "uniform"
  task_net_init: str = "carry"
  loss_net_steps: int = 1
  rounds: int = 1

  def __post_init__(self):
    _check_choice(self.phase, PHASES, "SEAL phase")
    _check_choice(self.energy_term, ENERGY_TERMS, "SEAL energy_term")
    if isinstance(self.score, str):
      scores_lib.get_score(self.score)
    if self.energy_weight < 0 or self.bce_weight < 0:
      raise ValueError(f"energy_weight and bce_weight must be non-negative; got "
                       f"{self.energy_weight}, {self.bce_weight}")
    if self.loss_net_steps < 1 or self.rounds < 1:
      raise ValueError(f"SEAL loss_net_steps and rounds must be >= 1; got "
                       f"{self.loss_net_steps}, {self.rounds}")
    _check_choice(self.predict, PREDICTIONS, "SEAL predict")
    _check_choice(self.predict_init, PREDICT_INITS, "SEAL predict_init")
    _check_choice(self.task_net_init, TASK_NET_INITS, "SEAL task_net_init")
    if self.predict == "gbi":
      if self.predict_gbi is None:
        raise ValueError("predict='gbi' needs predict_gbi")
      gbi_lib.validate_config(self.predict_gbi)

  def score_fn(self) -> scores_lib.Score:
    """The task score as a function."""
    return scores_lib.get_score(self.score) if isinstance(self.score, str) else self.score


# ---------------------------------------------------------------------------------------
# Configs: one flat block of options (SealOptions' fields, `objective` and the loss-net
# objectives' fields), written as ml_collections values.

_OPTION_FIELDS = base.field_names(SealOptions)


def _objective_fields() -> dict[str, tuple[str, ...]]:
  """`{field: names of the library objectives that take it}`."""
  owners: dict[str, tuple[str, ...]] = {}
  for name, cls in LOSS_NET_OBJECTIVES.items():
    for field in base.field_names(cls):
      owners[field] = owners.get(field, ()) + (name,)
  return owners


def _field(field: str) -> dataclasses.Field:
  """The dataclass field called `field` (SealOptions first, then the objectives)."""
  for cls in (SealOptions, *LOSS_NET_OBJECTIVES.values()):
    for f in dataclasses.fields(cls):
      if f.name == field:
        return f
  raise KeyError(field)


_CLASSES = (SealOptions, *LOSS_NET_OBJECTIVES.values())


def _from_config_value(field: str, value: Any) -> Any:
  return base.config_value(_CLASSES, field, value)


def seal_config_defaults() -> dict[str, Any]:
  """The flat config block of SEAL's options, from the dataclasses' defaults.

  `objective` (the loss-net objective's name, `'nce'`), every field of `SealOptions`
  and of the library's loss-net objectives whose value a config can hold (lists as
  comma-separated strings, None lists as `''`). The GBI options (`predict_gbi`,
  `loss_aug_gbi`) are left out: configs keep them in their own blocks and pass them to
  `seal_options_from_config`.

  Returns:
    `{key: default}`, what a config's `seal` block starts from.
  """
  defaults: dict[str, Any] = {"objective": "nce"}
  for cls in (SealOptions, *LOSS_NET_OBJECTIVES.values()):
    for f in dataclasses.fields(cls):
      value = f.default
      if isinstance(value, tuple):
        value = ",".join(str(v) for v in value)
      elif value is None and base.sequence_element_type(_CLASSES, f.name) is not None:
        value = ""
      elif not isinstance(value, (bool, int, float, str)):
        continue
      defaults.setdefault(f.name, value)
  return defaults


def seal_options_from_config(config: Mapping[str, Any], **values: Any
                             ) -> tuple[SealOptions, LossNetObjective]:
  """SEAL's options and loss-net objective from a flat block of options.

  `objective` names the loss-net objective (`get_loss_net_objective`); the keys that
  are `SealOptions` fields go to the options, the chosen objective's fields to it.

  Args:
    config: a config's `seal` block (strict): every key must be `objective`, a
      `SealOptions` field or a field of a library loss-net objective; a key of another
      objective than the chosen one must keep its default (it would be ignored).
      List fields may be strings of comma- (or `+`-) separated items.
    **values: Python values (e.g. `GBIConfig`s, tuples, or a whole flat set of options
      given as keywords), each passed to whichever of the options and the chosen
      objective has a field of its name, and dropped otherwise; they override `config`.

  Returns:
    `(SealOptions, loss-net objective)`.

  Raises:
    ValueError: one line, naming an unknown key and the known ones, or an option set for
      an objective other than the chosen one.
  """
  owners = _objective_fields()
  known = ("objective",) + _OPTION_FIELDS + tuple(f for f in owners if f not in _OPTION_FIELDS)
  unknown = [k for k in sorted(set(config) | set(values)) if k not in known]
  if unknown:
    raise ValueError(f"unknown SEAL options {unknown}; known: {known}")
  name = values.get("objective", config.get("objective", "nce"))
  _check_choice(name, OBJECTIVES, "SEAL loss-net objective")
  taken = base.field_names(LOSS_NET_OBJECTIVES[name])
  option_kwargs, objective_kwargs = {}, {}
  for key, raw in config.items():
    if key == "objective":
      continue
    value = _from_config_value(key, raw)
    if key in _OPTION_FIELDS:
      option_kwargs[key] = value
    elif key in taken:
      objective_kwargs[key] = value
    elif value != _field(key).default:
      raise ValueError(f"SEAL option {key}={raw!r} applies to the loss-net objectives "
                       f"{owners[key]}, not to {name!r}")
  for key, value in values.items():
    if key in _OPTION_FIELDS:
      option_kwargs[key] = value
    elif key in taken:
      objective_kwargs[key] = value
  return SealOptions(**option_kwargs), get_loss_net_objective(name, **objective_kwargs)


def _resolve(options: Optional[SealOptions], loss_net_objective: Optional[LossNetObjective],
             flat: dict) -> tuple[SealOptions, LossNetObjective]:
  """The options and objective of `seal_losses` / `seal_objective`, from values or from
  flat keywords (`seal_options_from_config`'s `values`)."""
  if flat:
    if options is not None:
      raise ValueError(f"give SEAL's options either as options=SealOptions(...) or as "
                       f"keywords, not both; got options and {sorted(flat)}")
    for_objective = sorted(k for k in flat if k not in _OPTION_FIELDS)
    if loss_net_objective is not None and for_objective:
      raise ValueError(f"loss-net objective options {for_objective} given beside "
                       "loss_net_objective: set them on the objective value")
    options, named = seal_options_from_config({}, **flat)
    loss_net_objective = named if loss_net_objective is None else loss_net_objective
  return (SealOptions() if options is None else options,
          SealNCE() if loss_net_objective is None else loss_net_objective)


# ---------------------------------------------------------------------------------------
# SEAL.


class SealLosses(NamedTuple):
  """The two SEAL losses, pure functions returning `(scalar loss, metrics)`.

  Attributes:
    loss_net: `(loss_params, task_params, batch, rng)`: L_E, differentiable w.r.t.
      `loss_params` only (samples, ŷ and scores carry no gradient).
    task_net: `(task_params, loss_params, batch, rng)`: L_F of Eq. 1, differentiable
      w.r.t. `task_params` only (the loss-net is a constant).
  """
  loss_net: Callable[..., tuple[jax.Array, base.Metrics]]
  task_net: Callable[..., tuple[jax.Array, base.Metrics]]


def seal_losses(task_net: nn.Module, loss_net: Any, *, options: Optional[SealOptions] = None,
                loss_net_objective: Optional[LossNetObjective] = None,
                **flat_options: Any) -> SealLosses:
  """L_E and L_F of SEAL (see the module docstring).

  Args:
    task_net: `F_Φ`, called as `task_net(x, train=...) -> logits [B, L]`.
    loss_net: `E_Θ`, any energy `protocol.as_energy` accepts (an `Energy`, or a
      library energy such as `SPENEnergy`).
    options: `SealOptions` (default: `SealOptions()`); L_E and L_F read `phase`, the
      weights, `energy_term`, `score` and `train_mode`.
    loss_net_objective: L_E, a `LossNetObjective` value (default `SealNCE()`).
    **flat_options: instead of the two values, the flat form configs use
      (`objective='nce', num_samples=10, phase=...`; `seal_options_from_config`).

  Returns:
    `SealLosses(loss_net, task_net)`.
  """
  options, objective = _resolve(options, loss_net_objective, flat_options)
  phase, train_mode, energy_term = options.phase, options.train_mode, options.energy_term
  energy_weight, bce_weight = options.energy_weight, options.bce_weight
  score_fn = options.score_fn()
  model = protocol.as_energy(loss_net)
  structure = outputs.for_domain(model.domain)
  check = getattr(objective, "check", None)
  if check is not None:
    check(phase, structure)
  link, real = structure.link, structure.mask_padding
  energy_fn = model.energy
  real_score = lambda y_hat, y: score_fn(real(y_hat, y), y)

  def loss_net_loss(loss_params, task_params, batch, rng):
    dropout_rng, sample_rng, extra_rng = jax.random.split(rng, 3)
    x = batch["x"]
    encoding = model.encode(loss_params, x, True, dropout_rng)
    # fold_in, not a wider split, so that runs without train_mode keep their streams.
    task_rng = jax.random.fold_in(rng, 1) if train_mode else None
    task_logits = jax.lax.stop_gradient(_task_logits(task_net, task_params, x, task_rng))
    y = jnp.asarray(batch["y"], task_logits.dtype)
    return objective.loss(LossNetInputs(
        energy=model, params=loss_params, encoding=encoding, x=x, y=y,
        task_logits=task_logits, rng=sample_rng, extra_rng=extra_rng, phase=phase,
        structure=structure, score=real_score))

  def summed_term(loss_params, x, y_hat, rng):
    energy = energy_fn(loss_params, model.encode(loss_params, x, rng is not None, rng), y_hat)
    term = energy if energy_term == "energy" else -dvn.predicted_value(energy)
    return jnp.sum(term), energy

  def task_net_loss(task_params, loss_params, batch, rng):
    logits = _task_logits(task_net, task_params, batch["x"], rng)
    loss_params = jax.lax.stop_gradient(loss_params)
    y_hat = link(logits)
    fixed = jax.lax.stop_gradient(y_hat)
    # One loss-net pass gives the term and its gradient in ȳ. The task-net's gradient is
    # that ȳ-gradient chained through ȳ(Φ) (the linear part: value 0), and the alignment
    # metric compares the same gradient with the score's, so no second pass is needed.
    loss_rng = jax.random.fold_in(rng, 1) if train_mode and rng is not None else None
    (term_sum, energy), term_grad = jax.value_and_grad(summed_term, argnums=2, has_aux=True)(
        loss_params, batch["x"], fixed, loss_rng)
    term_sum = term_sum + jnp.sum(jax.lax.stop_gradient(term_grad) * (y_hat - fixed))
    bce = structure.local_loss(logits, batch["y"])  # BCE, or token CE on sequences
    loss = energy_weight * term_sum / energy.shape[0] + bce_weight * bce
    y = jnp.asarray(batch["y"], fixed.dtype)
    score_grad = jax.grad(lambda v: -jnp.sum(real_score(v, y)))(fixed)
    return loss, {"energy": jnp.mean(energy), "bce": bce,
                  "score_grad_cosine": gradient_cosine(term_grad, score_grad)}

  return SealLosses(loss_net_loss, task_net_loss)


def gradient_cosine(a: jax.Array, b: jax.Array) -> jax.Array:
  """`[B, ...] x2 -> []`: the cosine of a and b per example, averaged over the batch: 1
  where the loss-net pushes ȳ exactly as the score would (a perfect regression
  loss-net), about 0 where it carries none of it, < 0 where it pushes against it."""
  axes = tuple(range(1, a.ndim))
  norms = jnp.sqrt(jnp.sum(a * a, axis=axes) * jnp.sum(b * b, axis=axes))
  return jnp.mean(jnp.sum(a * b, axis=axes) / jnp.maximum(norms, 1e-12))


def seal_objective(task_net: nn.Module, loss_net: Any,
                   task_optimizer: optax.GradientTransformation,
                   loss_net_optimizer: optax.GradientTransformation, *,
                   options: Optional[SealOptions] = None,
                   loss_net_objective: Optional[LossNetObjective] = None,
                   **flat_options: Any) -> base.Objective:
  """The SEAL objective (see the module docstring).

  Args:
    task_net: `F_Φ`, called as `task_net(x, train=...) -> logits [B, L]`.
    loss_net: `E_Θ`, any energy `protocol.as_energy` accepts (an `Energy` from
      `energy_from_module` / `energy_from_function`, or a library energy); checked
      against the first batch at `init` (`protocol.EnergyShapeError`).
    task_optimizer: the task-net's optimizer (SEAL: Adam).
    loss_net_optimizer: the loss-net's optimizer (SEAL: a separate Adam).
    options: the family's options, `SealOptions` (default: SEAL-dynamic, λ1 = λ2 = 1,
      one loss-net step then one task-net step per update, prediction σ(F(x))).
    loss_net_objective: L_E, a `LossNetObjective` value: `SealMargin`,
      `SealRegression`, `SealRegressionS`, `SealNCE` (the default, K = 10) or your own.
    **flat_options: instead of the two values, the flat form configs use
      (`objective='nce', num_samples=10, phase=...`; see `seal_options_from_config`).

  Returns:
    An `Objective` with state `{"task_net": ParamGroup, "loss_net": ParamGroup}`.
  """
  options, loss_net_objective = _resolve(options, loss_net_objective, flat_options)
  model = protocol.as_energy(loss_net)
  losses = seal_losses(task_net, model, options=options,
                       loss_net_objective=loss_net_objective)
  phase, task_net_init = options.phase, options.task_net_init
  loss_net_steps, rounds = options.loss_net_steps, options.rounds
  predict, predict_init, predict_gbi = (options.predict, options.predict_init,
                                        options.predict_gbi)
  trains_loss_net = phase in ("dynamic", "loss_net")
  trains_task_net = phase in ("dynamic", "task_net")
  structure = outputs.for_domain(model.domain)

  def fresh_task_params(rng, x):
    return flax.core.unfreeze(task_net.init({"params": rng}, x)["params"])

  def gold(batch):
    return jnp.asarray(batch["y"], jnp.result_type(float))

  def make_state(task_params, loss_params):
    task = (base.init_group(task_params, task_optimizer) if trains_task_net
            else _frozen(task_params))
    loss = (base.init_group(loss_params, loss_net_optimizer) if trains_loss_net
            else _frozen(loss_params))
    return {"task_net": task, "loss_net": loss}

  def init(rng, batch):
    if phase == "task_net":
      raise ValueError("SEAL phase 'task_net' trains against a frozen, trained loss-net: "
                       "continue a 'loss_net'-phase or SPEN state with init_from, not init")
    task_rng, loss_rng = jax.random.split(rng)
    task_params = fresh_task_params(task_rng, batch["x"])
    loss_params = protocol.init_checked(model, loss_rng, batch["x"], gold(batch))
    return make_state(task_params, loss_params)

  def init_from(prev_state, rng, batch):
    known = ("task_net", "net", "loss_net", "energy")
    if not any(k in prev_state for k in known):
      raise ValueError(f"cannot continue from a state with keys {sorted(prev_state)}; "
                       f"expected some of {known}")
    x = batch["x"]
    task_rng, loss_rng = jax.random.split(rng)
    task_params = fresh_task_params(task_rng, x)
    task_key = _first_present(prev_state, ("task_net", "net"))
    if task_net_init == "carry" and task_key:
      task_params = base.carried(prev_state[task_key].params, task_params,
                                 f"the previous {task_key!r} params into the task-net")
    loss_key = _first_present(prev_state, ("loss_net", "energy"))
    if loss_key:
      # Only the loss-net's group continues into the energy: a {"net"} in the same state
      # is the task-net's.
      loss_params = model.continue_from({"energy": prev_state[loss_key]}, loss_rng, x,
                                        gold(batch))
      protocol.check(model, x, gold(batch), loss_params)
    elif phase == "task_net":
      raise ValueError("SEAL phase 'task_net' needs a trained loss-net, but the previous "
                       f"state has only {sorted(prev_state)}")
    else:
      loss_params = protocol.init_checked(model, loss_rng, x, gold(batch))
    return make_state(task_params, loss_params)

  def group_step(state, batch, rng, group, other, loss_fn, optimizer):
    metrics, grads = base.metrics_and_grads(loss_fn, state[group].params,
                                            state[other].params, batch, rng)
    return dict(state, **{group: base.apply_gradients(state[group], grads, optimizer)}), metrics

  def loss_net_phase(state, batch, rng):
    """`loss_net_steps` loss-net updates on the batch; the metrics of the last one."""
    def body(state, step_rng):
      return group_step(state, batch, step_rng, "loss_net", "task_net", losses.loss_net,
                        loss_net_optimizer)
    return _scan_last(body, state, rng, loss_net_steps)

  def task_net_phase(state, batch, rng):
    return group_step(state, batch, rng, "task_net", "loss_net", losses.task_net,
                      task_optimizer)

  phases = [(group, fn) for group, fn, trains in (
      ("loss_net", loss_net_phase, trains_loss_net),
      ("task_net", task_net_phase, trains_task_net)) if trains]

  def one_round(state, batch, rng):
    """Eq. 4-5's order: the task-net step sees the loss-net just updated (Θ_t)."""
    metrics, step_losses, norms = {}, [], []
    # One key per group, whichever groups the phase trains, so a group's randomness does
    # not depend on whether the other group is trained (static vs dynamic).
    keys = dict(zip(("loss_net", "task_net"), jax.random.split(rng)))
    for group, fn in phases:
      state, step_metrics = fn(state, batch, keys[group])
      metrics.update({f"{group}_{k}": v for k, v in step_metrics.items()})
      step_losses.append(step_metrics["loss"])
      norms.append(step_metrics["grad_norm"])
    metrics["loss"] = sum(step_losses)
    metrics["grad_norm"] = jnp.sqrt(sum(jnp.square(n) for n in norms))
    return state, metrics

  def update(state, batch, rng):
    return _scan_last(lambda st, r: one_round(st, batch, r), dict(state), rng, rounds)

  def predict_fn(state, x):
    logits = _task_logits(task_net, state["task_net"].params, x)
    if predict == "task_net":
      return structure.link(logits)
    params = state["loss_net"].params
    encoding = jax.lax.stop_gradient(model.encode(params, x))
    domain = structure.domain
    y0 = (domain.uniform_init(logits.shape, logits.dtype) if predict_init == "uniform"
          else structure.link(logits))
    return gbi_lib.gbi_while(model.energy, params, encoding, y0, domain, predict_gbi).y

  return base.Objective(init, update, predict_fn, init_from)


def _scan_last(body, state, rng, length: int):
  """`length` applications of `body(state, rng) -> (state, metrics)` with split keys;
  the metrics of the last. One application is traced inline (no scan): the common case."""
  if length == 1:
    return body(state, rng)
  state, metrics = jax.lax.scan(body, state, jax.random.split(rng, length))
  return state, jax.tree.map(lambda m: m[-1], metrics)


# ---------------------------------------------------------------------------------------
# Ablation: the ranking loss on the task-net, without a loss-net (§5).


def task_net_ranking(task_net: nn.Module, optimizer: optax.GradientTransformation, *,
                     num_samples: int = 10, ranking_weight: float = 1.0,
                     bce_weight: float = 1.0,
                     output: str | outputs.OutputStructure = "multilabel") -> base.Objective:
  """NCE ranking with `s(y) = Σ_i log P(y_i | x; Φ)` on the task-net itself, + λ2·BCE.

  Per example: `−log [P_Φ(y⁰) / Σ_{k=0..K} P_Φ(yᵏ)]`, y⁰ the gold output, yᵏ ~ P_Φ
  Bernoulli samples of the task-net's current output (drawn without a gradient path;
  the gradient flows through every log P_Φ(yᵏ)). Loss:
  `ranking_weight · mean ranking + bce_weight · BCE`. State `{"task_net": ParamGroup}`;
  `init_from` carries a `local_bce` or SEAL task-net. Prediction `σ(F(x))`.
  `output`: the `outputs.OutputStructure` or its name (`'sequence'`: per-token
  categorical samples and softmax, token CE in place of BCE).
  """
  structure = outputs.get_structure(output)
  if not isinstance(num_samples, int) or num_samples < 1:
    raise ValueError(f"num_samples must be a positive integer; got {num_samples!r}")
  if ranking_weight < 0 or bce_weight < 0:
    raise ValueError(f"ranking_weight and bce_weight must be non-negative; got "
                     f"{ranking_weight}, {bce_weight}")

  def loss_fn(params, batch, rng):
    dropout_rng, sample_rng = jax.random.split(rng)
    logits = _task_logits(task_net, params, batch["x"], dropout_rng)
    y = jnp.asarray(batch["y"], logits.dtype)
    noise = structure.sample(sample_rng, jax.lax.stop_gradient(logits), num_samples, y)
    log_p = structure.log_prob(logits, jnp.concatenate([y[:, None], noise], axis=1))
    ranking = jnp.mean(nce_ranking_loss(-log_p, jnp.zeros_like(log_p)))
    bce = structure.local_loss(logits, y)
    return ranking_weight * ranking + bce_weight * bce, {"ranking": ranking, "bce": bce}

  def init(rng, batch):
    params = flax.core.unfreeze(task_net.init({"params": rng}, batch["x"])["params"])
    return {"task_net": base.init_group(params, optimizer)}

  def update(state, batch, rng):
    group, metrics = base.minimize_step(loss_fn, optimizer, state["task_net"], batch, rng)
    return {"task_net": group}, metrics

  def predict(state, x):
    return structure.link(_task_logits(task_net, state["task_net"].params, x))

  def init_from(prev_state, rng, batch):
    reference = init(rng, batch)["task_net"].params
    key = _first_present(prev_state, ("task_net", "net"))
    if key:
      params = base.carried(prev_state[key].params, reference,
                            f"the previous {key!r} params into the task-net")
      return {"task_net": base.init_group(params, optimizer)}
    raise ValueError(f"cannot continue from a state with keys {sorted(prev_state)}; "
                     "expected 'task_net' or 'net'")

  return base.Objective(init, update, predict, init_from)

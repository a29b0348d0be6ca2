"""SEAL's loss-net objectives: values that carry their own options and compute L_E.

The library's are `SealMargin`, `SealRegression`, `SealRegressionS` and `SealNCE`; any
value with a `loss(LossNetInputs)` method (`LossNetObjective`) plugs into `seal_objective`
the same way.
"""

import dataclasses
from typing import Any
from typing import NamedTuple
from typing import Protocol
from typing import cast

import jax
import jax.numpy as jnp

from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from energynets.inference.gbi import GBIConfig
from energynets.objectives import base
from energynets.objectives import dvn
from energynets.objectives import outputs
from energynets.objectives import scores as scores_lib
from energynets.objectives import task_losses
from energynets.objectives.seal.blocks import OneMinusScore
from energynets.objectives.seal.blocks import check_margin_cost
from energynets.objectives.seal.blocks import gaussian_perturbations
from energynets.objectives.seal.blocks import loss_augmented_output
from energynets.objectives.seal.blocks import margin_delta
from energynets.objectives.seal.blocks import nce_ranking_loss
from energynets.objectives.seal.blocks import sample_energies


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
    dynamic: True in SEAL-dynamic, whose samples come from the current task-net; False
      in the static loss-net phase (the task-net frozen), whose samples may come from
      GBI instead.
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
  dynamic: bool
  structure: outputs.OutputStructure
  score: scores_lib.Score


class LossNetObjective(Protocol):
  """A loss-net objective L_E: a value that carries its options.

  `loss(inputs)` returns `(scalar loss, metrics)` for one batch, differentiable in
  `inputs.params` only (samples, ŷ and scores carry no gradient). The library's are
  `SealMargin`, `SealRegression`, `SealRegressionS` and `SealNCE`; any value with this
  method plugs into `seal_objective(..., loss_net_objective=...)`. An optional
  `check(dynamic, structure)` is called once when losses that train the loss-net are
  built (`dynamic` as in `LossNetInputs`), so that a phase or output structure the
  objective cannot serve fails there (ValueError), not inside a compiled step.
  """

  def loss(self, inputs: LossNetInputs) -> tuple[jax.Array, base.Metrics]:
    """L_E of one batch and its metrics."""


def _positive_int(value, name: str) -> None:
  if not isinstance(value, int) or value < 1:
    raise ValueError(f"{name} must be a positive integer; got {value!r}")


def _require_gbi(config: GBIConfig | None, objective: str) -> None:
  """The static loss-net of `objective` draws its samples by GBI: it needs options."""
  if config is None:
    raise ValueError(
      f"loss_aug_gbi is required: the static {objective!r} loss-net draws its samples by GBI"
    )
  gbi_lib.validate_config(config)


def _extra_weights(samples, weights) -> dict:
  """`{source: weight}` of the extra regression samples (GBI-free DVN sources)."""
  if not samples:
    return {}
  extra = dvn.check_samples(samples, weights)
  needs_gbi = [source.name for source in extra if source.needs_gbi]
  if needs_gbi:
    raise ValueError(
      f"extra_samples {needs_gbi} need GBI; SEAL's extra samples are "
      f"drawn from GBI-free DVN sources (Gold(), Random(), OtherGold())"
    )
  return extra


def _check_extras_multilabel(extra: dict, structure: outputs.OutputStructure) -> None:
  if extra and structure is not outputs.MULTILABEL:
    raise ValueError(
      "extra_samples live in the Box [0,1]^L (multi-label labels, "
      "segmentation masks); a tagger's outputs are per-token simplices"
    )


def _draw_extras(extra: dict, inputs: LossNetInputs) -> dict:
  if not extra:
    return {}
  return dvn.draw_samples(
    inputs.energy,
    inputs.params,
    inputs.encoding,
    inputs.x,
    inputs.y,
    inputs.extra_rng,
    sources=tuple(extra),
    inference_gbi=None,
    adversarial_gbi=None,
    score=inputs.score,
  )


@dataclasses.dataclass(frozen=True)
class SealMargin:
  """The margin loss-net objective (Eq. 6): `[Δ(ŷ, y) − E(x, ŷ) + E(x, y)]_+`, averaged.

  Dynamic: ŷ is the task-net's output σ(F(x)), the special case the paper identifies
  with InfNet. Static (the loss-net phase): ŷ from loss-augmented GBI, `gbi_scan` on
  `E − Δ` from the domain's uniform point, as SPEN's SSVM.

  Attributes:
    margin_cost: Δ, a `task_losses` surrogate value (default `L1()`, the InfNet choice;
      the paper does not state it) or `OneMinusScore()`, `1 − s(ŷ, y)`.
    loss_aug_gbi: `gbi_scan` options of the static loss-augmented GBI; required in the
      static loss-net phase.
  """

  margin_cost: task_losses.Surrogate | OneMinusScore = task_losses.L1()
  loss_aug_gbi: GBIConfig | None = None

  def __post_init__(self):
    check_margin_cost(self.margin_cost)

  def check(self, dynamic: bool, structure: outputs.OutputStructure) -> None:
    """Refuses a static phase without GBI options (ValueError)."""
    del structure
    if not dynamic:
      _require_gbi(self.loss_aug_gbi, "margin")

  def loss(self, inputs: LossNetInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged hinge, with its active fraction, Δ and energy gap."""
    structure, y = inputs.structure, inputs.y
    real = structure.mask_padding

    def cost_fn(y_hat, gold):
      return margin_delta(y_hat, gold, self.margin_cost, inputs.score, real_y_hat=real(y_hat, gold))

    energy_fn = inputs.energy.energy
    if inputs.dynamic:
      y_hat = structure.link(inputs.task_logits)
    else:
      assert self.loss_aug_gbi is not None  # `check` refuses a static phase without it
      y_hat = loss_augmented_output(
        energy_fn, inputs.params, inputs.encoding, y, self.loss_aug_gbi, cost_fn, structure.domain
      )
    delta = cost_fn(y_hat, y)
    energy_pred = energy_fn(inputs.params, inputs.encoding, y_hat)
    energy_gold = energy_fn(inputs.params, inputs.encoding, y)
    bracket = delta - energy_pred + energy_gold
    hinge = jnp.mean(jax.nn.relu(bracket))
    return hinge, {
      "hinge": hinge,
      "active": jnp.mean((bracket > 0).astype(hinge.dtype)),
      "delta": jnp.mean(delta),
      "energy_gap": jnp.mean(energy_pred - energy_gold),
    }


@dataclasses.dataclass(frozen=True)
class SealRegression:
  """The regression loss-net objective (Eq. 7, DVN): cross-entropy of σ(−E(x, ȳ)) to s(ȳ, y).

  `dvn.value_regression_loss` (the printed `log(1 + σ)` is a typo for `log(1 − σ)`).
  Dynamic: ȳ is the task-net's output (one sample per example), plus any
  `extra_samples`. Static (the loss-net phase, multi-label only): DVN's samples
  (`dvn.draw_samples`), GBI by `loss_aug_gbi`.

  Attributes:
    loss_aug_gbi: `gbi_scan` options of DVN's prediction and adversarial ascent in the
      static phase (required there).
    dvn_samples: DVN sample sources of the static phase (`dvn.Source` values).
    dvn_sample_weights: their weights (None: 1 each).
    extra_samples: GBI-free `dvn.Source` values added to the dynamic samples (our addition:
      a regression loss-net trained only on the task-net's near-gold outputs can learn
      how confident an output is rather than whether it fits the input); None for none.
    extra_sample_weights: their weights (None: 1 each).
  """

  loss_aug_gbi: GBIConfig | None = None
  dvn_samples: tuple[dvn.Source, ...] | None = dvn.DEFAULT_SAMPLES
  dvn_sample_weights: tuple[float, ...] | None = None
  extra_samples: tuple[dvn.Source, ...] | None = None
  extra_sample_weights: tuple[float, ...] | None = None

  def __post_init__(self):
    dvn.check_samples(self.dvn_samples, self.dvn_sample_weights)
    _extra_weights(self.extra_samples, self.extra_sample_weights)

  def check(self, dynamic: bool, structure: outputs.OutputStructure) -> None:
    """Refuses extras in the static phase, extras or a static phase off the Box, and a
    static phase without GBI options (ValueError)."""
    extra = _extra_weights(self.extra_samples, self.extra_sample_weights)
    if extra and not dynamic:
      raise ValueError(
        "extra_samples apply to the dynamic SealRegression and to "
        "SealRegressionS, not to SealRegression in the static loss-net phase "
        "(static SealRegression takes dvn_samples)"
      )
    _check_extras_multilabel(extra, structure)
    if not dynamic:
      if structure is not outputs.MULTILABEL:
        raise ValueError(
          "static SealRegression (DVN's GBI samples) is multi-label only; on "
          "sequences use SealRegressionS, SealMargin or SealNCE"
        )
      _require_gbi(self.loss_aug_gbi, "regression")

  def loss(self, inputs: LossNetInputs) -> tuple[jax.Array, base.Metrics]:
    """The weighted regression over the sample set, with per-source scores and values."""
    if inputs.dynamic:
      extra = _extra_weights(self.extra_samples, self.extra_sample_weights)
      samples = {
        "task_net": inputs.structure.link(inputs.task_logits),
        **_draw_extras(extra, inputs),
      }
      weights = {"task_net": 1.0, **extra}
    else:
      weights = dvn.check_samples(self.dvn_samples, self.dvn_sample_weights)
      samples = dvn.draw_samples(
        inputs.energy,
        inputs.params,
        inputs.encoding,
        inputs.x,
        inputs.y,
        inputs.rng,
        sources=tuple(weights),
        inference_gbi=self.loss_aug_gbi,
        adversarial_gbi=self.loss_aug_gbi,
        score=inputs.score,
      )
    regression, metrics = dvn.regression_on_samples(
      inputs.energy.energy, inputs.params, inputs.encoding, inputs.y, samples, weights, inputs.score
    )
    # An array, not the 0.0 of no samples: `check_samples` refuses an empty `dvn_samples`.
    regression = cast(jax.Array, regression)
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
    extra_samples: GBI-free `dvn.Source` values added to S (multi-label only); None for
      none.
    extra_sample_weights: their weights (None: 1 each).
  """

  num_samples: int = 10
  noise_std: float = 1.0
  extra_samples: tuple[dvn.Source, ...] | None = None
  extra_sample_weights: tuple[float, ...] | None = None

  def __post_init__(self):
    _positive_int(self.num_samples, "num_samples")
    if not self.noise_std > 0:
      raise ValueError(f"noise_std must be positive; got {self.noise_std!r}")
    _extra_weights(self.extra_samples, self.extra_sample_weights)

  def check(self, dynamic: bool, structure: outputs.OutputStructure) -> None:
    """Refuses extra samples off the Box (ValueError)."""
    del dynamic
    _check_extras_multilabel(
      _extra_weights(self.extra_samples, self.extra_sample_weights), structure
    )

  def loss(self, inputs: LossNetInputs) -> tuple[jax.Array, base.Metrics]:
    """Σ over S of the regression loss, averaged over the batch, with the mean score and
    predicted value (and the extra samples' metrics)."""
    y = inputs.y
    ys = jax.lax.stop_gradient(
      gaussian_perturbations(
        inputs.rng, inputs.task_logits, self.num_samples, self.noise_std, inputs.structure.link
      )
    )
    targets = jax.vmap(lambda v: inputs.score(v, y), in_axes=1, out_axes=1)(ys)  # [B, 1+K]
    energies = sample_energies(inputs.energy.energy, inputs.params, inputs.encoding, ys)
    per_sample = dvn.value_regression_loss(energies, jax.lax.stop_gradient(targets))
    regression = jnp.mean(jnp.sum(per_sample, axis=-1))  # Σ over S (the paper's sum)
    metrics = {"score": jnp.mean(targets), "value": jnp.mean(dvn.predicted_value(energies))}
    extra = _extra_weights(self.extra_samples, self.extra_sample_weights)
    if extra:
      extra_loss, extra_metrics = dvn.regression_on_samples(
        inputs.energy.energy,
        inputs.params,
        inputs.encoding,
        y,
        _draw_extras(extra, inputs),
        extra,
        inputs.score,
      )
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
    return nce, {
      "nce": nce,
      "gold_prob": jnp.mean(jnp.exp(-per_example)),
      "energy_gold": jnp.mean(energies[:, 0]),
      "energy_noise": jnp.mean(energies[:, 1:]),
    }

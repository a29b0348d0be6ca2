"""`dvn`: deep value networks (Gygli, Norouzi & Angelova 2017) on the SPEN energy.

A DVN learns an energy whose value `σ(−E(x, ȳ))` predicts the task score `s(ȳ, y)` of
any relaxed output ȳ ∈ [0,1]^L (here the soft F1 of `scores.soft_f1`), by the
cross-entropy of SEAL Eq. 7 / docs/design.md:

    ℓ(ȳ) = −s log σ(−E(x, ȳ)) − (1 − s) log(1 − σ(−E(x, ȳ))),   s = s(ȳ, y) held fixed

(the paper prints `log(1 + σ(−E))` in the second term; that is a typo: with `1 +` the
loss is not a cross-entropy and is not minimized at σ(−E) = s). Prediction is GBI:
`argmin_ȳ E(x, ȳ)`, i.e. the output of highest predicted score.

Training outputs ȳ per step, each drawn by a *sample source*, a `Source` value:

- `Inference()`: the current prediction, `gbi_scan` minimizing E for
  `inference_gbi.num_steps` from `init` (uniform 0.5 by default; `'random'`: a fresh
  U[0,1] point each step, as SEAL's public DVN configs);
- `Adversarial()`: from that prediction (or, with `random_start=True`, from its
  own random point, as SEAL's public code), `gbi_scan` *ascending* ℓ (descending −ℓ)
  for `adversarial_gbi.num_steps`: the output whose score the network currently gets
  most wrong. ℓ depends on ȳ through E and through the score s(ȳ, y); Gygli et al.
  maximize the loss itself, so both paths are followed
  (`through_score=False` follows E only, as SEAL's public code does with
  its non-differentiable F1 oracle);
- `Gold()`: y itself (score 1), which anchors the top of the value scale;
- `Random()`: ȳ ~ U[0,1]^L, a sample of the whole box;
- `OtherGold()`: the gold output of the next example in the batch (the batch rolled by
  one), scored against this example's gold: a real, confident output that belongs to
  another input, which only an energy that reads x can rate below y (our addition, not
  Gygli et al.'s; SEAL's regression loss-nets otherwise see only near-gold outputs).

The loss is `Σ_source w_source · mean_batch ℓ(ȳ_source)` (`samples` picks the sources,
`sample_weights` their weights, default 1 each): the configurable mix. Every sample is
`stop_gradient`-ed: the loss is differentiated at fixed ȳ (nothing back-propagates
through either GBI unroll), and s is always a fixed target in the parameter gradient.

State `{"energy": ParamGroup}`, the SPEN state, so the energy's `continue_from` carries a
SPEN or `local_bce` state (`init_from`) and SPEN's search statistics apply. The energy is
any `Energy` on the Box: a SPEN, a `SegmentationEnergy` (masks ȳ ∈ [0,1]^{H×W},
`score=scores.soft_iou`) or a user's own.
"""

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
from typing import Any
from typing import Protocol

import jax
import jax.numpy as jnp
import optax

from energynets import domains
from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from energynets.inference.gbi import GBIConfig
from energynets.objectives import base
from energynets.objectives import scores as scores_lib
from energynets.objectives import ssvm
from energynets.objectives.dvn_sources import DEFAULT_SAMPLES
from energynets.objectives.dvn_sources import Adversarial
from energynets.objectives.dvn_sources import Gold
from energynets.objectives.dvn_sources import Inference
from energynets.objectives.dvn_sources import OtherGold
from energynets.objectives.dvn_sources import Random
from energynets.objectives.dvn_sources import SampleContext
from energynets.objectives.dvn_sources import Source
from energynets.objectives.dvn_sources import adversarial_objective
from energynets.objectives.dvn_sources import check_samples
from energynets.objectives.dvn_sources import draw_samples
from energynets.objectives.dvn_sources import value_regression_loss

__all__ = [
  "Adversarial",
  "adversarial_objective",
  "BOX",
  "check_samples",
  "deep_value_network",
  "DEFAULT_SAMPLES",
  "draw_samples",
  "dvn_loss",
  "DVNOptions",
  "Gold",
  "Inference",
  "OtherGold",
  "predicted_value",
  "Random",
  "regression_on_samples",
  "SampleContext",
  "Sampler",
  "Source",
  "value_regression_loss",
]

BOX = domains.Box()


def predicted_value(energy: jax.Array) -> jax.Array:
  """`[B] -> [B]`: the score the network predicts, `σ(−E)`."""
  return jax.nn.sigmoid(-energy)


def regression_on_samples(
  energy_fn: gbi_lib.EnergyFn,
  params,
  encoding,
  y: jax.Array,
  samples: Mapping[str, jax.Array],
  weights: Mapping[Any, float],
  score: scores_lib.Score,
) -> tuple[jax.Array | float, dict[str, jax.Array]]:
  """`Σ_source w · mean ℓ(ȳ_source)` at fixed samples `{name: ȳ}` (0.0 for none), and
  per-source metrics.

  `weights` are keyed by a sample's name or by the `Source` that drew it (`check_samples`).
  Metrics per source: `regression_<name>` (mean ℓ), `score_<name>` (mean target s) and
  `value_<name>` (mean predicted σ(−E)).
  """
  weights = {getattr(key, "name", key): w for key, w in weights.items()}
  total: jax.Array | float = 0.0
  metrics: dict[str, jax.Array] = {}
  for name, y_bar in samples.items():
    target = jax.lax.stop_gradient(score(y_bar, jnp.asarray(y, y_bar.dtype)))
    energy = energy_fn(params, encoding, y_bar)
    loss = jnp.mean(value_regression_loss(energy, target))
    total = total + weights[name] * loss
    metrics[f"regression_{name}"] = loss
    metrics[f"score_{name}"] = jnp.mean(target)
    metrics[f"value_{name}"] = jnp.mean(predicted_value(energy))
  return total, metrics


def dvn_loss(
  energy: Any,
  params,
  x: jax.Array,
  y: jax.Array,
  samples: Mapping[str, jax.Array],
  *,
  sample_weights: Mapping[str, float] | None = None,
  score: scores_lib.Score = scores_lib.soft_f1,
) -> tuple[jax.Array | float, dict[str, jax.Array]]:
  """The DVN loss at given samples `{name: ȳ [B, L]}` (deterministic forward pass; 0.0 for
  none)."""
  weights = sample_weights or {name: 1.0 for name in samples}
  model = protocol.as_energy(energy)
  return regression_on_samples(
    model.energy, params, model.encode(params, x), y, samples, weights, score
  )


class Sampler(Protocol):
  """A DVN sampling scheme: the outputs ȳ whose scores the value network regresses."""

  def __call__(
    self, energy: protocol.Energy, params, encoding, x: jax.Array, y: jax.Array, rng: jax.Array
  ) -> dict[str, jax.Array]:
    """`{name: ȳ}`, each shaped like y, for the energy at `params` (gradients are
    stopped after the call); `encoding` is `energy.encode(params, x)`."""


@dataclasses.dataclass(frozen=True)
class DVNOptions:
  """DVN's options (defaults: Gygli et al.'s mix of sources, the soft F1 score).

  Attributes:
    inference_gbi: `gbi_scan` options of the training-time prediction.
    predict_gbi: `gbi_while` options of test-time prediction (`ssvm.infer`).
    adversarial_gbi: `gbi_scan` options of the adversarial ascent; default
      `inference_gbi`.
    samples: the sample sources, `Source` values (`Inference()`, `Adversarial(...)`,
      `Gold()`, `Random()`, `OtherGold()` or your own); default `DEFAULT_SAMPLES`
      (`Inference(), Adversarial(), Gold()`).
    sample_weights: one weight per source, or per sample of `sampler` in the order it
      returns them (default 1 each).
    sampler: your own sampling scheme, a `Sampler` called instead of the sources
      (`samples` must then be None).
    score: the regression target, a function `(ȳ, y) -> [B]` in [0, 1]
      (`scores.soft_f1`, `scores.soft_iou`, your own).
    init: GBI start at training and test time, `'uniform'` (0.5), `'local'` (the
      energy's local classifier) or `'random'` (U[0,1]: a fresh draw at each training
      step, a fixed key at test time).
    l2: weight of `½‖W‖²` on the energy's weight matrices.
  """

  inference_gbi: GBIConfig | None = None
  predict_gbi: GBIConfig | None = None
  adversarial_gbi: GBIConfig | None = None
  samples: tuple[Source, ...] | None = None
  sample_weights: tuple[float, ...] | None = None
  sampler: Sampler | None = None
  score: scores_lib.Score = scores_lib.soft_f1
  init: str = "uniform"
  l2: float = 0.0

  def __post_init__(self):
    if self.predict_gbi is None:
      raise ValueError("DVN needs predict_gbi (a GBIConfig), its test-time inference")
    if self.sampler is None:
      check_samples(self.samples, self.sample_weights)
      if self.inference_gbi is None:
        raise ValueError(
          "DVN needs inference_gbi (a GBIConfig), the training-time "
          "prediction its samples start from"
        )
    elif self.samples is not None:
      raise ValueError(f"give DVN either samples {self.samples!r} or a sampler, not both")
    for config in (self.inference_gbi, self.adversarial_gbi, self.predict_gbi):
      if config is not None:
        gbi_lib.validate_config(config)
    if not callable(self.score):
      raise TypeError(
        f"score is a function (y_soft, y) -> [B] such as scores.soft_f1, not {self.score!r}"
      )


def _weighted(
  samples: Mapping[str, jax.Array], weights: Sequence[float] | None
) -> dict[str, float]:
  """`{name: weight}` for a sampler's samples; ValueError on a count mismatch."""
  if weights is None:
    return {name: 1.0 for name in samples}
  if len(weights) != len(samples):
    raise ValueError(
      f"DVN sample_weights {tuple(weights)} give {len(weights)} weights "
      f"for the sampler's {len(samples)} samples {tuple(samples)}"
    )
  return dict(zip(samples, (float(w) for w in weights)))


def deep_value_network(
  energy: Any, optimizer: optax.GradientTransformation, *, options: DVNOptions | None = None
) -> base.Objective:
  """The DVN objective (see the module docstring).

  Args:
    energy: an `Energy` on the Box (a SPEN, a `SegmentationEnergy`, a user's own)
      whose `σ(−E)` is the value network.
    optimizer: for all of its parameters.
    options: a `DVNOptions` (required: `inference_gbi` and `predict_gbi` are).

  Returns:
    An `Objective` with state `{"energy": ParamGroup}`; `update`'s metrics are `loss`,
    `grad_norm`, `regression` (the weighted sum before l2) and the per-source metrics
    of `regression_on_samples`.

  Raises:
    TypeError: `options` is not a `DVNOptions`.
  """
  if not isinstance(options, DVNOptions):
    raise TypeError(f"deep_value_network takes options=DVNOptions(...), not {options!r}")
  o = options
  weights = check_samples(o.samples, o.sample_weights) if o.sampler is None else None
  score_fn = o.score
  inference_gbi, predict_gbi = o.inference_gbi, o.predict_gbi
  adversarial_gbi = inference_gbi if o.adversarial_gbi is None else o.adversarial_gbi
  init, l2 = o.init, o.l2
  model = protocol.as_energy(energy)
  energy_fn = model.energy
  if not isinstance(model.domain, domains.Box):
    raise ValueError(
      f"DVN regresses a score of outputs in [0, 1]; {model.name}'s domain "
      f"is {type(model.domain).__name__}, not the Box"
    )
  if init not in model.starts:
    raise ValueError(f"unknown init {init!r}; expected one of {tuple(model.starts)}")

  def loss_fn(params, batch, rng):
    dropout_rng, sample_rng = jax.random.split(rng)
    y = batch["y"]
    encoding = model.encode(params, batch["x"], True, dropout_rng)
    if o.sampler is None:
      drawn, drawn_weights = (
        draw_samples(
          model,
          params,
          encoding,
          batch["x"],
          y,
          sample_rng,
          sources=tuple(weights),
          inference_gbi=inference_gbi,
          adversarial_gbi=adversarial_gbi,
          score=score_fn,
          init=init,
        ),
        weights,
      )
    else:
      drawn = o.sampler(
        model, *jax.lax.stop_gradient((params, encoding)), batch["x"], y, sample_rng
      )
      # Per value, not tree_map: a pytree dict comes back in sorted key order, and the
      # weights follow the sampler's order.
      drawn = {name: jax.lax.stop_gradient(v) for name, v in drawn.items()}
      drawn_weights = _weighted(drawn, o.sample_weights)
    regression, metrics = regression_on_samples(
      energy_fn, params, encoding, y, drawn, drawn_weights, score_fn
    )
    loss = regression + l2 * base.l2_penalty(params) if l2 else regression
    return loss, dict(metrics, regression=regression)

  def init_fn(rng, batch):
    return {
      "energy": base.init_group(
        protocol.init_checked(model, rng, batch["x"], batch["y"]), optimizer
      )
    }

  def update(state, batch, rng):
    group, metrics = base.minimize_step(loss_fn, optimizer, state["energy"], batch, rng)
    return {"energy": group}, metrics

  def predict(state, x):
    return ssvm.infer(model, state["energy"].params, x, predict_gbi, init=init).y

  def init_from(prev_state, rng, batch):
    protocol.check_y(model, batch["x"], batch["y"])
    params = model.continue_from(prev_state, rng, batch["x"], batch["y"])
    return {"energy": base.init_group(params, optimizer)}

  return base.Objective(init_fn, update, predict, init_from)

"""`dvn`: deep value networks (Gygli, Norouzi & Angelova 2017) on the SPEN energy.

A DVN learns an energy whose value `σ(−E(x, ȳ))` predicts the task score `s(ȳ, y)` of
any relaxed output ȳ ∈ [0,1]^L (here the soft F1 of `scores.soft_f1`), by the
cross-entropy of SEAL Eq. 7 / docs/design.md:

    ℓ(ȳ) = −s log σ(−E(x, ȳ)) − (1 − s) log(1 − σ(−E(x, ȳ))),   s = s(ȳ, y) held fixed

(the paper prints `log(1 + σ(−E))` in the second term; that is a typo: with `1 +` the
loss is not a cross-entropy and is not minimized at σ(−E) = s). Prediction is GBI:
`argmin_ȳ E(x, ȳ)`, i.e. the output of highest predicted score.

Training outputs ȳ per step, each a named *sample source* (`SAMPLE_SOURCES`):

- `'inference'`: the current prediction, `gbi_scan` minimizing E for
  `inference_gbi.num_steps` from `init` (uniform 0.5 by default; `'random'`: a fresh
  U[0,1] point each step, as SEAL's public DVN configs);
- `'adversarial'`: from that prediction (or, with `adversarial_init='random'`, from its
  own random point, as SEAL's public code), `gbi_scan` *ascending* ℓ (descending −ℓ)
  for `adversarial_gbi.num_steps`: the output whose score the network currently gets
  most wrong. ℓ depends on ȳ through E and through the score s(ȳ, y); Gygli et al.
  maximize the loss itself, so both paths are followed
  (`adversarial_through_score=False` follows E only, as SEAL's public code does with
  its non-differentiable F1 oracle);
- `'gold'`: y itself (score 1), which anchors the top of the value scale;
- `'random'`: ȳ ~ U[0,1]^L, a sample of the whole box;
- `'other_gold'`: the gold output of the next example in the batch (the batch rolled by
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
`score='soft_iou'`) or a user's own.
"""

import dataclasses
from typing import Any, Mapping, Optional, Protocol, Sequence

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

SAMPLE_SOURCES = ("inference", "adversarial", "gold", "random", "other_gold")
DEFAULT_SAMPLES = ("inference", "adversarial", "gold")
ADVERSARIAL_INITS = ("prediction", protocol.RANDOM)
# The sources drawn without GBI (what needs no energy: SEAL-dynamic's extra samples).
GBI_FREE_SOURCES = ("gold", "random", "other_gold")
BOX = domains.Box()


def value_regression_loss(energy: jax.Array, score: jax.Array) -> jax.Array:
  """`[B] x2 -> [B]`: `−s log σ(−E) − (1−s) log(1−σ(−E))` (log-sigmoid form, stable)."""
  return optax.sigmoid_binary_cross_entropy(-energy, jnp.asarray(score, energy.dtype))


def predicted_value(energy: jax.Array) -> jax.Array:
  """`[B] -> [B]`: the score the network predicts, `σ(−E)`."""
  return jax.nn.sigmoid(-energy)


def check_samples(samples: Optional[Sequence[str]],
                  sample_weights: Optional[Sequence[float]]) -> dict[str, float]:
  """`{source: weight}` in order; ValueError naming a bad source, duplicate or weight."""
  samples = DEFAULT_SAMPLES if samples is None else samples
  if isinstance(samples, str):
    raise TypeError(f"samples must be a sequence of source names, not the string "
                    f"{samples!r}; write ({samples!r},)")
  samples = tuple(samples)
  bad = [s for s in samples if s not in SAMPLE_SOURCES]
  if bad or not samples or len(set(samples)) != len(samples):
    raise ValueError(f"bad DVN samples {samples!r}: expected distinct names from "
                     f"{SAMPLE_SOURCES}")
  weights = (1.0,) * len(samples) if sample_weights is None else tuple(sample_weights)
  if len(weights) != len(samples) or any(w < 0 for w in weights) or not any(weights):
    raise ValueError(f"bad DVN sample_weights {weights!r}: need one non-negative weight per "
                     f"sample source {samples}, not all zero")
  return dict(zip(samples, (float(w) for w in weights)))


def adversarial_objective(energy_fn: gbi_lib.EnergyFn, score: scores_lib.Score,
                          through_score: bool = True) -> gbi_lib.EnergyFn:
  """`(params, (encoding, y), ȳ) -> [B]`: `−ℓ(ȳ)`, which GBI descends to ascend ℓ."""
  def objective(params, inputs, y_bar):
    encoding, gold = inputs
    s = score(y_bar, gold)
    if not through_score:
      s = jax.lax.stop_gradient(s)
    return -value_regression_loss(energy_fn(params, encoding, y_bar), s)
  return objective


def draw_samples(energy: protocol.Energy, params, encoding, x, y: jax.Array,
                 rng: jax.Array, *, sources: Sequence[str],
                 inference_gbi: Optional[GBIConfig], adversarial_gbi: Optional[GBIConfig],
                 score: scores_lib.Score,
                 init: str = "uniform", adversarial_through_score: bool = True,
                 adversarial_init: str = "prediction") -> dict[str, jax.Array]:
  """`{source: ȳ [B, L]}` for each name in `sources`, all without a gradient path.

  Args:
    energy: the `Energy` (its `energy`, `start` and `domain` are used).
    params: the energy's parameters.
    encoding: `energy.encode(params, x)` of the batch.
    x: the batch's inputs (what the starts are shaped from).
    y: `[B, L]` gold labels.
    rng: key of the `'random'` source and of random GBI starts.
    sources: names of `SAMPLE_SOURCES`.
    inference_gbi: `gbi_scan` options of the prediction (`'inference'`, and the start
      of `'adversarial'`); None when `sources` has neither.
    adversarial_gbi: `gbi_scan` options of the ascent on ℓ; None without `'adversarial'`.
    score: the task score `s(ȳ, y) -> [B]`.
    init: start of the prediction's GBI, a start name of the energy: `'uniform'`,
      `'local'` or `'random'` (random points are drawn from `rng`).
    adversarial_through_score: differentiate ℓ through s(ȳ, y) in the ascent.
    adversarial_init: start of the ascent, `'prediction'` (the `'inference'` sample) or
      `'random'` (its own U[0,1] point).

  Returns:
    The samples by source name.
  """
  energy_fn, domain = energy.energy, energy.domain
  params, encoding, y = jax.lax.stop_gradient((params, encoding, y))
  y = jnp.asarray(y, jax.eval_shape(lambda: energy.start(encoding, x, init, rng)).dtype)
  samples = {}
  # Keys of random starts folded from `rng`, which the 'random' source uses as it is (so
  # runs without random starts draw what they drew before these existed).
  start_rng, adversarial_rng = jax.random.fold_in(rng, 1), jax.random.fold_in(rng, 2)
  if "inference" in sources or "adversarial" in sources:
    y_pred, _ = gbi_lib.gbi_scan(energy_fn, params, encoding,
                                 energy.start(encoding, x, init, start_rng), domain,
                                 inference_gbi)
    samples["inference"] = y_pred
    if "adversarial" in sources:
      y_start = (y_pred if adversarial_init == "prediction" else
                 energy.start(encoding, x, protocol.RANDOM, adversarial_rng))
      samples["adversarial"], _ = gbi_lib.gbi_scan(
          adversarial_objective(energy_fn, score, adversarial_through_score), params,
          (encoding, y), y_start, domain, adversarial_gbi)
  if "gold" in sources:
    samples["gold"] = y
  if "random" in sources:
    samples["random"] = energy.start(encoding, x, protocol.RANDOM, rng)
  if "other_gold" in sources:
    if y.shape[0] < 2:
      raise ValueError("the 'other_gold' sample needs a batch of at least 2 examples; got "
                       f"labels of shape {y.shape}")
    samples["other_gold"] = jnp.roll(y, 1, axis=0)
  return {name: jax.lax.stop_gradient(samples[name]) for name in sources}


def regression_on_samples(energy_fn: gbi_lib.EnergyFn, params, encoding, y: jax.Array,
                          samples: Mapping[str, jax.Array], weights: Mapping[str, float],
                          score: scores_lib.Score
                          ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """`Σ_source w · mean ℓ(ȳ_source)` at fixed samples, and per-source metrics.

  Metrics per source: `regression_<source>` (mean ℓ), `score_<source>` (mean target
  s) and `value_<source>` (mean predicted σ(−E)).
  """
  total, metrics = 0.0, {}
  for name, y_bar in samples.items():
    target = jax.lax.stop_gradient(score(y_bar, jnp.asarray(y, y_bar.dtype)))
    energy = energy_fn(params, encoding, y_bar)
    loss = jnp.mean(value_regression_loss(energy, target))
    total = total + weights[name] * loss
    metrics[f"regression_{name}"] = loss
    metrics[f"score_{name}"] = jnp.mean(target)
    metrics[f"value_{name}"] = jnp.mean(predicted_value(energy))
  return total, metrics


def dvn_loss(energy: Any, params, x: jax.Array, y: jax.Array,
             samples: Mapping[str, jax.Array], *,
             sample_weights: Optional[Mapping[str, float]] = None,
             score: str = "soft_f1") -> tuple[jax.Array, dict[str, jax.Array]]:
  """The DVN loss at given samples `{source: ȳ [B, L]}` (deterministic forward pass)."""
  weights = sample_weights or {name: 1.0 for name in samples}
  model = protocol.as_energy(energy)
  return regression_on_samples(model.energy, params, model.encode(params, x), y, samples,
                               weights, scores_lib.get_score(score))


class Sampler(Protocol):
  """A DVN sampling scheme: the outputs ȳ whose scores the value network regresses."""

  def __call__(self, energy: protocol.Energy, params, encoding, x: jax.Array, y: jax.Array,
               rng: jax.Array) -> dict[str, jax.Array]:
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
    samples: sample sources, names of `SAMPLE_SOURCES`; default `DEFAULT_SAMPLES`
      (inference, adversarial, gold).
    sample_weights: one weight per source, or per sample of `sampler` in the order it
      returns them (default 1 each).
    sampler: your own sampling scheme, a `Sampler` called instead of the named sources
      (`samples` must then be None).
    score: the regression target, a name of `scores.SCORES` or a function
      `(ȳ, y) -> [B]` in [0, 1].
    init: GBI start at training and test time, `'uniform'` (0.5), `'local'` (the
      energy's local classifier) or `'random'` (U[0,1]: a fresh draw at each training
      step, a fixed key at test time).
    adversarial_through_score: differentiate the score in the adversarial ascent.
    adversarial_init: start of the adversarial ascent, `'prediction'` or `'random'`.
    l2: weight of `½‖W‖²` on the energy's weight matrices.
  """
  inference_gbi: Optional[GBIConfig] = None
  predict_gbi: Optional[GBIConfig] = None
  adversarial_gbi: Optional[GBIConfig] = None
  samples: Optional[tuple[str, ...]] = None
  sample_weights: Optional[tuple[float, ...]] = None
  sampler: Optional[Sampler] = None
  score: str | scores_lib.Score = "soft_f1"
  init: str = "uniform"
  adversarial_through_score: bool = True
  adversarial_init: str = "prediction"
  l2: float = 0.0

  def __post_init__(self):
    if self.predict_gbi is None:
      raise ValueError("DVN needs predict_gbi (a GBIConfig), its test-time inference")
    if self.sampler is None:
      check_samples(self.samples, self.sample_weights)
      if self.inference_gbi is None:
        raise ValueError("DVN needs inference_gbi (a GBIConfig), the training-time "
                         "prediction its samples start from")
    elif self.samples is not None:
      raise ValueError(f"give DVN either named samples {self.samples!r} or a sampler, "
                       "not both")
    for config in (self.inference_gbi, self.adversarial_gbi, self.predict_gbi):
      if config is not None:
        gbi_lib.validate_config(config)
    scores_lib.get_score(self.score)
    if self.adversarial_init not in ADVERSARIAL_INITS:
      raise ValueError(f"unknown adversarial_init {self.adversarial_init!r}; expected "
                       f"one of {ADVERSARIAL_INITS}")


def _weighted(samples: Mapping[str, jax.Array],
              weights: Optional[Sequence[float]]) -> dict[str, float]:
  """`{name: weight}` for a sampler's samples; ValueError on a count mismatch."""
  if weights is None:
    return {name: 1.0 for name in samples}
  if len(weights) != len(samples):
    raise ValueError(f"DVN sample_weights {tuple(weights)} give {len(weights)} weights "
                     f"for the sampler's {len(samples)} samples {tuple(samples)}")
  return dict(zip(samples, (float(w) for w in weights)))


def deep_value_network(energy: Any, optimizer: optax.GradientTransformation, *,
                       options: Optional[DVNOptions] = None,
                       **flat_options: Any) -> base.Objective:
  """The DVN objective (see the module docstring).

  Args:
    energy: an `Energy` on the Box (a SPEN, a `SegmentationEnergy`, a user's own)
      whose `σ(−E)` is the value network.
    optimizer: for all of its parameters.
    options: a `DVNOptions` (`inference_gbi` and `predict_gbi` are required).
    **flat_options: instead of `options`, its fields as keywords.

  Returns:
    An `Objective` with state `{"energy": ParamGroup}`; `update`'s metrics are `loss`,
    `grad_norm`, `regression` (the weighted sum before l2) and the per-source metrics
    of `regression_on_samples`.
  """
  o = base.resolve_options(DVNOptions, options, flat_options)
  weights = (check_samples(o.samples, o.sample_weights) if o.sampler is None else None)
  score_fn = scores_lib.get_score(o.score)
  inference_gbi, predict_gbi = o.inference_gbi, o.predict_gbi
  adversarial_gbi = inference_gbi if o.adversarial_gbi is None else o.adversarial_gbi
  init, adversarial_init, l2 = o.init, o.adversarial_init, o.l2
  adversarial_through_score = o.adversarial_through_score
  model = protocol.as_energy(energy)
  energy_fn = model.energy
  if not isinstance(model.domain, domains.Box):
    raise ValueError(f"DVN regresses a score of outputs in [0, 1]; {model.name}'s domain "
                     f"is {type(model.domain).__name__}, not the Box")
  if init not in model.starts:
    raise ValueError(f"unknown init {init!r}; expected one of {tuple(model.starts)}")

  def loss_fn(params, batch, rng):
    dropout_rng, sample_rng = jax.random.split(rng)
    y = batch["y"]
    encoding = model.encode(params, batch["x"], True, dropout_rng)
    if o.sampler is None:
      drawn, drawn_weights = draw_samples(
          model, params, encoding, batch["x"], y, sample_rng, sources=tuple(weights),
          inference_gbi=inference_gbi, adversarial_gbi=adversarial_gbi, score=score_fn,
          init=init, adversarial_through_score=adversarial_through_score,
          adversarial_init=adversarial_init), weights
    else:
      drawn = o.sampler(model, *jax.lax.stop_gradient((params, encoding)), batch["x"], y,
                        sample_rng)
      # Per value, not tree_map: a pytree dict comes back in sorted key order, and the
      # weights follow the sampler's order.
      drawn = {name: jax.lax.stop_gradient(v) for name, v in drawn.items()}
      drawn_weights = _weighted(drawn, o.sample_weights)
    regression, metrics = regression_on_samples(energy_fn, params, encoding, y, drawn,
                                                drawn_weights, score_fn)
    loss = regression + l2 * base.l2_penalty(params) if l2 else regression
    return loss, dict(metrics, regression=regression)

  def init_fn(rng, batch):
    return {"energy": base.init_group(
        protocol.init_checked(model, rng, batch["x"], batch["y"]), optimizer)}

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

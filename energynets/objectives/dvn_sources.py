"""`dvn_sources`: where a deep value network's training outputs ȳ come from.

The `Source` protocol and its values (`Inference()`, `Adversarial()`, `Gold()`,
`Random()`, `OtherGold()`), the `SampleContext` they draw from, `draw_samples`, and the
regression loss ℓ that the adversarial source ascends. The objective that regresses the
samples is in `energynets.objectives.dvn`, which re-exports these names.
"""

from collections.abc import Sequence
import dataclasses
from typing import Any
from typing import ClassVar
from typing import NamedTuple
from typing import Protocol

import jax
import jax.numpy as jnp
import optax

from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from energynets.inference.gbi import GBIConfig
from energynets.objectives import scores as scores_lib

__all__ = [
  "Adversarial",
  "adversarial_objective",
  "check_samples",
  "DEFAULT_SAMPLES",
  "draw_samples",
  "Gold",
  "Inference",
  "OtherGold",
  "Random",
  "SampleContext",
  "Source",
  "value_regression_loss",
]


def value_regression_loss(energy: jax.Array, score: jax.Array) -> jax.Array:
  """`[B] x2 -> [B]`: `−s log σ(−E) − (1−s) log(1−σ(−E))` (log-sigmoid form, stable)."""
  return optax.sigmoid_binary_cross_entropy(-energy, jnp.asarray(score, energy.dtype))


class SampleContext(NamedTuple):
  """What a sample source draws from (all without a gradient path).

  Attributes:
    energy: the `Energy` (its `energy`, `start` and `domain`).
    params: the energy's parameters.
    encoding: `energy.encode(params, x)` of the batch.
    x: the batch's inputs (what the starts are shaped from).
    y: `[B, ...]` gold outputs, in the energy's output dtype.
    rng: the batch's sample key (the `Random` source draws from it as it is; other
      sources fold their own keys from it).
    prediction: the GBI prediction from `init` (None when no source needs it).
    adversarial_gbi: `gbi_scan` options of the ascent on ℓ (None when unused).
    score: the task score `s(ȳ, y) -> [B]`.
  """

  energy: protocol.Energy
  params: Any
  encoding: Any
  x: jax.Array
  y: jax.Array
  rng: jax.Array
  prediction: jax.Array | None
  adversarial_gbi: GBIConfig | None
  score: scores_lib.Score


class Source(Protocol):
  """A DVN sample source: one output ȳ per example, regressed onto its score.

  Attributes:
    name: the sample's name (its metrics are `regression_<name>`, ...).
    needs_gbi: whether it runs GBI (SEAL's extra samples take GBI-free sources only).
    needs_prediction: whether it reads `SampleContext.prediction`.
  """

  # Read-only, so that class constants and properties of frozen dataclasses match.
  @property
  def name(self) -> str: ...

  @property
  def needs_gbi(self) -> bool: ...

  @property
  def needs_prediction(self) -> bool: ...

  def __call__(self, context: SampleContext) -> jax.Array:
    """ȳ, shaped like `context.y`."""


@dataclasses.dataclass(frozen=True)
class Inference:
  """The current prediction: `gbi_scan` minimizing E from `init` (DVN's `inference_gbi`)."""

  name: ClassVar[str] = "inference"
  needs_gbi: ClassVar[bool] = True
  needs_prediction: ClassVar[bool] = True

  def __call__(self, context: SampleContext) -> jax.Array:
    """`context.prediction`."""
    assert context.prediction is not None  # drawn since `needs_prediction` is True
    return context.prediction


@dataclasses.dataclass(frozen=True)
class Adversarial:
  """The output whose score the network gets most wrong: `gbi_scan` ascending ℓ.

  Attributes:
    through_score: differentiate ℓ through s(ȳ, y) too (Gygli et al.); False follows E
      only, as SEAL's public code.
    random_start: start from a U[0,1] point of its own (SEAL's public code) instead of
      the prediction.
  """

  through_score: bool = True
  random_start: bool = False
  name: ClassVar[str] = "adversarial"
  needs_gbi: ClassVar[bool] = True

  @property
  def needs_prediction(self) -> bool:
    """Whether it starts from the prediction."""
    return not self.random_start

  def __call__(self, context: SampleContext) -> jax.Array:
    """The final iterate of the ascent (`context.adversarial_gbi`)."""
    c = context
    assert c.adversarial_gbi is not None  # set whenever an `Adversarial` source is drawn
    if self.random_start:
      y_start = c.energy.start(c.encoding, c.x, protocol.RANDOM, jax.random.fold_in(c.rng, 2))
    else:
      assert c.prediction is not None  # drawn since `needs_prediction` is True
      y_start = c.prediction
    y_adv, _ = gbi_lib.gbi_scan(
      adversarial_objective(c.energy.energy, c.score, self.through_score),
      c.params,
      (c.encoding, c.y),
      y_start,
      c.energy.domain,
      c.adversarial_gbi,
    )
    return y_adv


@dataclasses.dataclass(frozen=True)
class Gold:
  """y itself (score 1), which anchors the top of the value scale."""

  name: ClassVar[str] = "gold"
  needs_gbi: ClassVar[bool] = False
  needs_prediction: ClassVar[bool] = False

  def __call__(self, context: SampleContext) -> jax.Array:
    """`context.y`."""
    return context.y


@dataclasses.dataclass(frozen=True)
class Random:
  """ȳ ~ U[0,1]^L, a sample of the whole box."""

  name: ClassVar[str] = "random"
  needs_gbi: ClassVar[bool] = False
  needs_prediction: ClassVar[bool] = False

  def __call__(self, context: SampleContext) -> jax.Array:
    """The energy's random start, drawn from `context.rng`."""
    c = context
    return c.energy.start(c.encoding, c.x, protocol.RANDOM, c.rng)


@dataclasses.dataclass(frozen=True)
class OtherGold:
  """The gold output of the next example in the batch (rolled by one), scored against
  this example's gold (our addition)."""

  name: ClassVar[str] = "other_gold"
  needs_gbi: ClassVar[bool] = False
  needs_prediction: ClassVar[bool] = False

  def __call__(self, context: SampleContext) -> jax.Array:
    """`roll(y, 1)` over the batch; ValueError for a batch of one."""
    y = context.y
    if y.shape[0] < 2:
      raise ValueError(
        f"the OtherGold sample needs a batch of at least 2 examples; got labels of shape {y.shape}"
      )
    return jnp.roll(y, 1, axis=0)


DEFAULT_SAMPLES = (Inference(), Adversarial(), Gold())


def _is_source(value: Any) -> bool:
  return (
    callable(value)
    and isinstance(getattr(value, "name", None), str)
    and hasattr(value, "needs_gbi")
    and hasattr(value, "needs_prediction")
  )


def check_samples(
  samples: Sequence[Source] | None, sample_weights: Sequence[float] | None
) -> dict[Source, float]:
  """`{source: weight}` in order; TypeError for a value that is no `Source`, ValueError
  naming a duplicate name or a bad weight."""
  given: Sequence[Source] = DEFAULT_SAMPLES if samples is None else samples
  if isinstance(given, str) or _is_source(given):
    raise TypeError(f"samples must be a sequence of sources, not {given!r}")
  sources = tuple(given)
  bad = [s for s in sources if not _is_source(s)]
  if bad:
    raise TypeError(
      f"DVN samples are Source values (Inference(), Adversarial(), Gold(), "
      f"Random(), OtherGold(), your own), not {bad!r}"
    )
  names = [s.name for s in sources]
  if not sources or len(set(names)) != len(names):
    raise ValueError(f"bad DVN samples {tuple(names)}: expected distinct sources")
  weights = (1.0,) * len(sources) if sample_weights is None else tuple(sample_weights)
  if len(weights) != len(sources) or any(w < 0 for w in weights) or not any(weights):
    raise ValueError(
      f"bad DVN sample_weights {weights!r}: need one non-negative weight per "
      f"sample source {tuple(names)}, not all zero"
    )
  return dict(zip(sources, (float(w) for w in weights)))


def adversarial_objective(
  energy_fn: gbi_lib.EnergyFn, score: scores_lib.Score, through_score: bool = True
) -> gbi_lib.EnergyFn:
  """`(params, (encoding, y), ȳ) -> [B]`: `−ℓ(ȳ)`, which GBI descends to ascend ℓ."""

  def objective(params, inputs, y_bar):
    encoding, gold = inputs
    s = score(y_bar, gold)
    if not through_score:
      s = jax.lax.stop_gradient(s)
    return -value_regression_loss(energy_fn(params, encoding, y_bar), s)

  return objective


def draw_samples(
  energy: protocol.Energy,
  params,
  encoding,
  x,
  y: jax.Array,
  rng: jax.Array,
  *,
  sources: Sequence[Source],
  inference_gbi: GBIConfig | None,
  adversarial_gbi: GBIConfig | None,
  score: scores_lib.Score,
  init: str = "uniform",
) -> dict[str, jax.Array]:
  """`{source.name: ȳ [B, L]}` for each of `sources`, all without a gradient path.

  Args:
    energy: the `Energy` (its `energy`, `start` and `domain` are used).
    params: the energy's parameters.
    encoding: `energy.encode(params, x)` of the batch.
    x: the batch's inputs (what the starts are shaped from).
    y: `[B, L]` gold labels.
    rng: key of the `Random` source and of random GBI starts.
    sources: `Source` values.
    inference_gbi: `gbi_scan` options of the prediction (`Inference`, and the start of
      `Adversarial`); None when no source needs it.
    adversarial_gbi: `gbi_scan` options of the ascent on ℓ; None without `Adversarial`.
    score: the task score `s(ȳ, y) -> [B]`.
    init: start of the prediction's GBI, a start name of the energy: `'uniform'`,
      `'local'` or `'random'` (random points are drawn from `rng`).

  Returns:
    The samples by source name.
  """
  energy_fn, domain = energy.energy, energy.domain
  params, encoding, y = jax.lax.stop_gradient((params, encoding, y))
  y = jnp.asarray(y, jax.eval_shape(lambda: energy.start(encoding, x, init, rng)).dtype)
  prediction = None
  if any(source.needs_prediction for source in sources):
    assert inference_gbi is not None  # given whenever a source needs the prediction
    # Keys of random starts are folded from `rng`, which the Random source uses as it is.
    prediction, _ = gbi_lib.gbi_scan(
      energy_fn,
      params,
      encoding,
      energy.start(encoding, x, init, jax.random.fold_in(rng, 1)),
      domain,
      inference_gbi,
    )
  context = SampleContext(energy, params, encoding, x, y, rng, prediction, adversarial_gbi, score)
  return {source.name: jax.lax.stop_gradient(source(context)) for source in sources}

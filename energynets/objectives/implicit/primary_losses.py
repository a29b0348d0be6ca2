"""The implicit objective's primary losses: values that carry their own options and
compute L_prim of a batch from the net's logits, the gold output, the energy of any
samples and the task score.

The library's are `ImplicitSSVM`, `ImplicitCD` and `ImplicitDVN`. Any value with a
`loss(ImplicitPrimaryInputs)` method (`ImplicitPrimary`) plugs into `implicit_objective`
the same way. CD's sampled negatives are values too: `StraightThroughNegatives()`,
`RelaxedNegatives(temperature)`, or any object with their `sample` method
(`NegativeSampler`).
"""

from collections.abc import Callable
import dataclasses
from typing import NamedTuple
from typing import Protocol

import jax
import jax.numpy as jnp

from energynets.objectives import base
from energynets.objectives import dvn
from energynets.objectives import outputs
from energynets.objectives import scores as scores_lib
from energynets.objectives import task_losses
from energynets.objectives.seal.blocks import OneMinusScore
from energynets.objectives.seal.blocks import check_margin_cost
from energynets.objectives.seal.blocks import margin_delta


def contrastive_divergence_loss(energies: jax.Array, costs: jax.Array) -> jax.Array:
  """`[B, 1+K] x2 -> [B]`: `−log [exp(−E_0) / Σ_k exp(−E_k + s_k)]`.

  Column 0 is the gold output (its cost s_0 = s(y, y) is 0 for a proper cost, so its
  term in the normalizer is the numerator's).
  """
  logits = -energies + costs
  return jax.nn.logsumexp(logits, axis=-1) + energies[:, 0]


class NegativeSampler(Protocol):
  """How CD's negatives are drawn from the net's output distribution: any object with
  this method. The samples must keep a gradient path to the logits (hard samples without
  one would make ∂_θ L_prim, hence the implicit term, vanish)."""

  def sample(
    self,
    structure: outputs.OutputStructure,
    rng: jax.Array,
    logits: jax.Array,
    num_samples: int,
    y: jax.Array | None = None,
  ) -> jax.Array:
    """`[B, ...] -> [B, K, ...]` samples of `structure`'s distribution at `logits`; `y`,
    where given, marks a sequence's padded tokens."""


@dataclasses.dataclass(frozen=True)
class StraightThroughNegatives:
  """Hard samples (0/1 labels, one-hot tokens) forward, whose gradient is that of the
  link's probabilities (`outputs.straight_through_samples`)."""

  def sample(
    self,
    structure: outputs.OutputStructure,
    rng: jax.Array,
    logits: jax.Array,
    num_samples: int,
    y: jax.Array | None = None,
  ) -> jax.Array:
    """`[B, ...] -> [B, K, ...]` straight-through samples."""
    return outputs.straight_through_samples(structure, rng, logits, num_samples, y)


@dataclasses.dataclass(frozen=True)
class RelaxedNegatives:
  """Relaxed samples: binary concrete `σ((logits + log u − log(1 − u)) / τ)` per label,
  Gumbel-softmax `softmax((logits + g) / τ)` per token.

  Attributes:
    temperature: τ > 0 (small τ: nearly hard samples).
  """

  temperature: float = 0.5

  def __post_init__(self):
    if not self.temperature > 0:
      raise ValueError(f"temperature must be > 0; got {self.temperature}")

  def sample(
    self,
    structure: outputs.OutputStructure,
    rng: jax.Array,
    logits: jax.Array,
    num_samples: int,
    y: jax.Array | None = None,
  ) -> jax.Array:
    """`[B, ...] -> [B, K, ...]` relaxed samples at `temperature`."""
    return structure.relaxed_sample(rng, logits, num_samples, self.temperature, y)


def check_negatives(negatives: NegativeSampler) -> None:
  """TypeError (one line) for anything without a `sample` method (e.g. a name)."""
  if isinstance(negatives, type) or not callable(getattr(negatives, "sample", None)):
    raise TypeError(
      f"negatives must be a sampler value (StraightThroughNegatives(), "
      f"RelaxedNegatives(temperature) or an object with sample(structure, rng, "
      f"logits, num_samples, y)); got {negatives!r}"
    )


def sampled_negatives(
  structure: outputs.OutputStructure,
  rng: jax.Array,
  logits: jax.Array,
  num_samples: int,
  negatives: NegativeSampler = StraightThroughNegatives(),
  y: jax.Array | None = None,
) -> jax.Array:
  """`[B, ...] -> [B, K, ...]`: samples of the net's output distribution drawn by
  `negatives`, with a gradient path; on sequences zero at `y`'s padded tokens, in value
  and gradient."""
  check_negatives(negatives)
  samples = negatives.sample(structure, rng, logits, num_samples, y)
  if y is None:
    return samples
  # The straight-through term carries the softmax's gradient to padded tokens too,
  # where the value is a constant 0: `mask_padding` (a `where`; the identity on
  # multi-label outputs) cuts it.
  return structure.mask_padding(samples, y[:, None])


def bernoulli_negatives(
  rng: jax.Array,
  logits: jax.Array,
  num_samples: int,
  negatives: NegativeSampler = StraightThroughNegatives(),
) -> jax.Array:
  """`sampled_negatives` of multi-label outputs: `Bernoulli(σ(logits))` per label."""
  return sampled_negatives(outputs.MULTILABEL, rng, logits, num_samples, negatives)


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
  `ImplicitCD` and `ImplicitDVN`; any value with this method plugs into
  `implicit_objective(..., primary=...)`.
  """

  def loss(self, inputs: ImplicitPrimaryInputs) -> tuple[jax.Array, base.Metrics]:
    """L_prim of one batch (without the energy's L2) and its metrics."""


@dataclasses.dataclass(frozen=True)
class ImplicitSSVM:
  """The SSVM primary loss: `mean [Δ(ȳ_A, y) − E(x, ȳ_A) + E(x, y)]_+`, ȳ_A = σ(A_θ(x)).

  The network's output is the margin's ŷ (the paper's "ȳ replaced by the prediction of
  the inference net").

  Attributes:
    margin_cost: Δ, a `task_losses` surrogate value (default `L1()`, as InfNet) or
      `OneMinusScore()`, 1 − the task score.
  """

  margin_cost: task_losses.Surrogate | OneMinusScore = task_losses.L1()

  def __post_init__(self):
    check_margin_cost(self.margin_cost)

  def loss(self, inputs: ImplicitPrimaryInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged hinge and its active fraction."""
    y_net, y = inputs.y_net, inputs.y
    delta = margin_delta(
      y_net, y, self.margin_cost, inputs.score, real_y_hat=inputs.structure.mask_padding(y_net, y)
    )
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
    negatives: how the samples are drawn with a gradient path (`NegativeSampler`):
      `StraightThroughNegatives()` (hard samples forward, the probabilities' gradient
      backward) or `RelaxedNegatives(temperature)` (binary-concrete / Gumbel-softmax).
    include_net_output: add σ(A_θ(x)) itself as one more negative.
  """

  num_samples: int = 10
  negatives: NegativeSampler = StraightThroughNegatives()
  include_net_output: bool = False

  def __post_init__(self):
    check_negatives(self.negatives)
    if not isinstance(self.num_samples, int) or self.num_samples < 1:
      raise ValueError(f"the CD primary loss needs num_samples >= 1; got {self.num_samples}")

  def loss(self, inputs: ImplicitPrimaryInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged CD loss (no further metrics)."""
    y, score = inputs.y, inputs.score
    samples = [
      y[:, None],
      sampled_negatives(
        inputs.structure, inputs.rng, inputs.logits, self.num_samples, self.negatives, y
      ),
    ]
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

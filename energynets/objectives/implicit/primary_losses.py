"""The implicit objective's primary losses: values that carry their own options and
compute L_prim of a batch from the net's logits, the gold output, the energy of any
samples and the task score.

The library's are `ImplicitSSVM` (`'ssvm'`), `ImplicitCD` (`'cd'`) and `ImplicitDVN`
(`'dvn'`); `get_primary_loss` maps those names, for configs. Any value with a
`loss(ImplicitPrimaryInputs)` method (`ImplicitPrimary`) plugs into `implicit_objective`
the same way.
"""

import dataclasses
from typing import Any, Callable, NamedTuple, Optional, Protocol

import jax
import jax.numpy as jnp

from energynets.objectives import base
from energynets.objectives import dvn
from energynets.objectives import outputs
from energynets.objectives import scores as scores_lib
from energynets.objectives import task_losses
from energynets.objectives.seal.loss_net_objectives import MARGIN_COSTS

NEGATIVES = ("straight_through", "relaxed")
PRIMARY_KIND = "primary loss"  # what the name-lookup errors call one


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
    margin_cost: Δ, one of `seal.MARGIN_COSTS`: a `task_losses.SURROGATES` name
      (default `'l1'`, as InfNet) or `'score'`, 1 − the task score.
  """
  margin_cost: str = "l1"

  def __post_init__(self):
    base.check_choice(self.margin_cost, MARGIN_COSTS, "margin cost")

  def loss(self, inputs: ImplicitPrimaryInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged hinge and its active fraction."""
    y_net, y = inputs.y_net, inputs.y
    if self.margin_cost == "score":
      delta = 1.0 - inputs.score(y_net, y)
    else:
      delta = task_losses.task_loss(inputs.structure.mask_padding(y_net, y), y,
                                    self.margin_cost)
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
    base.check_choice(self.negatives, NEGATIVES, "negatives")
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
  return base.build_named(PRIMARY_KIND, PRIMARIES, name, options)


"""Output structures: what a feed-forward objective needs to know about its outputs.

The feed-forward family (inference networks, SEAL, implicit training) and the SSVM's
task loss are written once against an `OutputStructure`, so that the same objective
trains a multi-label classifier (independent labels on the Box, `[B, L]`) and a
sequence tagger (one point of the simplex per token, `[B, T, L]`, padded):

| structure    | y                   | link      | local loss         | samples        |
|--------------|---------------------|-----------|--------------------|----------------|
| `MULTILABEL` | `[B, L]` in {0,1}   | σ / label | BCE over labels    | Bernoulli      |
| `SEQUENCE`   | `[B, T, L]` one-hot | softmax   | CE over real tokens| categorical    |

Padding (sequences). Gold tags of padded positions are all-zero rows (a point no
simplex holds), so the gold itself says which positions are real. `mask_padding(ŷ, y)`
sets ŷ to the gold there (zero), which makes every sum over positions (the task loss
Δ, soft scores, sample log-probabilities) count real tokens only: without it an L1 Δ
would charge 2 per padded token whatever the prediction, a constant that changes no
argmin but inflates the margins, and samples would add noise terms to the NCE's
log P_N. The energies themselves ignore padding (`SequenceEnergy`). A multi-label y
has no padding (an all-zero y is an example with no labels), so there it is the
identity.

`for_energy(energy)` picks the structure from the energy's domain (an energy on the
Simplex is a sequence), so objectives need no extra option.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from energynets import domains
from energynets.energies import protocol
from energynets.objectives import base

__all__ = [
  "bernoulli_log_prob",
  "bernoulli_samples",
  "binary_concrete_samples",
  "categorical_log_prob",
  "categorical_samples",
  "for_domain",
  "for_energy",
  "gumbel_softmax_samples",
  "mask_token_padding",
  "MULTILABEL",
  "OutputStructure",
  "real_positions",
  "SEQUENCE",
  "straight_through_samples",
  "token_cross_entropy",
]


def token_cross_entropy(logits: jax.Array, y: jax.Array) -> jax.Array:
  """`[B, T, L] x2 -> scalar`: softmax CE per token, averaged over real tokens (rows of
  `y` that are one-hot; all-zero rows are padding)."""
  per_token = -jnp.sum(y * jax.nn.log_softmax(logits, axis=-1), axis=-1)
  num_tokens = jnp.maximum(jnp.sum(y), 1.0)
  return jnp.sum(per_token) / num_tokens


class OutputStructure(NamedTuple):
  """The output-specific pieces of a feed-forward objective (see the module docstring).

  Attributes:
    name: `'multilabel'` or `'sequence'`.
    domain: the relaxation (`Box` or `Simplex`).
    link: `logits -> probabilities` in the domain.
    local_loss: `(logits, y) -> scalar`, the nets' local cross-entropy.
    mask_padding: `(y_hat, y) -> y_hat` with padded positions set to the gold's.
    sample: `(rng, logits [B, ...], num_samples, y) -> [B, K, ...]` hard samples of the
      link's distribution (floats), zero at `y`'s padding.
    log_prob: `(logits [B, ...], ys [B, S, ...]) -> [B, S]`, the log-probability of
      each hard sample under the link's distribution (padded rows of ys add 0).
    relaxed_sample: `(rng, logits, num_samples, temperature, y) -> [B, K, ...]`, a
      differentiable relaxation of `sample` (binary concrete / Gumbel-softmax).
  """

  name: str
  domain: domains.Domain
  link: Callable[[jax.Array], jax.Array]
  local_loss: Callable[[jax.Array, jax.Array], jax.Array]
  mask_padding: Callable[[jax.Array, jax.Array], jax.Array]
  sample: Callable[..., jax.Array]
  log_prob: Callable[[jax.Array, jax.Array], jax.Array]
  relaxed_sample: Callable[..., jax.Array]


def _per_sample(logits: jax.Array, num_samples: int) -> tuple[int, ...]:
  """The shape `[B, K, ...]` of K draws per example."""
  return (logits.shape[0], num_samples) + logits.shape[1:]


def _sum_non_sample(v: jax.Array) -> jax.Array:
  """`[B, S, ...] -> [B, S]`."""
  return jnp.sum(v, axis=tuple(range(2, v.ndim)))


# ------------------------------------------------------------------------------ multi-label


def bernoulli_samples(rng, logits, num_samples, y=None):
  """`[B, L] -> [B, K, L]`: K independent draws `y ~ Bernoulli(σ(logits))`, as floats."""
  del y  # no padding
  draws = jax.random.bernoulli(rng, jax.nn.sigmoid(logits), (num_samples,) + logits.shape)
  return jnp.moveaxis(draws, 0, 1).astype(logits.dtype)


def bernoulli_log_prob(logits, ys):
  """`logits [B, L], ys [B, S, L] -> [B, S]`: `log Π_i P(y_i | σ(logits_i))` per sample."""
  logits = jnp.broadcast_to(logits[:, None], ys.shape)
  return -_sum_non_sample(optax.sigmoid_binary_cross_entropy(logits, ys))


def binary_concrete_samples(rng, logits, num_samples, temperature, y=None):
  """`[B, L] -> [B, K, L]`: `σ((logits + log u − log(1 − u)) / τ)`, u ~ U(0, 1)."""
  del y
  u = jax.random.uniform(
    rng, _per_sample(logits, num_samples), logits.dtype, minval=1e-6, maxval=1.0 - 1e-6
  )
  return jax.nn.sigmoid((logits[:, None] + jnp.log(u) - jnp.log1p(-u)) / temperature)


MULTILABEL = OutputStructure(
  name="multilabel",
  domain=domains.Box(),
  link=jax.nn.sigmoid,
  local_loss=base.multilabel_bce,
  mask_padding=lambda y_hat, y: y_hat,
  sample=bernoulli_samples,
  log_prob=bernoulli_log_prob,
  relaxed_sample=binary_concrete_samples,
)


# -------------------------------------------------------------------------------- sequence


def real_positions(y: jax.Array) -> jax.Array:
  """`[B, T, L] -> [B, T, 1]` bool: True on real tokens (gold rows that are not all zero)."""
  return jnp.sum(y, axis=-1, keepdims=True) > 0


def mask_token_padding(y_hat: jax.Array, y: jax.Array) -> jax.Array:
  return jnp.where(real_positions(y), y_hat, y.astype(y_hat.dtype))


def _mask_samples(samples: jax.Array, y) -> jax.Array:
  """`[B, K, T, L]` samples, zero at `y [B, T, L]`'s padded tokens."""
  if y is None:
    return samples
  return jnp.where(real_positions(y)[:, None], samples, 0.0)


def categorical_samples(rng, logits, num_samples, y=None):
  """`[B, T, L] -> [B, K, T, L]`: one-hot draws per token from `softmax(logits)`."""
  draws = jax.random.categorical(
    rng, logits[:, None], axis=-1, shape=_per_sample(logits, num_samples)[:-1]
  )
  samples = jax.nn.one_hot(draws, logits.shape[-1], dtype=logits.dtype)
  return _mask_samples(samples, y)


def categorical_log_prob(logits, ys):
  """`logits [B, T, L], ys [B, S, T, L] -> [B, S]`: Σ_t log softmax(logits_t)[ys_t]."""
  return _sum_non_sample(ys * jax.nn.log_softmax(logits, axis=-1)[:, None])


def gumbel_softmax_samples(rng, logits, num_samples, temperature, y=None):
  """`[B, T, L] -> [B, K, T, L]`: `softmax((logits + g) / τ)` per token, g ~ Gumbel(0, 1)."""
  g = jax.random.gumbel(rng, _per_sample(logits, num_samples), logits.dtype)
  return _mask_samples(jax.nn.softmax((logits[:, None] + g) / temperature, axis=-1), y)


SEQUENCE = OutputStructure(
  name="sequence",
  domain=domains.Simplex(),
  link=lambda logits: jax.nn.softmax(logits, axis=-1),
  local_loss=token_cross_entropy,
  mask_padding=mask_token_padding,
  sample=categorical_samples,
  log_prob=categorical_log_prob,
  relaxed_sample=gumbel_softmax_samples,
)


def straight_through_samples(structure: OutputStructure, rng, logits, num_samples, y=None):
  """Hard samples (`structure.sample`) whose gradient is that of the link's probabilities."""
  probs = structure.link(logits)[:, None]
  hard = jax.lax.stop_gradient(structure.sample(rng, logits, num_samples, y))
  return hard + (probs - jax.lax.stop_gradient(probs))  # exactly `hard` forward


def for_domain(domain) -> OutputStructure:
  """`SEQUENCE` for the Simplex, `MULTILABEL` otherwise (Box)."""
  return SEQUENCE if isinstance(domain, domains.Simplex) else MULTILABEL


def for_energy(energy) -> OutputStructure:
  """The structure of the outputs `energy` scores, from its domain (`for_domain`)."""
  return for_domain(protocol.as_energy(energy).domain)

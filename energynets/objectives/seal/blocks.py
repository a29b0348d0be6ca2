"""SEAL's building blocks: pure functions of energies, samples and the task-net.

Public for tests and for the sequence and image variants; the loss-net objectives
(`loss_net_objectives`) and the training step (`training`) are built from them.
"""

from collections.abc import Sequence
import dataclasses
from typing import Any
from typing import cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets import domains
from energynets.inference import gbi as gbi_lib
from energynets.inference.gbi import GBIConfig
from energynets.objectives import base
from energynets.objectives import outputs
from energynets.objectives import scores as scores_lib
from energynets.objectives import task_losses

BOX = domains.Box()


def nce_ranking_loss(energies: jax.Array, log_noise: jax.Array) -> jax.Array:
  """`[B, 1+K] x2 -> [B]`: `−log softmax(s)_0` with `s = −E − log P_N`.

  Column 0 is the gold output y⁰ and is part of the normalizer `Σ_{k=0..K}`.
  """
  ranking_scores = -energies - log_noise
  return jax.nn.logsumexp(ranking_scores, axis=-1) - ranking_scores[:, 0]


bernoulli_log_prob = outputs.bernoulli_log_prob
bernoulli_samples = outputs.bernoulli_samples


def gaussian_perturbations(
  rng: jax.Array, logits: jax.Array, num_samples: int, std: float, link=jax.nn.sigmoid
) -> jax.Array:
  """`[B, ...] -> [B, 1+K, ...]`: `link(logits)` then K draws `link(logits + std·ε)`,
  ε ~ N(0, I) (σ per label; a per-token softmax for sequences)."""
  noise = jax.random.normal(rng, (logits.shape[0], num_samples) + logits.shape[1:], logits.dtype)
  perturbed = link(logits[:, None] + std * noise)
  return jnp.concatenate([link(logits)[:, None], perturbed], axis=1)


def sample_energies(energy_fn: gbi_lib.EnergyFn, params, encoding, ys: jax.Array) -> jax.Array:
  """`ys [B, S, L] -> [B, S]`: the energy of every sample, the encoding computed once."""
  return jax.vmap(lambda y: energy_fn(params, encoding, y), in_axes=1, out_axes=1)(ys)


@dataclasses.dataclass(frozen=True)
class OneMinusScore:
  """A margin cost that is no surrogate of `task_losses`: Δ = 1 − s(ŷ, y), with s the
  task score the objective is given (its `score`, e.g. soft F1)."""


def check_margin_cost(cost: Any) -> None:
  """Refuses a margin cost that is neither `OneMinusScore()` nor a surrogate value.

  Raises:
    TypeError: one line naming what was given.
  """
  if not isinstance(cost, OneMinusScore):
    task_losses.check_surrogate(cost)


def margin_delta(
  y_hat: jax.Array,
  y: jax.Array,
  cost: task_losses.Surrogate | OneMinusScore,
  score: scores_lib.Score,
  real_y_hat: jax.Array | None = None,
) -> jax.Array:
  """`[B, ...] x2 -> [B]`: Δ(ŷ, y) of a margin cost.

  Args:
    y_hat: the prediction ŷ.
    y: the gold output.
    cost: a `task_losses` surrogate value, or `OneMinusScore()` (`1 − score(ŷ, y)`).
    score: the task score `(ŷ, y) -> [B]`.
    real_y_hat: ŷ with padded positions masked (sequences), which a surrogate sums
      over instead of `y_hat`; None: `y_hat`.

  Returns:
    Δ per example.
  """
  if isinstance(cost, OneMinusScore):
    return 1.0 - score(y_hat, y)
  return task_losses.task_loss(y_hat if real_y_hat is None else real_y_hat, y, cost)


def loss_augmented_output(
  energy_fn: gbi_lib.EnergyFn,
  params,
  encoding,
  y: jax.Array,
  config: GBIConfig,
  cost_fn,
  domain=BOX,
) -> jax.Array:
  """`[B, L]`: ŷ ≈ argmin E − Δ(·, y) by `gbi_scan` over `domain` from its uniform
  point, with no gradient path."""

  def augmented(p, inputs, y_bar):
    enc, gold = inputs
    return energy_fn(p, enc, y_bar) - cost_fn(y_bar, gold)

  params, encoding, y = jax.lax.stop_gradient((params, encoding, y))
  y0 = domain.uniform_init(y.shape, y.dtype)
  y_hat, _ = gbi_lib.gbi_scan(augmented, params, (encoding, y), y0, domain, config)
  return jax.lax.stop_gradient(y_hat)


def first_present(state, keys: Sequence[str]) -> str | None:
  """The first of `keys` that `state` has, else None (the group a stage carries)."""
  return next((k for k in keys if k in state), None)


def task_net_logits(
  task_net: nn.Module, params, x: jax.Array, rng: jax.Array | None = None
) -> jax.Array:
  """The task-net's logits; with `rng`, in training mode (dropout)."""
  # Without `mutable`, `apply` returns the output alone, not `(output, state)`.
  if rng is None:
    return cast(jax.Array, task_net.apply({"params": params}, x, train=False))
  return cast(jax.Array, task_net.apply({"params": params}, x, train=True, rngs={"dropout": rng}))


def frozen_group(params) -> base.ParamGroup:
  """`params` as a group that never moves: an empty optimizer state."""
  return base.ParamGroup(params, optax.EmptyState())

"""`dmf`: the deep mean-field baseline of SPEN (Belanger & McCallum 2016, §7.1, A.3).

A fully connected pairwise CRF `P(y|x) ∝ exp(u(x)ᵀy + ½ yᵀW(x)y)` over y ∈ {0,1}^L
(see `energynets.inference.meanfield` for why a symmetric zero-diagonal coupling W
and unary logits u capture every pairwise binary CRF), whose prediction is
`num_iters` (paper: 5) parallel mean-field sweeps from μ = 0.5 (Algorithm 1), unrolled
into a network.

Unaries. `u(x)` are the logits of the MLP trained by `local_bce`: the paper's local
potentials "are identical to the MLP classifier" and are clamped "to reduce
overfitting"; without that pretraining its accuracy was about half. The stage is
started with `init_from(local_state, ...)`; `train_unary=True` gives the optional
fine-tune-all stage. A clamped MLP runs deterministically (`train=False`, no
dropout): it is a fixed feature extractor, and train and test then see the same u.

Pairwise. The paper only says the factors are data-dependent and that the DMF has
"L2 parameters" (we read L², the superscript lost in the text) that overfit on
Bookmarks and Delicious. The general affine map from
H features f(x) to couplings, `W(x) = M_0 + T f(x)` with `T: R^H -> R^{L×L}`, costs
L²(H + 1) parameters (4.0M for Bibtex with H = L = 159; 46M with the raw 1836-dim x).
We factor T through `rank` learned L×L bases,

    W(x) = sym(M_0 + Σ_{k=1..K} a_k(x) M_k),   a(x) = P f(x) + c,   P [H, K],

i.e. T has rank K. This keeps the paper's order of L² parameters ((K+1) L² + K(H+1),
127k for Bibtex with K = 4, of which (K+1)·L(L−1)/2 + K(H+1) = 63k are effective since
only the symmetric off-diagonal part matters), and K = 0 is a data-independent CRF.
`rank=None` is the full-rank map (the bases are indexed by the features themselves:
a(x) = f(x), K = H), cheap enough for Bibtex on probabilities (4.0M).

Features f(x) for the coefficients: the MLP's last hidden layer is what the paper's
feature network would give; `Hidden()` uses it (`MLP(..., return_features=True)`,
so it needs a unary net with that argument). `"probs"` (default, any unary net) uses
σ(u(x)), the clamped MLP's label probabilities: an invertible function of the logits,
which are the L-dimensional projection of the last hidden layer that the head reads
(all of it only when the hidden width is at most L), and bounded in [0,1], so the
couplings' scale stays stable however confident the MLP is, and H = L keeps the
coefficient head small (the hidden layer of the 1024-wide MLP costs H = 1024).
`Logits()` uses u(x) itself and `RawInput()` the raw input (a linear feature network, as the
paper uses for Yeast).

All of M_0, M_k start at zero, so W(x) = 0 at the start and the DMF begins exactly at
the MLP's predictions; P starts random (LeCun normal), c at zero.

Loss. The paper trains "end-to-end [by] maximum likelihood". The exact CRF likelihood
needs log Z, which is intractable for L = 159; what is maximized, as in deep
mean-field/unrolled-inference training (Domke 2013, "marginal-based" losses), is the
likelihood of the gold labels under the factorized distribution that the unrolled
network outputs after `num_iters` sweeps: per-label BCE between the marginals μ_T
and y, summed over labels, averaged over examples, with the gradient through the
unroll. `l2 · ½‖·‖²` applies to M_0, M_k and P (not c), and to the unary MLP's weight
matrices when it is trained.
"""

import dataclasses
from typing import Any
from typing import Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets.inference import meanfield
from energynets.objectives import base
from energynets.objectives import scores

__all__ = [
  "COUPLING_METRIC_EXAMPLES",
  "deep_mean_field",
  "Features",
  "Hidden",
  "Logits",
  "mean_abs_coupling",
  "num_pairwise_params",
  "pairwise_l2",
  "PairwiseCouplings",
  "Probs",
  "RawInput",
]


class Features(Protocol):
  """The input f(x) of the coupling coefficients: how the unary net's pass gives them."""

  def __call__(
    self, unary_net: nn.Module, net_params, x: jax.Array, **apply_kwargs: Any
  ) -> tuple[jax.Array, jax.Array]:
    """`(unary logits [B, L], features [B, H])` from one pass of `unary_net`."""


@dataclasses.dataclass(frozen=True)
class Probs:
  """σ(u(x)), the clamped MLP's label probabilities (the default)."""

  def __call__(self, unary_net, net_params, x, **apply_kwargs):
    """`(u, σ(u))`."""
    unary = unary_net.apply({"params": net_params}, x, **apply_kwargs)
    return unary, jax.nn.sigmoid(unary)


@dataclasses.dataclass(frozen=True)
class Logits:
  """u(x), the unary logits themselves."""

  def __call__(self, unary_net, net_params, x, **apply_kwargs):
    """`(u, u)`."""
    unary = unary_net.apply({"params": net_params}, x, **apply_kwargs)
    return unary, unary


@dataclasses.dataclass(frozen=True)
class Hidden:
  """The unary MLP's last hidden layer (a net called with `return_features=True`)."""

  def __call__(self, unary_net, net_params, x, **apply_kwargs):
    """`unary_net(x, return_features=True)`."""
    return unary_net.apply({"params": net_params}, x, return_features=True, **apply_kwargs)


@dataclasses.dataclass(frozen=True)
class RawInput:
  """x itself (a linear feature network, as the paper uses for Yeast)."""

  def __call__(self, unary_net, net_params, x, **apply_kwargs):
    """`(u, x)`."""
    return unary_net.apply({"params": net_params}, x, **apply_kwargs), x


class PairwiseCouplings(nn.Module):
  """`features [B, H] -> W [B, L, L]`, symmetric with a zero diagonal.

  `rank=K >= 1`: W = sym(M_0 + Σ_k a_k M_k), a = P f + c. `rank=0`: W = sym(M_0).
  `rank=None`: W = sym(M_0 + Σ_h f_h M_h) (full-rank affine map of the features).
  `factors` gives the same W unformed (`meanfield.LowRankCoupling`), which is what
  mean field runs on.
  """

  num_labels: int
  rank: int | None = 4

  def __call__(self, features: jax.Array) -> jax.Array:
    return self.factors(features).dense()

  @nn.compact
  def factors(self, features: jax.Array) -> meanfield.LowRankCoupling:
    """W as `LowRankCoupling(bases [M_0; M_1..], coefficients [1, a(x)])`."""
    num_labels = self.num_labels
    shape = (num_labels, num_labels)
    coupling = self.param("coupling", nn.initializers.zeros, shape)  # M_0
    ones = jnp.ones((features.shape[0], 1), coupling.dtype)
    if self.rank == 0:
      return meanfield.LowRankCoupling(coupling[None], ones)
    if self.rank is None:
      coefficients = features
    else:
      kernel = self.param(
        "coefficients", nn.initializers.lecun_normal(), (features.shape[-1], self.rank)
      )
      bias = self.param("coefficient_bias", nn.initializers.zeros, (self.rank,))
      coefficients = features @ kernel + bias
    bases = self.param("bases", nn.initializers.zeros, (coefficients.shape[-1],) + shape)
    return meanfield.LowRankCoupling(
      jnp.concatenate([coupling[None], bases], axis=0),
      jnp.concatenate([ones, coefficients.astype(coupling.dtype)], axis=-1),
    )


def num_pairwise_params(num_labels: int, num_features: int, rank: int | None) -> tuple[int, int]:
  """(stored, effective) parameter counts of `PairwiseCouplings`.

  Effective counts only the symmetric off-diagonal part of each L×L matrix, the part
  that reaches W.
  """
  full, sym = num_labels**2, num_labels * (num_labels - 1) // 2
  if rank is None:
    num_bases, head = num_features, 0
  else:
    num_bases, head = rank, rank * (num_features + 1) if rank else 0
  return (num_bases + 1) * full + head, (num_bases + 1) * sym + head


def pairwise_l2(params) -> jax.Array | float:
  """½‖·‖² over the couplings, bases and coefficient kernel (not the coefficient bias)."""
  return 0.5 * sum(jnp.sum(jnp.square(v)) for k, v in params.items() if k != "coefficient_bias")


# `mean_abs_coupling` is logged from this many examples of each batch: W is [B, L, L],
# which the factored mean field never forms (on Delicious, 128 × 983² floats).
COUPLING_METRIC_EXAMPLES = 8


def mean_abs_coupling(coupling: jax.Array) -> jax.Array:
  """Mean |W_ij| over the off-diagonal entries of every example."""
  num_labels = coupling.shape[-1]
  return jnp.sum(jnp.abs(coupling)) / (coupling.shape[0] * num_labels * (num_labels - 1))


def deep_mean_field(
  unary_net: nn.Module,
  optimizer: optax.GradientTransformation,
  *,
  num_iters: int = 5,
  rank: int | None = 4,
  l2: float = 0.0,
  train_unary: bool = False,
  features: Features = Probs(),
  damping: float = 0.0,
  sequential: bool = False,
  score: scores.Score | None = None,
  score_weight: float = 0.0,
) -> base.Objective:
  """The DMF objective.

  Args:
    unary_net: the `local_bce` network, `net(x) -> [B, L]` logits (the unaries).
    optimizer: for the pairwise parameters (and the unary ones if `train_unary`).
    num_iters: unrolled mean-field sweeps, at training and at prediction (paper: 5).
    rank: number K of learned L×L coupling bases; 0 for data-independent couplings,
      None for the full-rank affine map of the features (see module doc).
    l2: weight of `½‖·‖²` on the pairwise parameters (and unary weight matrices when
      trained).
    train_unary: False clamps the pretrained unary MLP (the paper's setting); True
      trains it too (a fine-tuning stage).
    features: the coefficients' input, a `Features` value: `Probs()` σ(u), `Logits()` u,
      `Hidden()` (the unary MLP's last hidden layer), `RawInput()` x, or your own.
    damping, sequential: passed to `meanfield.mean_field_logits`.
    score, score_weight: as `local_bce`'s: the loss is `BCE − score_weight · mean_b
      score(σ(η), y)` on the mean-field logits η (e.g. `scores.soft_f1`, with unaries
      pretrained on the same loss).

  Returns:
    An `Objective` whose state is `{"net": ParamGroup, "pairwise": ParamGroup}`; the
    "net" group has the structure of `local_bce`'s, with an empty optimizer state
    when clamped. `init_from` accepts a `local_bce` or a `dmf` state.
  """
  if not callable(features):
    raise TypeError(f"DMF features are a value such as Probs() or Hidden(), not {features!r}")
  if rank is not None and rank < 0:
    raise ValueError(f"rank must be >= 0 or None, got {rank}")
  meanfield.validate_options(num_iters=num_iters, damping=damping)
  scores.check_weight(score, score_weight)

  def pairwise_net(num_labels):
    return PairwiseCouplings(num_labels, rank)

  def unary_and_features(net_params, x, rng=None, train=False):
    """-> (unary logits [B, L], coefficient features [B, H])."""
    kwargs = (
      {"train": True, "rngs": {"dropout": rng}} if train and train_unary else {"train": False}
    )
    return features(unary_net, net_params, x, **kwargs)

  def forward(params, x, rng=None, train=False):
    """-> (final mean-field logits [B, L], coupling W as `LowRankCoupling`)."""
    unary, feats = unary_and_features(params["net"], x, rng, train)
    coupling = pairwise_net(unary.shape[-1]).apply(
      {"params": params["pairwise"]}, feats, method="factors"
    )
    eta = meanfield.mean_field_logits(
      unary, coupling, num_iters=num_iters, damping=damping, sequential=sequential
    )
    return eta, coupling

  def init_pairwise(rng, net_params, x):
    unary, feats = unary_and_features(net_params, x)
    return pairwise_net(unary.shape[-1]).init(rng, feats)["params"]

  def net_group(params):
    return (
      base.init_group(params, optimizer)
      if train_unary
      else base.ParamGroup(params, optax.EmptyState())
    )

  def init(rng, batch):
    """From scratch (the paper found this about half as accurate as `init_from`)."""
    net_rng, pair_rng = jax.random.split(rng)
    net_params = unary_net.init({"params": net_rng}, batch["x"])["params"]
    return {
      "net": net_group(net_params),
      "pairwise": base.init_group(init_pairwise(pair_rng, net_params, batch["x"]), optimizer),
    }

  def init_from(prev_state, rng, batch):
    """Unaries from a `local_bce` (or `dmf`) state; pairwise from a `dmf` state or new."""
    net_params = prev_state["net"].params
    if "pairwise" in prev_state:
      pair_params = prev_state["pairwise"].params
    else:
      pair_params = init_pairwise(rng, net_params, batch["x"])
    return {"net": net_group(net_params), "pairwise": base.init_group(pair_params, optimizer)}

  def loss_fn(trained, clamped, batch, rng):
    params = {**clamped, **trained}
    eta, coupling = forward(params, batch["x"], rng, train=True)
    bce = base.multilabel_bce(eta, batch["y"])
    loss = bce
    if l2:
      penalty = pairwise_l2(params["pairwise"])
      if train_unary:
        penalty = penalty + base.l2_penalty(params["net"])
      loss = loss + l2 * penalty
    sample = coupling._replace(coefficients=coupling.coefficients[:COUPLING_METRIC_EXAMPLES])
    metrics = {
      "bce": bce,
      "mean_abs_coupling": mean_abs_coupling(jax.lax.stop_gradient(sample.dense())),
    }
    if score is not None:
      metrics["score"] = jnp.mean(score(jax.nn.sigmoid(eta), batch["y"]))
      loss = loss - score_weight * metrics["score"]
    return loss, metrics

  def update(state, batch, rng):
    names = ("net", "pairwise") if train_unary else ("pairwise",)
    trained = {k: state[k].params for k in names}
    clamped = {k: state[k].params for k in state if k not in names}
    metrics, grads = base.metrics_and_grads(loss_fn, trained, clamped, batch, rng)
    new_state = dict(state)
    for k in names:
      new_state[k] = base.apply_gradients(state[k], grads[k], optimizer)
    return new_state, metrics

  def predict(state, x):
    params = {k: group.params for k, group in state.items()}
    return jax.nn.sigmoid(forward(params, x)[0])

  return base.Objective(init, update, predict, init_from)

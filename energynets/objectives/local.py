"""`local`: the feed-forward baselines trained with a per-output loss alone.

BR (one logistic regression per label: an `MLP` with no hidden layer) and the MLP
(the SPEN feature network with a linear local head) are both `local_bce` with a
different network. The loss is binary cross-entropy summed over labels and averaged
over examples, plus `l2 · ½‖W‖²` on weight matrices; with `l2 = 1 / (C · N_train)`
this is exactly scikit-learn's `LogisticRegression(C)` objective divided by `C · N`.

`local_token_ce` is the sequence-labeling counterpart (the BiLSTM-CE baseline of the
sequence papers): softmax cross-entropy per token against one-hot tags `y [B, T, L]`,
averaged over real tokens (padding has all-zero tag rows and contributes nothing);
prediction is the per-token softmax.

`local_bce(score=..., score_weight=w)` subtracts `w · mean s(σ(F(x)), y)`, a
differentiable task score (`scores.soft_iou`, `scores.soft_f1`), from the BCE: the
task-net loss of SEAL's regression loss-net (BCE − w·σ(−E)) with the loss-net replaced
by the exact score it is trained to regress onto. It measures what a perfect loss-net
could give a task-net, so a SEAL row can be read against it.

`local_squared_error` is the regression counterpart (the feed-forward CNN denoiser of
E2E-SPEN §6.1.3): mean squared error over the output's non-batch axes (per-pixel MSE,
the quantity PSNR is a log of), averaged over examples; prediction is the net's output.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets.objectives import base
from energynets.objectives import outputs
from energynets.objectives import scores

token_cross_entropy = outputs.token_cross_entropy


def local_bce(
  net: nn.Module,
  optimizer: optax.GradientTransformation,
  *,
  l2: float = 0.0,
  score: scores.Score | None = None,
  score_weight: float = 0.0,
) -> base.Objective:
  """Per-label BCE on the logits of `net(x) -> [B, L]`; prediction is `sigmoid`.

  Batches are `{"x": [B, ...], "y": [B, L]}` with y in {0, 1}; the state is
  `{"net": ParamGroup}`; `l2` weighs `½‖W‖²` on the net's weight matrices. With `score`
  (`[B, ...] x2 -> [B]`, e.g. `scores.soft_iou`) the loss is
  `BCE − score_weight · mean_b score(σ(logits), y)`.
  """
  scores.check_weight(score, score_weight)
  if score is None:
    return _local(net, optimizer, "bce", base.multilabel_bce, jax.nn.sigmoid, l2)

  def bce_minus_score(logits, labels):
    bce = base.multilabel_bce(logits, labels)
    value = jnp.mean(score(jax.nn.sigmoid(logits), labels))
    return bce - score_weight * value, {"bce": bce, "score": value}

  return _local(net, optimizer, "loss", bce_minus_score, jax.nn.sigmoid, l2)


def local_token_ce(
  net: nn.Module, optimizer: optax.GradientTransformation, *, l2: float = 0.0
) -> base.Objective:
  """Token cross-entropy on the logits of `net(x) -> [B, T, L]`; prediction is the
  per-token `softmax`."""
  return _local(net, optimizer, "token_ce", outputs.SEQUENCE.local_loss, outputs.SEQUENCE.link, l2)


def local_squared_error(
  net: nn.Module, optimizer: optax.GradientTransformation, *, l2: float = 0.0
) -> base.Objective:
  """Per-example mean squared error of `net(x) -> [B, ...]` against `y [B, ...]`;
  prediction is `net(x)`. State `{"net": ParamGroup}`."""

  def mse(outputs, targets):
    axes = tuple(range(1, outputs.ndim))
    return jnp.mean(jnp.mean(jnp.square(outputs - targets), axis=axes))

  return _local(net, optimizer, "mse", mse, lambda outputs: outputs, l2)


def _local(net, optimizer, name, loss, link, l2) -> base.Objective:
  """`loss(net(x), y)` (+ l2) minimized by `optimizer`; prediction `link(net(x))`.
  `loss` returns the value, or `(value, metrics)` to log more than `{name: value}`."""

  def init(rng, batch):
    params = net.init({"params": rng}, batch["x"])["params"]
    return {"net": base.init_group(params, optimizer)}

  def loss_fn(params, batch, rng):
    outputs = net.apply({"params": params}, batch["x"], train=True, rngs={"dropout": rng})
    value = loss(outputs, batch["y"])
    value, metrics = value if isinstance(value, tuple) else (value, {})
    total = value + l2 * base.l2_penalty(params) if l2 else value
    return total, {name: value, **metrics}

  def update(state, batch, rng):
    group, metrics = base.minimize_step(loss_fn, optimizer, state["net"], batch, rng)
    return {"net": group}, metrics

  def predict(state, x):
    return link(net.apply({"params": state["net"].params}, x, train=False))

  def init_from(prev_state, rng, batch):
    del rng, batch  # a continued stage keeps the previous parameters
    return {"net": base.init_group(prev_state["net"].params, optimizer)}

  return base.Objective(init, update, predict, init_from)

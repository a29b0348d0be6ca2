"""`local`: the feed-forward baselines trained with a per-label loss alone.

BR (one logistic regression per label: an `MLP` with no hidden layer) and the MLP
(the SPEN feature network with a linear local head) are both this objective with a
different network. The loss is binary cross-entropy summed over labels and averaged
over examples, plus `l2 · ½‖W‖²` on weight matrices; with `l2 = 1 / (C · N_train)`
this is exactly scikit-learn's `LogisticRegression(C)` objective divided by `C · N`.
"""

import flax.linen as nn
import jax
import optax

from energynets.objectives import base


def local_bce(net: nn.Module, optimizer: optax.GradientTransformation, *,
              l2: float = 0.0) -> base.Objective:
  """Per-label BCE on the logits of `net(x) -> [B, L]`; prediction is `sigmoid`."""

  def init(rng, batch):
    params = net.init({"params": rng}, batch["x"])["params"]
    return {"net": base.init_group(params, optimizer)}

  def loss_fn(params, batch, rng):
    logits = net.apply({"params": params}, batch["x"], train=True, rngs={"dropout": rng})
    bce = base.multilabel_bce(logits, batch["y"])
    loss = bce + l2 * base.l2_penalty(params) if l2 else bce
    return loss, {"bce": bce}

  def update(state, batch, rng):
    group, metrics = base.minimize_step(loss_fn, optimizer, state["net"], batch, rng)
    return {"net": group}, metrics

  def predict(state, x):
    return jax.nn.sigmoid(net.apply({"params": state["net"].params}, x, train=False))

  def init_from(prev_state, rng, batch):
    del rng, batch  # a continued stage keeps the previous parameters
    return {"net": base.init_group(prev_state["net"].params, optimizer)}

  return base.Objective(init, update, predict, init_from)

"""The ablation "ranking loss without a loss-net" (SEAL §5): `task_net_ranking`."""

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets.objectives import base
from energynets.objectives import outputs
from energynets.objectives.seal.blocks import first_present
from energynets.objectives.seal.blocks import nce_ranking_loss
from energynets.objectives.seal.blocks import task_net_logits


def task_net_ranking(
  task_net: nn.Module,
  optimizer: optax.GradientTransformation,
  *,
  num_samples: int = 10,
  ranking_weight: float = 1.0,
  bce_weight: float = 1.0,
  output: outputs.OutputStructure = outputs.MULTILABEL,
) -> base.Objective:
  """NCE ranking with `s(y) = Σ_i log P(y_i | x; Φ)` on the task-net itself, + λ2·BCE.

  Per example: `−log [P_Φ(y⁰) / Σ_{k=0..K} P_Φ(yᵏ)]`, y⁰ the gold output, yᵏ ~ P_Φ
  Bernoulli samples of the task-net's current output (drawn without a gradient path;
  the gradient flows through every log P_Φ(yᵏ)). Loss:
  `ranking_weight · mean ranking + bce_weight · BCE`. State `{"task_net": ParamGroup}`;
  `init_from` carries a `local_bce` or SEAL task-net. Prediction `σ(F(x))`.
  `output`: the `outputs.OutputStructure` (`outputs.SEQUENCE`: per-token categorical
  samples and softmax, token CE in place of BCE).
  """
  if not isinstance(output, outputs.OutputStructure):
    raise TypeError(
      f"output is an outputs.OutputStructure (outputs.MULTILABEL, outputs.SEQUENCE); got {output!r}"
    )
  structure = output
  if not isinstance(num_samples, int) or num_samples < 1:
    raise ValueError(f"num_samples must be a positive integer; got {num_samples!r}")
  if ranking_weight < 0 or bce_weight < 0:
    raise ValueError(
      f"ranking_weight and bce_weight must be non-negative; got {ranking_weight}, {bce_weight}"
    )

  def loss_fn(params, batch, rng):
    dropout_rng, sample_rng = jax.random.split(rng)
    logits = task_net_logits(task_net, params, batch["x"], dropout_rng)
    y = jnp.asarray(batch["y"], logits.dtype)
    noise = structure.sample(sample_rng, jax.lax.stop_gradient(logits), num_samples, y)
    log_p = structure.log_prob(logits, jnp.concatenate([y[:, None], noise], axis=1))
    ranking = jnp.mean(nce_ranking_loss(-log_p, jnp.zeros_like(log_p)))
    bce = structure.local_loss(logits, y)
    return ranking_weight * ranking + bce_weight * bce, {"ranking": ranking, "bce": bce}

  def init(rng, batch):
    params = flax.core.unfreeze(task_net.init({"params": rng}, batch["x"])["params"])
    return {"task_net": base.init_group(params, optimizer)}

  def update(state, batch, rng):
    group, metrics = base.minimize_step(loss_fn, optimizer, state["task_net"], batch, rng)
    return {"task_net": group}, metrics

  def predict(state, x):
    return structure.link(task_net_logits(task_net, state["task_net"].params, x))

  def init_from(prev_state, rng, batch):
    reference = init(rng, batch)["task_net"].params
    key = first_present(prev_state, ("task_net", "net"))
    if key:
      params = base.carried(
        prev_state[key].params, reference, f"the previous {key!r} params into the task-net"
      )
      return {"task_net": base.init_group(params, optimizer)}
    raise ValueError(
      f"cannot continue from a state with keys {sorted(prev_state)}; expected 'task_net' or 'net'"
    )

  return base.Objective(init, update, predict, init_from)

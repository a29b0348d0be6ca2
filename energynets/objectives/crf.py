"""`crf`: a linear-chain CRF on a feature network's per-token scores (the CRF baseline of
the sequence papers: BiLSTM features, exact likelihood).

    p(y | x) ∝ exp( Σ_t u_t(x)[y_t] + Σ_t W[y_{t−1}, y_t] + s[y_1] + e[y_T] )

with unaries `u = net(x) [B, T, L]` (any module on the packed token array, e.g. the
BiLSTM tagger's logits), transitions W `[L, L]` and start / end scores s, e. Training
minimizes the exact negative log-likelihood averaged over sentences (forward algorithm,
`energynets.inference.crf`); prediction is the Viterbi path as one-hot tags `[B, T, L]`
(the MAP sequence, not per-token argmax of marginals: the two differ and the CRF
papers decode with Viterbi). The real tokens are the rows of x whose word id is not 0.

State `{"net": ParamGroup}` with params `{"tagger": ..., "crf": {"transitions", "start",
"end"}}`, so a token-CE stage (`local_token_ce`, state `{"net": ...}`) can seed the
tagger (`init_from`); the CRF scores then start at zero.
"""

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets.inference import crf as crf_lib
from energynets.objectives import base
from energynets.tokens import unpack_tokens


def _tags_and_mask(x: jax.Array, y: jax.Array):
  return jnp.argmax(y, axis=-1).astype(jnp.int32), unpack_tokens(x)["mask"]


def crf_objective(
  net: nn.Module, num_tags: int, optimizer: optax.GradientTransformation, *, l2: float = 0.0
) -> base.Objective:
  """The CRF objective on `net(x, train=...) -> unaries [B, T, num_tags]`."""

  def fresh_crf():
    zeros = lambda *shape: jnp.zeros(shape, jnp.float32)
    return {
      "transitions": zeros(num_tags, num_tags),
      "start": zeros(num_tags),
      "end": zeros(num_tags),
    }

  def make_state(tagger_params):
    params = {"tagger": flax.core.unfreeze(tagger_params), "crf": fresh_crf()}
    return {"net": base.init_group(params, optimizer)}

  def init(rng, batch):
    return make_state(net.init({"params": rng}, batch["x"])["params"])

  def loss_fn(params, batch, rng):
    unaries = net.apply({"params": params["tagger"]}, batch["x"], train=True, rngs={"dropout": rng})
    tags, mask = _tags_and_mask(batch["x"], batch["y"])
    c = params["crf"]
    nll = -jnp.mean(
      crf_lib.crf_log_likelihood(unaries, c["transitions"], tags, mask, c["start"], c["end"])
    )
    total = nll + l2 * base.l2_penalty(params["tagger"]) if l2 else nll
    return total, {"nll": nll}

  def update(state, batch, rng):
    group, metrics = base.minimize_step(loss_fn, optimizer, state["net"], batch, rng)
    return {"net": group}, metrics

  def predict(state, x):
    params = state["net"].params
    unaries = net.apply({"params": params["tagger"]}, x, train=False)
    c = params["crf"]
    tags, _ = crf_lib.viterbi_decode(
      unaries, c["transitions"], unpack_tokens(x)["mask"], c["start"], c["end"]
    )
    return jax.nn.one_hot(tags, num_tags, dtype=unaries.dtype)

  def init_from(prev_state, rng, batch):
    reference = jax.eval_shape(lambda: net.init({"params": rng}, batch["x"])["params"])
    prev = prev_state["net"].params
    if "tagger" in prev:  # a CRF state: keep everything
      params = base.carried(prev, {"tagger": reference, "crf": fresh_crf()}, "a CRF state")
      return {"net": base.init_group(params, optimizer)}
    return make_state(base.carried(prev, reference, "a token-CE tagger into the CRF"))

  return base.Objective(init, update, predict, init_from)

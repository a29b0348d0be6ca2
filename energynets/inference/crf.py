"""Exact inference in a linear-chain CRF: forward algorithm, forward-backward, Viterbi.

This is the chain-CRF baseline for sequence labeling and the exact oracle for the
pairwise part of the sequence energy of Tu, Pang & Gimpel (2020), eq. (7): with a
one-hot y, `−E(x, y) = Σ_t U_{y_t}ᵀ b(x, t) + Σ_t W[y_{t−1}, y_t]`, which is exactly the
score below with `unaries[b, t] = U b(x, t)` and `transitions = W`.

Model. For one row with length n ≥ 1 and tags y ∈ {0..L−1}^n,

    score(y) = start[y_0] + Σ_{t<n} unaries[t, y_t]
               + Σ_{1≤t<n} transitions[y_{t−1}, y_t] + end[y_{n−1}],
    log P(y) = score(y) − log Z,   log Z = logsumexp_y score(y).

Conventions shared by every function here.
- Shapes: `unaries [B, T, L]`, `transitions [L, L]` (row = previous tag, column = next
  tag), `start`, `end` `[L]` (None means zeros), `mask [B, T]` bool, True on real tokens,
  which must be a prefix of each row (the data loader guarantees it; it is not checked
  because that would need a host sync under jit). Positions with mask False have no
  effect on any result, whatever their unaries or tags.
- A length-0 row is allowed and is the empty sequence: it has exactly one labeling,
  the empty one, with score 0, so log Z = 0, score = 0, log-likelihood = 0, marginals
  all 0, Viterbi tags all 0 with score 0. We choose this over raising because a
  sharded step pads a ragged final batch with empty rows, and an error there could
  only be raised on the host; a zero contribution is the correct limit of the sum
  over rows.
- Every recursion is a `lax.scan` over time on time-major arrays, in log space
  (logsumexp / max), with static shapes: each function jits and vmaps as is (the
  sequence score needs no recursion and is a gather).
"""

import jax
from jax import lax
import jax.numpy as jnp


def _check(unaries, transitions, mask, start, end, tags=None):
  """Validates shapes statically (at trace time) and fills default start/end."""
  if unaries.ndim != 3:
    raise ValueError(f"unaries must be [B, T, L]; got shape {unaries.shape}")
  b, t, num_tags = unaries.shape
  if t == 0:
    raise ValueError(
      "unaries has T = 0 time steps; a CRF needs T >= 1 "
      "(empty rows are expressed with mask, not with T = 0)"
    )
  if transitions.shape != (num_tags, num_tags):
    raise ValueError(
      f"transitions must be [L, L] = {(num_tags, num_tags)} to match "
      f"unaries {unaries.shape}; got {transitions.shape}"
    )
  if mask.shape != (b, t):
    raise ValueError(f"mask must be [B, T] = {(b, t)} to match unaries; got {mask.shape}")
  if tags is not None and tags.shape != (b, t):
    raise ValueError(f"tags must be [B, T] = {(b, t)} to match unaries; got {tags.shape}")
  dtype = jnp.result_type(unaries, transitions)
  filled = []
  for name, vec in (("start", start), ("end", end)):
    if vec is None:
      vec = jnp.zeros((num_tags,), dtype)
    elif vec.shape != (num_tags,):
      raise ValueError(f"{name} must be [L] = ({num_tags},); got {vec.shape}")
    filled.append(vec)
  return filled[0], filled[1], mask.astype(bool)


def _time_major(x):
  return jnp.swapaxes(x, 0, 1)


def _forward(unaries, transitions, mask, start):
  """Forward log-messages `alpha [T, B, L]` (log-sum of scores of prefixes ending in a tag).

  At padded positions the previous alpha is carried unchanged, so `alpha[-1]` is the
  alpha of each row's last real token: log Z needs no gather by length.
  """
  u = _time_major(unaries)
  m = _time_major(mask)

  def step(alpha, xs):
    u_t, m_t = xs
    new = jax.nn.logsumexp(alpha[:, :, None] + transitions[None], axis=1) + u_t
    alpha = jnp.where(m_t[:, None], new, alpha)
    return alpha, alpha

  alpha0 = start[None] + u[0]
  _, rest = lax.scan(step, alpha0, (u[1:], m[1:]))
  return jnp.concatenate([alpha0[None], rest], axis=0)


def _backward(unaries, transitions, mask, end):
  """Backward log-messages `beta [T, B, L]` (log-sum of scores of suffixes after a tag).

  `beta_t = end` at each row's last real token; at padded positions it is also `end`
  (reset whenever the next token is padding), which is harmless as they are masked.
  """
  u = _time_major(unaries)
  m = _time_major(mask)
  beta_last = jnp.broadcast_to(end, u.shape[1:])

  def step(beta_next, xs):
    u_next, m_next = xs
    new = jax.nn.logsumexp(transitions[None] + (u_next + beta_next)[:, None, :], axis=2)
    beta = jnp.where(m_next[:, None], new, beta_last)
    return beta, beta

  _, rest = lax.scan(step, beta_last, (u[1:], m[1:]), reverse=True)
  return jnp.concatenate([rest, beta_last[None]], axis=0)


def _log_partition(alpha, end, mask):
  """log Z per row from the forward messages; 0 for empty rows (see module doc)."""
  log_z = jax.nn.logsumexp(alpha[-1] + end, axis=-1)
  return jnp.where(mask.any(axis=-1), log_z, 0.0)


def crf_log_partition(
  unaries: jax.Array,
  transitions: jax.Array,
  mask: jax.Array,
  start: jax.Array | None = None,
  end: jax.Array | None = None,
) -> jax.Array:
  """log Z `[B]` by the forward algorithm; differentiable (its unary gradient is the marginals)."""
  start, end, mask = _check(unaries, transitions, mask, start, end)
  return _log_partition(_forward(unaries, transitions, mask, start), end, mask)


def crf_sequence_score(
  unaries: jax.Array,
  transitions: jax.Array,
  tags: jax.Array,
  mask: jax.Array,
  start: jax.Array | None = None,
  end: jax.Array | None = None,
) -> jax.Array:
  """Unnormalized log-score `[B]` of the given tags; tags at padded positions are ignored.

  No recursion is needed, so this is a vectorized gather rather than a scan. Padded
  tags are replaced by 0 before gathering so that any value (e.g. −1 as an ignore id)
  is safe.
  """
  start, end, mask = _check(unaries, transitions, mask, start, end, tags)
  tags = jnp.where(mask, tags, 0).astype(jnp.int32)
  maskf = mask.astype(unaries.dtype)
  unary = jnp.take_along_axis(unaries, tags[..., None], axis=-1)[..., 0]
  # A transition into t counts only when t is real (then t−1 is real too: prefix mask).
  pair = transitions[tags[:, :-1], tags[:, 1:]]
  lengths = mask.sum(axis=-1)
  nonempty = (lengths > 0).astype(unaries.dtype)
  last = jnp.take_along_axis(tags, jnp.maximum(lengths - 1, 0)[:, None], axis=1)[:, 0]
  return (
    (unary * maskf).sum(-1)
    + (pair * maskf[:, 1:]).sum(-1)
    + nonempty * (start[tags[:, 0]] + end[last])
  )


def crf_log_likelihood(
  unaries: jax.Array,
  transitions: jax.Array,
  tags: jax.Array,
  mask: jax.Array,
  start: jax.Array | None = None,
  end: jax.Array | None = None,
) -> jax.Array:
  """log P(tags | x) `[B]` = score − log Z; the CRF training loss is its negative mean."""
  score = crf_sequence_score(unaries, transitions, tags, mask, start, end)
  return score - crf_log_partition(unaries, transitions, mask, start, end)


def crf_marginals(
  unaries: jax.Array,
  transitions: jax.Array,
  mask: jax.Array,
  start: jax.Array | None = None,
  end: jax.Array | None = None,
) -> jax.Array:
  """Per-token posteriors P(y_t = j | x) `[B, T, L]` by forward-backward; 0 at padding.

  An explicit backward recursion (rather than `grad` of log Z) keeps the identity
  ∂NLL/∂unaries = marginals − one-hot(gold) an independent check in the tests.
  """
  start, end, mask = _check(unaries, transitions, mask, start, end)
  alpha = _forward(unaries, transitions, mask, start)
  beta = _backward(unaries, transitions, mask, end)
  # Σ_j exp(alpha_t + beta_t)[j] = Z at every t, so a per-position softmax gives the
  # posteriors without subtracting a global log Z: the rows sum to 1 exactly, and the
  # float32 cancellation error stays that of the per-position differences rather than
  # eps·|log Z|. It is finite on empty rows too, so the where() discards no NaN.
  post = jax.nn.softmax(_time_major(alpha + beta), axis=-1)
  return jnp.where(mask[..., None], post, 0.0)


def viterbi_decode(
  unaries: jax.Array,
  transitions: jax.Array,
  mask: jax.Array,
  start: jax.Array | None = None,
  end: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Highest-scoring tags `[B, T]` int32 (0 at padding) and their score `[B]`.

  Padded positions get identity back-pointers and carry the max-messages unchanged,
  so the backtrace from the final position passes through padding onto each row's
  last real tag without any gather by length.
  """
  start, end, mask = _check(unaries, transitions, mask, start, end)
  u = _time_major(unaries)
  m = _time_major(mask)
  num_tags = unaries.shape[-1]
  identity = jnp.broadcast_to(jnp.arange(num_tags, dtype=jnp.int32), u.shape[1:])

  def forward(delta, xs):
    u_t, m_t = xs
    cand = delta[:, :, None] + transitions[None]
    best_prev = jnp.argmax(cand, axis=1).astype(jnp.int32)
    new = jnp.max(cand, axis=1) + u_t
    return (jnp.where(m_t[:, None], new, delta), jnp.where(m_t[:, None], best_prev, identity))

  delta, backptr = lax.scan(forward, start[None] + u[0], (u[1:], m[1:]))
  final = delta + end
  last_tag = jnp.argmax(final, axis=-1).astype(jnp.int32)
  score = jnp.max(final, axis=-1)

  def backward(tag, bp_t):
    prev = jnp.take_along_axis(bp_t, tag[:, None], axis=1)[:, 0]
    return prev, prev

  _, earlier = lax.scan(backward, last_tag, backptr, reverse=True)
  tags = _time_major(jnp.concatenate([earlier, last_tag[None]], axis=0))
  nonempty = mask.any(axis=-1)
  return jnp.where(mask, tags, 0), jnp.where(nonempty, score, 0.0)

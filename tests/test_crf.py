"""Tests of the linear-chain CRF (energynets/inference/crf.py).

Oracles: brute-force enumeration of all L^n tag sequences of each row (log Z,
marginals, argmax and its score, normalization), the identity
∂NLL/∂unaries = marginals − one-hot(gold) (the marginals come from an explicit
backward recursion, the gradient from autodiff of the forward one), and invariance
to anything at padded positions.
"""

import itertools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from energynets.inference import crf

log_partition = jax.jit(crf.crf_log_partition)
marginals = jax.jit(crf.crf_marginals)
viterbi = jax.jit(crf.viterbi_decode)
sequence_score = jax.jit(crf.crf_sequence_score)
log_likelihood = jax.jit(crf.crf_log_likelihood)


def random_problem(seed, batch, steps, tags, with_boundary=True, dtype=np.float64):
  """Random CRF with distinct row lengths (row 0 full, row 1 length 1) and junk padding."""
  rs = np.random.RandomState(seed)
  lengths = rs.randint(1, steps + 1, size=batch)
  lengths[0], lengths[1] = steps, 1
  mask = np.arange(steps)[None] < lengths[:, None]
  args = dict(
    unaries=jnp.asarray(2.0 * rs.randn(batch, steps, tags), dtype),
    transitions=jnp.asarray(rs.randn(tags, tags), dtype),
    mask=jnp.asarray(mask),
    start=jnp.asarray(rs.randn(tags), dtype) if with_boundary else None,
    end=jnp.asarray(rs.randn(tags), dtype) if with_boundary else None,
  )
  gold = jnp.asarray(rs.randint(0, tags, size=(batch, steps)), jnp.int32)
  return args, gold


def brute_force(unaries, transitions, mask, start=None, end=None):
  """Per row: (log Z, marginals [T, L], best tags [T] (0 at padding), best score)."""
  unaries, transitions, mask = map(np.asarray, (unaries, transitions, mask))
  num_tags = transitions.shape[0]
  start = np.zeros(num_tags) if start is None else np.asarray(start)
  end = np.zeros(num_tags) if end is None else np.asarray(end)
  out = []
  for u, m in zip(unaries, mask):
    n = int(m.sum())
    seqs = np.array(list(itertools.product(range(num_tags), repeat=n)), int).reshape(-1, n)
    scores = np.array(
      [
        start[y[0]] + u[np.arange(n), y].sum() + transitions[y[:-1], y[1:]].sum() + end[y[-1]]
        if n
        else 0.0
        for y in seqs
      ]
    )
    log_z = np.logaddexp.reduce(scores)
    probs = np.exp(scores - log_z)
    marg = np.zeros(u.shape)
    for y, p in zip(seqs, probs):
      marg[np.arange(n), y] += p
    best = np.zeros(u.shape[0], int)
    best[:n] = seqs[scores.argmax()]
    out.append((log_z, marg, best, scores.max()))
  return [np.array(v) for v in zip(*out)]


CASES = (
  ("t5_l3", 5, 3, True),
  ("t4_l4", 4, 4, True),
  ("t5_l2_noboundary", 5, 2, False),
  ("t1_l4", 1, 4, True),
)


class CRFExactTest(parameterized.TestCase):
  @parameterized.named_parameters(*CASES)
  def test_matches_enumeration(self, steps, tags, with_boundary):
    with jax.enable_x64(True):
      args, _ = random_problem(0, 6, steps, tags, with_boundary)
      log_z, marg, best, best_score = brute_force(**args)
      np.testing.assert_allclose(log_partition(**args), log_z, rtol=1e-12)
      np.testing.assert_allclose(marginals(**args), marg, atol=1e-12)
      tags_hat, score_hat = viterbi(**args)
      self.assertEqual(tags_hat.dtype, jnp.int32)
      np.testing.assert_array_equal(tags_hat, best)
      np.testing.assert_allclose(score_hat, best_score, rtol=1e-12)
      # Viterbi's score is the score of the tags it returns.
      np.testing.assert_allclose(sequence_score(tags=tags_hat, **args), score_hat, rtol=1e-12)

  @parameterized.named_parameters(*CASES)
  def test_likelihood_normalizes(self, steps, tags, with_boundary):
    """Σ_y exp(log P(y)) = 1 per row, summing over every labeling of its real tokens."""
    with jax.enable_x64(True):
      args, _ = random_problem(1, 4, steps, tags, with_boundary)
      rs = np.random.RandomState(1)
      mask = np.asarray(args["mask"])
      seqs = np.array(list(itertools.product(range(tags), repeat=steps)), np.int32)  # [K, T]
      # Row b's labelings are the sequences with an all-zero padded suffix (L^n of them);
      # that suffix is then overwritten with junk, which must be ignored.
      keep = np.stack([np.all(seqs[:, m.sum() :] == 0, axis=1) for m in mask])  # [B, K]
      junk = rs.randint(-1, tags, size=(len(mask),) + seqs.shape)
      gold = np.where(mask[:, None], seqs[None], junk)  # [B, K, T]
      rows = {
        k: (v if k in ("transitions", "start", "end") else v[:, None]) for k, v in args.items()
      }
      ll = jax.jit(
        jax.vmap(crf.crf_log_likelihood, in_axes=(1, None, 1, 1, None, None), out_axes=1)
      )(
        jnp.broadcast_to(rows["unaries"], gold.shape + (tags,)),
        rows["transitions"],
        jnp.asarray(gold),
        jnp.broadcast_to(rows["mask"], gold.shape),
        rows["start"],
        rows["end"],
      )
      total = np.where(keep, np.exp(np.asarray(ll)), 0.0).sum(axis=1)
      np.testing.assert_allclose(total, 1.0, rtol=1e-12)
      self.assertTrue(np.all(np.asarray(ll) <= 1e-12))

  def test_nll_gradient_is_marginals_minus_gold(self):
    with jax.enable_x64(True):
      args, gold = random_problem(2, 5, 5, 3)
      unaries = args.pop("unaries")

      @jax.jit
      def nll(u):
        return -crf.crf_log_likelihood(u, tags=gold, **args).sum()

      grad = jax.jit(jax.grad(nll))(unaries)
      onehot = jax.nn.one_hot(gold, 3) * args["mask"][..., None]
      np.testing.assert_allclose(grad, marginals(unaries, **args) - onehot, atol=1e-12)

  def test_padding_has_no_effect(self):
    """Changing unaries and gold tags at padded positions changes no output, exactly."""
    args, gold = random_problem(3, 6, 5, 4, dtype=np.float32)
    pad = ~np.asarray(args["mask"])
    rs = np.random.RandomState(3)
    other = dict(args, unaries=jnp.where(pad[..., None], 1e3 * rs.randn(6, 5, 4), args["unaries"]))
    other_gold = jnp.where(pad, rs.randint(-5, 9, size=gold.shape), gold)
    for fn in (log_partition, marginals, viterbi):
      for x, y in zip(jax.tree.leaves(fn(**args)), jax.tree.leaves(fn(**other))):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(
      log_likelihood(tags=gold, **args), log_likelihood(tags=other_gold, **other)
    )
    np.testing.assert_array_equal(np.asarray(marginals(**args))[pad], 0.0)
    np.testing.assert_array_equal(np.asarray(viterbi(**args)[0])[pad], 0)

  def test_empty_rows_are_the_empty_sequence(self):
    args, gold = random_problem(4, 3, 4, 3, dtype=np.float32)
    args["mask"] = args["mask"].at[2].set(False)
    np.testing.assert_array_equal(log_partition(**args)[2], 0.0)
    np.testing.assert_array_equal(log_likelihood(tags=gold, **args)[2], 0.0)
    np.testing.assert_array_equal(marginals(**args)[2], 0.0)
    tags_hat, score_hat = viterbi(**args)
    np.testing.assert_array_equal(tags_hat[2], 0)
    self.assertEqual(float(score_hat[2]), 0.0)
    grad = jax.jit(
      jax.grad(
        lambda u: crf.crf_log_likelihood(
          u, args["transitions"], gold, args["mask"], args["start"], args["end"]
        ).sum()
      )
    )(args["unaries"])
    self.assertTrue(np.all(np.isfinite(grad)))
    np.testing.assert_array_equal(grad[2], 0.0)


class CRFTransformTest(absltest.TestCase):
  def test_jit_and_vmap_agree(self):
    args, gold = random_problem(5, 4, 5, 3, dtype=np.float32)
    u, tr, m, s, e = (args[k] for k in ("unaries", "transitions", "mask", "start", "end"))

    def everything(u, m, g, tr):
      return (
        crf.crf_log_partition(u, tr, m, s, e),
        crf.crf_log_likelihood(u, tr, g, m, s, e),
        crf.crf_marginals(u, tr, m, s, e),
        crf.viterbi_decode(u, tr, m, s, e),
      )

    batched = jax.jit(everything)(u, m, gold, tr)
    # vmap over rows (each a batch of one), and over a stack of transition matrices.
    per_row = jax.jit(
      jax.vmap(
        lambda u1, m1, g1: jax.tree.map(
          lambda x: x[0], everything(u1[None], m1[None], g1[None], tr)
        )
      )
    )(u, m, gold)
    stacked = jax.jit(jax.vmap(lambda t: everything(u, m, gold, t)))(jnp.stack([tr, 2 * tr]))
    for got in (per_row, jax.tree.map(lambda x: x[0], stacked)):
      for x, y in zip(jax.tree.leaves(batched), jax.tree.leaves(got)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    # The second stacked problem really is a different one.
    self.assertFalse(np.allclose(stacked[0][0], stacked[0][1]))
    # The jitted result equals the one computed without an outer jit.
    np.testing.assert_allclose(crf.crf_log_partition(u, tr, m, s, e), batched[0], rtol=1e-6)

  def test_stable_for_large_scores_in_float32(self):
    """Scores far beyond exp()'s float32 range; compared with the same problem in float64."""
    args, _ = random_problem(6, 3, 5, 4, dtype=np.float32)
    args = dict(args, unaries=100 * args["unaries"], transitions=100 * args["transitions"])
    log_z, marg = log_partition(**args), marginals(**args)
    self.assertTrue(np.all(np.isfinite(log_z)) and np.all(np.isfinite(marg)))
    np.testing.assert_allclose(marg.sum(-1), args["mask"].astype(np.float32), atol=1e-6)
    with jax.enable_x64(True):
      args64 = {
        k: None
        if v is None
        else jnp.asarray(np.asarray(v).astype(np.float64 if v.dtype == np.float32 else v.dtype))
        for k, v in args.items()
      }
      np.testing.assert_allclose(log_z, log_partition(**args64), rtol=1e-6)
      np.testing.assert_allclose(marg, marginals(**args64), atol=1e-3)

  def test_bad_shapes_raise(self):
    args, gold = random_problem(7, 2, 3, 3, dtype=np.float32)
    with self.assertRaisesRegex(ValueError, "transitions"):
      crf.crf_log_partition(args["unaries"], args["transitions"][:2], args["mask"])
    with self.assertRaisesRegex(ValueError, "mask"):
      crf.crf_marginals(args["unaries"], args["transitions"], args["mask"][:, :2])
    with self.assertRaisesRegex(ValueError, "end"):
      crf.viterbi_decode(args["unaries"], args["transitions"], args["mask"], end=jnp.zeros(4))
    with self.assertRaisesRegex(ValueError, "tags"):
      crf.crf_sequence_score(args["unaries"], args["transitions"], gold[:, :2], args["mask"])
    with self.assertRaisesRegex(ValueError, r"\[B, T, L\]"):
      crf.crf_log_partition(args["unaries"][0], args["transitions"], args["mask"])


if __name__ == "__main__":
  absltest.main()

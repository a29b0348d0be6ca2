"""Tests of the token embedder, BiLSTM and BiLSTM tagger (energynets/nets/rnn.py).

The central property is the padding contract: outputs at real positions depend on
the real tokens only. It is checked by appending padding and by writing junk into
padded positions (a backward LSTM that read padding first would fail both), with a
negative control showing that the same LSTM run without `seq_lengths` does fail.
"""

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets.nets import rnn

VOCAB, CHARS, POS, CHUNK, TAGS = 20, 12, 5, 4, 5


def make_batch(seed, lengths, steps, num_chars=6, junk=False):
  """A batch in the loader's format; `junk=True` fills padded positions with random ids."""
  rs = np.random.RandomState(seed)
  b = len(lengths)
  mask = np.arange(steps)[None] < np.asarray(lengths)[:, None]
  word_len = rs.randint(1, num_chars + 1, size=(b, steps))
  chars = rs.randint(1, CHARS, size=(b, steps, num_chars))
  chars = np.where(np.arange(num_chars) < word_len[..., None], chars, 0)
  batch = dict(
    words=rs.randint(1, VOCAB, (b, steps)),
    chars=chars,
    pos=rs.randint(0, POS, (b, steps)),
    chunk=rs.randint(0, CHUNK, (b, steps)),
    tags=rs.randint(0, TAGS, (b, steps)),
  )
  for key, hi in (
    ("words", VOCAB),
    ("chars", CHARS),
    ("pos", POS),
    ("chunk", CHUNK),
    ("tags", TAGS),
  ):
    fill = rs.randint(0, hi, batch[key].shape) if junk else np.zeros_like(batch[key])
    m = mask if batch[key].ndim == 2 else mask[..., None]
    batch[key] = jnp.asarray(np.where(m, batch[key], fill), jnp.int32)
  batch["mask"] = jnp.asarray(mask)
  return batch


def pad_to(batch, steps, junk_seed=None):
  """Appends padding time steps (zeros, or random ids when `junk_seed` is given)."""
  rs = np.random.RandomState(junk_seed or 0)
  out = {}
  for key, v in batch.items():
    extra = (v.shape[0], steps - v.shape[1]) + v.shape[2:]
    fill = (
      np.zeros(extra, bool)
      if key == "mask"
      else rs.randint(0, 4, extra)
      if junk_seed is not None
      else np.zeros(extra)
    )
    out[key] = jnp.concatenate([v, jnp.asarray(fill, v.dtype)], axis=1)
  return out


def make_tagger(dropout=0.0, num_layers=2, hidden=8, chars=True):
  return rnn.BiLSTMTagger(
    embedder=rnn.TokenEmbedder(
      VOCAB,
      word_dim=6,
      char_vocab_size=CHARS if chars else 0,
      char_dim=4,
      char_filters=5,
      num_pos=POS,
      pos_dim=3,
      num_chunk=CHUNK,
      chunk_dim=2,
      dropout=dropout,
    ),
    encoder=rnn.BiLSTM(hidden, num_layers=num_layers, dropout=dropout),
    num_tags=TAGS,
    dropout=dropout,
  )


class RNNTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    """One tagger (all features, 2 layers, dropout) compiled once and shared: compiles dominate."""
    super().setUpClass()
    cls.lengths = [6, 4, 1, 2]
    cls.batch = make_batch(1, cls.lengths, 6)
    cls.tagger = make_tagger(dropout=0.5)
    cls.params = jax.jit(cls.tagger.init)(jax.random.key(1), cls.batch)
    cls.apply = staticmethod(
      jax.jit(
        lambda b, rng=None, train=False: cls.tagger.apply(
          cls.params,
          b,
          train=train,
          return_features=True,
          rngs=None if rng is None else {"dropout": rng},
        ),
        static_argnames="train",
      )
    )

  def test_shapes_and_features(self):
    logits, feats = self.apply(self.batch)
    self.assertEqual(logits.shape, (4, 6, TAGS))
    self.assertEqual(feats.shape, (4, 6, 16))
    head = self.params["params"]["head"]
    np.testing.assert_allclose(logits, feats @ head["kernel"] + head["bias"], atol=1e-5)
    np.testing.assert_array_equal(np.asarray(feats)[~np.asarray(self.batch["mask"])], 0.0)
    emb = self.tagger.embedder
    out = jax.eval_shape(lambda: emb.init_with_output(jax.random.key(0), self.batch)[0])
    self.assertEqual(out.shape, (4, 6, 6 + 5 + 3 + 2))

  def test_padding_does_not_leak(self):
    mask = np.asarray(self.batch["mask"])
    ref = np.asarray(self.apply(self.batch)[1])
    # Junk ids at the padded positions, and then more padding (zeros and junk) appended.
    junk = make_batch(1, self.lengths, 6, junk=True)
    for other in (junk, pad_to(self.batch, 9), pad_to(junk, 9, junk_seed=3)):
      np.testing.assert_allclose(
        np.asarray(self.apply(other)[1])[:, :6][mask], ref[mask], atol=1e-6
      )
    # The check has power: position 0 of the backward half does see the last real token.
    words = self.batch["words"]
    changed = dict(self.batch, words=words.at[1, 3].set((words[1, 3] % 19) + 1))
    self.assertGreater(
      np.abs(np.asarray(self.apply(changed)[1])[1, 0, 8:] - ref[1, 0, 8:]).max(), 1e-4
    )

  def test_dropout_only_in_training(self):
    eval_a = self.apply(self.batch)[0]  # no dropout rng given: eval must not need one
    np.testing.assert_array_equal(eval_a, self.apply(self.batch)[0])
    train_a = self.apply(self.batch, jax.random.key(0), train=True)[0]
    train_b = self.apply(self.batch, jax.random.key(1), train=True)[0]
    self.assertGreater(np.abs(np.asarray(train_a - train_b)).max(), 1e-3)
    self.assertGreater(np.abs(np.asarray(train_a - eval_a)).max(), 1e-3)

  def test_backward_direction_without_lengths_would_leak(self):
    """Negative control: the tagger's first-layer cells without `seq_lengths` read padding."""
    x = jax.random.normal(jax.random.key(2), (4, 6, 16))
    mask = self.batch["mask"]
    x_junk = jnp.where(mask[..., None], x, 7.0)
    encoder = {"params": self.params["params"]["encoder"]}

    class NoLengths(nn.Module):
      @nn.compact
      def __call__(self, x):
        return nn.Bidirectional(
          nn.RNN(nn.OptimizedLSTMCell(8, name="forward_0")),
          nn.RNN(nn.OptimizedLSTMCell(8, name="backward_0")),
        )(x)

    real = np.asarray(mask)
    both = jax.jit(
      lambda v: (self.tagger.encoder.apply(encoder, v, mask), NoLengths().apply(encoder, v))
    )
    (ours, leaky), (ours_junk, leaky_junk) = both(x), both(x_junk)
    np.testing.assert_allclose(np.asarray(ours_junk)[real], np.asarray(ours)[real], atol=1e-6)
    self.assertGreater(np.abs(np.asarray(leaky_junk - leaky)[real]).max(), 1e-3)

  def test_char_cnn_ignores_padding_characters(self):
    batch = make_batch(4, [4, 2], 4, num_chars=5)
    cnn = rnn.CharCNN(CHARS, char_dim=4, num_filters=6)
    params = jax.jit(cnn.init)(jax.random.key(4), batch["chars"])
    apply = jax.jit(cnn.apply)
    ref = np.asarray(apply(params, batch["chars"]))
    longer = jnp.pad(batch["chars"], ((0, 0), (0, 0), (0, 4)))
    np.testing.assert_allclose(apply(params, longer), ref, atol=1e-6)
    # The padding character's embedding row is never used.
    params_pad = jax.tree.map(lambda v: v, params)
    table = params_pad["params"]["embed"]["embedding"]
    params_pad["params"]["embed"]["embedding"] = table.at[0].set(100.0)
    np.testing.assert_allclose(apply(params_pad, batch["chars"]), ref, atol=1e-6)
    # Padding tokens (no characters at all) give zeros, and gradients stay finite.
    np.testing.assert_array_equal(ref[1, 2:], 0.0)
    grad = jax.jit(jax.grad(lambda p: cnn.apply(p, batch["chars"]).sum()))(params)
    self.assertTrue(all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grad)))

  def test_tiny_tagger_fits_tiny_batch(self):
    """100 Adam steps on random tags: token CE falls to a tenth (memorization works)."""
    batch, tagger = self.batch, self.tagger
    opt = optax.adam(0.02)
    mask = batch["mask"].astype(jnp.float32)

    def loss_fn(p):
      ce = optax.softmax_cross_entropy_with_integer_labels(tagger.apply(p, batch), batch["tags"])
      return (ce * mask).sum() / mask.sum()

    @jax.jit
    def train(params):
      def step(carry, _):
        p, s = carry
        loss, g = jax.value_and_grad(loss_fn)(p)
        updates, s = opt.update(g, s, p)
        return (optax.apply_updates(p, updates), s), loss

      (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), length=100)
      return losses, loss_fn(params)

    losses, final = train(self.params)
    self.assertTrue(np.all(np.isfinite(np.asarray(losses))))
    self.assertLess(float(final), 0.1 * float(losses[0]))

  def test_pretrained_embeddings_and_errors(self):
    batch = make_batch(7, [3, 2], 3)
    glove = np.random.RandomState(7).randn(VOCAB, 6).astype(np.float32)
    emb = rnn.TokenEmbedder(VOCAB, word_dim=6, word_init=rnn.pretrained_embedding_init(glove))
    params = emb.init(jax.random.key(7), batch)
    np.testing.assert_array_equal(params["params"]["words"]["embedding"], glove)
    hash(emb)  # modules must stay hashable (why the matrix is held by a closure)
    with self.assertRaisesRegex(ValueError, "pretrained embedding matrix has shape"):
      rnn.TokenEmbedder(VOCAB, word_dim=7, word_init=rnn.pretrained_embedding_init(glove)).init(
        jax.random.key(0), batch
      )
    no_chars = {k: v for k, v in batch.items() if k != "chars"}
    with self.assertRaisesRegex(ValueError, "'chars'"):
      rnn.TokenEmbedder(VOCAB, char_vocab_size=CHARS).init(jax.random.key(0), no_chars)
    with self.assertRaisesRegex(ValueError, "unknown LSTM cell"):
      rnn.BiLSTM(4, cell="gru").init(jax.random.key(0), jnp.ones((1, 2, 3)), jnp.ones((1, 2), bool))


if __name__ == "__main__":
  absltest.main()

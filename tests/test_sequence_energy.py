"""Tests of the sequence-labeling energy (energynets/energies/sequence.py), the packed
tagger (energynets/nets/rnn.py) and its `Energy` (`SequenceEnergy.as_energy`).

Oracles: the linear-chain CRF score and Viterbi (`energynets.inference.crf`) for the
energy of Eq. (7) on one-hot sequences, brute force over every one-hot sequence,
padding invariance (junk and extra padding), float64 central finite differences for
∂E/∂y and the HVP, a forward TLM on the reversed sequence for the backward TLM, and
tiny synthetic tag languages that the pretrained TLMs must prefer.
"""

import functools
import itertools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets import domains
from energynets import testing
from energynets.data.sequences import unpack_tokens
from energynets.energies import protocol
from energynets.energies import sequence as seq
from energynets.inference import SGD
from energynets.inference import Mirror
from energynets.inference import Momentum
from energynets.inference import crf
from energynets.inference.gbi import GBIConfig
from energynets.inference.gbi import gbi_scan
from energynets.nets import rnn
from energynets.objectives import base
from energynets.objectives import local
from energynets.objectives import ssvm

VOCAB, CHARS, POS, CHUNK, L, T, C = 20, 7, 5, 4, 3, 4, 3
VARIANTS = {variant.name: variant for variant in seq.TLM_VARIANTS}
ALL = tuple(VARIANTS)


def make_tagger(packed=True):
  cls = rnn.PackedTagger if packed else rnn.BiLSTMTagger
  return cls(
    embedder=rnn.TokenEmbedder(
      VOCAB, word_dim=4, char_vocab_size=CHARS, char_dim=2, char_filters=3, num_pos=POS, pos_dim=2
    ),
    encoder=rnn.BiLSTM(4),
    num_tags=L,
  )


def make_energy(tlm=(), **kw):
  """A `SequenceEnergy` with the TLM variants named in `tlm`."""
  kw = dict(dict(tlm_hidden=6, tlm_word_dim=3), **kw)
  return seq.SequenceEnergy(make_tagger(), tlm_variants=tuple(VARIANTS[v] for v in tlm), **kw)


def make_x(seed, lengths, steps=T, junk=False):
  """Packed tokens `[B, steps, 3 + C]`; word id 0 at padding, other columns junk if asked."""
  rs = np.random.RandomState(seed)
  b = len(lengths)
  mask = np.arange(steps)[None] < np.asarray(lengths)[:, None]
  x = np.concatenate(
    [
      rs.randint(1, VOCAB, (b, steps, 1)),
      rs.randint(0, POS, (b, steps, 1)),
      rs.randint(0, CHUNK, (b, steps, 1)),
      rs.randint(0, CHARS, (b, steps, C)),
    ],
    axis=-1,
  )
  fill = rs.randint(0, 4, x.shape) if junk else np.zeros_like(x)
  fill[..., 0] = 0
  return jnp.asarray(np.where(mask[..., None], x, fill), jnp.int32)


def relaxed_y(seed, shape, dtype=np.float32):
  return jax.nn.softmax(jnp.asarray(np.random.RandomState(seed).randn(*shape), dtype), -1)


# Every module call is jitted, once per (module, method): eager LSTM scans recompile on
# every call, which would make these tests slow. Modules are hashable, so equal energies
# built by different tests share the compiled function.
@functools.cache
def jitted(module, method=None):
  return jax.jit(lambda params, *args: module.apply({"params": params}, *args, method=method))


tlm_log_likelihoods = jax.jit(seq.tlm_log_likelihoods, static_argnums=0)
tlm_log_probs = jax.jit(seq.tlm_log_probs, static_argnums=0)


def init(energy, seed=0, scale=0.5, x=None):
  """Params with every leaf random (W and biases start at zero)."""
  x = make_x(seed, [T, 2]) if x is None else x
  # Only the shapes of an initialization: tracing it is much cheaper than compiling it.
  shapes = jax.eval_shape(functools.partial(seq.init_params, energy), jax.random.key(0), x)
  rs = np.random.RandomState(seed + 100)
  return jax.tree.map(lambda a: jnp.asarray(rs.randn(*a.shape) * scale, a.dtype), shapes)


def apply(energy, params, x, y):
  return jitted(energy)(params, x, y)


def encode(energy, params, x):
  return jitted(energy, "encode")(params, x)


def from_encoding(energy, params, encoding, y):
  return jitted(energy, "energy_from_encoding")(params, encoding, y)


def one_hot(tags, mask):
  return jax.nn.one_hot(tags, L) * mask[..., None]


def fit(loss, params, steps, lr=0.05):
  """`steps` Adam steps on `loss(params)`; returns the params and the first and last
  losses."""
  params, values = testing.minimize(loss, params, steps, lr)
  return params, values[0], values[-1]


class PackedTaggerTest(absltest.TestCase):
  def test_packed_tagger_equals_dict_tagger(self):
    x = make_x(0, [4, 2, 0])
    packed, plain = make_tagger(True), make_tagger(False)
    shapes = jax.eval_shape(packed.init, jax.random.key(0), x)["params"]
    rs = np.random.RandomState(0)
    params = jax.tree.map(lambda a: jnp.asarray(rs.randn(*a.shape), a.dtype), shapes)
    run = lambda net, inputs: jax.jit(
      lambda p, i: net.apply({"params": p}, i, return_features=True)
    )(params, inputs)
    want_logits, want_features = run(plain, unpack_tokens(x))
    logits, features = run(packed, x)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(features, want_features, rtol=1e-6, atol=1e-7)
    # The same parameter tree as the dict tagger (a token-CE stage's params carry over).
    plain_params = jax.eval_shape(plain.init, jax.random.key(0), unpack_tokens(x))["params"]
    self.assertTrue(base.same_shapes(plain_params, params))

  def test_dict_tagger_rejects_an_array(self):
    with self.assertRaisesRegex(ValueError, "packed=True"):
      jax.eval_shape(make_tagger(False).init, jax.random.key(0), make_x(0, [2]))


class LinearChainTest(parameterized.TestCase):
  """Eq. (7) alone (no TLM) against the CRF module."""

  def test_one_hot_energy_is_minus_crf_score(self):
    energy = make_energy()
    lengths = [4, 3, 1, 0]
    x = make_x(1, lengths)
    params = init(energy, 1)
    enc = encode(energy, params, x)
    tags = jnp.asarray(np.random.RandomState(2).randint(0, L, (4, T)), jnp.int32)
    e = from_encoding(energy, params, enc, one_hot(tags, enc.mask))
    score = crf.crf_sequence_score(enc.logits, params["pairwise"], tags, enc.mask)
    np.testing.assert_allclose(e, -score, rtol=1e-5, atol=1e-5)
    self.assertEqual(float(e[3]), 0.0)  # the empty row
    # The local term is minus the tagger's logits (a token-CE tagger drops in).
    local_logits = jitted(energy, "local_logits")(params, x)
    np.testing.assert_array_equal(local_logits, enc.logits)

  def test_local_scale_scales_the_crf_unaries(self):
    """local_scale s: −E is the CRF score with unaries s·logits and the same W."""
    lengths = [4, 2, 0]
    x = make_x(5, lengths)
    params = init(make_energy(pairwise_scale=0.5), 5, x=x)
    energy = make_energy(pairwise_scale=0.5, local_scale=0.25)
    enc = encode(energy, params, x)
    tags = jnp.asarray(np.random.RandomState(6).randint(0, L, (3, T)), jnp.int32)
    e = from_encoding(energy, params, enc, one_hot(tags, enc.mask))
    score = crf.crf_sequence_score(0.25 * enc.logits, params["pairwise"], tags, enc.mask)
    np.testing.assert_allclose(e, -score, rtol=1e-5, atol=1e-5)
    unscaled = from_encoding(make_energy(), params, enc, one_hot(tags, enc.mask))
    self.assertFalse(np.allclose(e, unscaled))  # the scale is not a no-op

  def test_viterbi_is_the_brute_force_argmin(self):
    energy = make_energy()
    lengths = [4, 3, 1]
    x = make_x(3, lengths)
    params = init(energy, 3, scale=1.0)
    enc = encode(energy, params, x)
    candidates = jnp.asarray(list(itertools.product(range(L), repeat=T)), jnp.int32)
    num = candidates.shape[0]
    energies = []
    for b in range(len(lengths)):
      tile = jax.tree.map(lambda a: jnp.repeat(a[b : b + 1], num, axis=0), enc)
      energies.append(from_encoding(energy, params, tile, one_hot(candidates, tile.mask)))
    energies = jnp.stack(energies)
    best = candidates[jnp.argmin(energies, axis=1)]
    tags, score = crf.viterbi_decode(enc.logits, params["pairwise"], enc.mask)
    mask = np.asarray(enc.mask)
    np.testing.assert_array_equal(np.where(mask, best, 0), tags)
    np.testing.assert_allclose(energies.min(axis=1), -score, rtol=1e-5, atol=1e-5)


class PaddingAndDerivativesTest(parameterized.TestCase):
  # The word-augmented backward TLM exercises both the reversal and the word inputs.
  @parameterized.parameters(((),), (("forward", "word_backward"),))
  def test_padding_changes_nothing(self, tlm):
    energy = make_energy(tlm)
    lengths = [4, 2, 1]
    params = init(energy, 4, x=make_x(4, lengths))
    x, x_junk = make_x(5, lengths), make_x(5, lengths, junk=True)
    mask = np.asarray(unpack_tokens(x)["mask"])
    y = relaxed_y(6, (3, T, L))
    junk = np.asarray(relaxed_y(7, (3, T, L))) * 50.0
    junk[1, 3, 0] = np.nan
    y_junk = jnp.where(mask[..., None], y, junk)
    want = apply(energy, params, x, y)
    self.assertTrue(np.all(np.isfinite(want)))
    np.testing.assert_allclose(apply(energy, params, x_junk, y_junk), want, rtol=1e-6)
    # Two extra padded time steps.
    x_long = jnp.concatenate([x_junk, make_x(8, [0] * 3, steps=2, junk=True)], axis=1)
    y_long = jnp.concatenate([y_junk, jnp.full((3, 2, L), 7.0)], axis=1)
    np.testing.assert_allclose(apply(energy, params, x_long, y_long), want, rtol=1e-5)
    grad = jax.grad(lambda v: jnp.sum(apply(energy, params, x_junk, v)))(y_junk)
    self.assertTrue(np.all(np.isfinite(grad)))
    np.testing.assert_array_equal(np.asarray(grad)[~mask], 0.0)

  # With the padding test's ("forward", "word_backward"): every variant's code path.
  @parameterized.parameters(((),), (("backward", "word_forward"),))
  def test_gradient_and_hvp_match_finite_differences(self, tlm):
    with jax.enable_x64(True):
      energy = make_energy(tlm)
      x = make_x(9, [4, 3, 2])
      params = init(energy, 9, x=x)
      # The tagger runs once, in float32; y's derivatives are float64 from there on.
      enc = jax.tree.map(
        lambda a: a.astype(jnp.float64) if a.dtype == jnp.float32 else a, encode(energy, params, x)
      )
      params = jax.tree.map(lambda a: a.astype(jnp.float64), params)
      check = testing.energy_derivatives(
        lambda y: from_encoding(energy, params, enc, y),
        np.asarray(relaxed_y(10, (3, T, L), np.float64)),
        seed=0,
      )
      np.testing.assert_allclose(check.analytic, check.finite_difference, rtol=1e-6)
      # Examples are independent: example 0's gradient ignores the others' y.
      np.testing.assert_allclose(check.grad_at_y[0], check.grad_other[0], rtol=1e-12)
      np.testing.assert_allclose(check.hvp, check.hvp_finite_difference, rtol=1e-4, atol=1e-7)

  def test_jit(self):
    """Every other test runs jitted; here the jitted energy against eager execution."""
    energy = make_energy()
    x = make_x(11, [4, 2])
    params = init(energy, 11, x=x)
    y = relaxed_y(12, (2, T, L))
    eager = energy.apply({"params": params}, x, y)
    np.testing.assert_allclose(apply(energy, params, x, y), eager, rtol=1e-5)

  def test_bad_inputs(self):
    energy = make_energy()
    x = make_x(0, [2])
    params = init(energy, 0, x=x)
    with self.assertRaisesRegex(ValueError, "y must be"):
      apply(energy, params, x, jnp.zeros((1, T, L + 1)))
    with self.assertRaisesRegex(ValueError, "local_scale"):
      init(make_energy(local_scale=0.0), x=x)
    with self.assertRaisesRegex(TypeError, "tlm_variants"):
      init(seq.SequenceEnergy(make_tagger(), tlm_variants=("forward",)), x=x)
    with self.assertRaisesRegex(ValueError, "tlm_variants"):
      init(make_energy(("forward", "forward")), x=x)
    with self.assertRaisesRegex(ValueError, "num_tags"):
      jax.eval_shape(
        seq.SequenceEnergy(rnn.BiLSTM(3)).init, jax.random.key(0), x, jnp.zeros((1, T, L))
      )


class TagLanguageModelTest(parameterized.TestCase):
  def test_energy_adds_the_weighted_tlm_terms(self):
    """Eq. (9): −Σ [ll_fwd + ll_bwd + γ (ll_word_fwd + ll_word_bwd)] on top of Eq. (7)."""
    energy = make_energy(ALL, gamma=0.3, tlm_weight=0.7)
    x = make_x(13, [4, 3, 1])
    params = init(energy, 13, x=x)
    y = relaxed_y(14, (3, T, L))
    plain = {k: v for k, v in params.items() if k != "tlm"}
    want = apply(make_energy(), plain, x, y)
    tokens = unpack_tokens(x)
    ll = tlm_log_likelihoods(energy, params, y, tokens["mask"], tokens["words"])
    self.assertEqual(set(ll), set(ALL))
    for v in ll.values():
      self.assertTrue(np.all(np.isfinite(v)) and np.all(np.asarray(v) < 0))
    want = (
      want
      - 0.7 * (ll["forward"] + ll["backward"])
      - 0.3 * (ll["word_forward"] + ll["word_backward"])
    )
    np.testing.assert_allclose(apply(energy, params, x, y), want, rtol=1e-5)

  def test_backward_tlm_is_the_forward_tlm_on_the_reversed_sequence(self):
    energy = make_energy(("forward", "backward"))
    x = make_x(15, [4, 3, 1, 0])
    params = init(energy, 15, x=x)
    tlm = dict(params["tlm"], backward=params["tlm"]["forward"])
    mask = unpack_tokens(x)["mask"]
    y = relaxed_y(16, (4, T, L))
    ll = tlm_log_likelihoods(energy, tlm, y, mask)
    ll_reversed = tlm_log_likelihoods(energy, tlm, seq.reverse_real(y, mask), mask)
    np.testing.assert_allclose(ll["backward"], ll_reversed["forward"], rtol=1e-6)
    self.assertGreater(float(jnp.max(jnp.abs(ll["backward"][:3] - ll["forward"][:3]))), 1e-3)
    np.testing.assert_array_equal(
      seq.reverse_real(jnp.arange(8).reshape(2, 4), mask[1:3]), [[2, 1, 0, 3], [4, 5, 6, 7]]
    )

  def test_pretrained_tlms_prefer_the_training_language(self):
    """Gold tags alternate (ABAB.. / BABA..); after pretraining, every variant gives
    E(ABAB) < E(AABB)."""
    energy = make_energy(ALL, tlm_hidden=8)
    rs = np.random.RandomState(17)
    lengths = rs.randint(2, T + 1, 16)
    mask = jnp.asarray(np.arange(T)[None] < lengths[:, None])
    tags = (np.arange(T)[None] + rs.randint(0, 2, (16, 1))) % 2
    words = jnp.asarray(rs.randint(1, VOCAB, (16, T)) * np.asarray(mask), jnp.int32)
    gold = one_hot(jnp.asarray(tags), mask)
    tlm = init(energy, 17)["tlm"]
    loss = lambda p: seq.tlm_pretrain_loss(energy, p, gold, mask, words)
    tlm, before, after = fit(loss, tlm, 60)
    self.assertLess(after, 0.5 * before)
    test = one_hot(jnp.asarray([[0, 1, 0, 1], [0, 0, 1, 1]]), jnp.ones((2, T), bool))
    test_words = jnp.asarray(rs.randint(1, VOCAB, (1, T)).repeat(2, axis=0), jnp.int32)
    ll = tlm_log_likelihoods(energy, tlm, test, jnp.ones((2, T), bool), test_words)
    for variant in ALL:
      energies = -np.asarray(ll[variant])
      self.assertTrue(np.all(np.isfinite(energies)), variant)
      self.assertLess(energies[0], energies[1] - 1.0, variant)

  def test_backward_tlm_predicts_what_only_the_future_determines(self):
    """Language (a, C, a), a ∈ {A, B}: the first tag is only predictable from the right,
    the last only from the left."""
    energy = make_energy(("forward", "backward"), tlm_hidden=8)
    a = np.arange(16) % 2
    tags = jnp.asarray(np.stack([a, np.full(16, 2), a], axis=1))
    mask = jnp.ones((16, 3), bool)
    gold = one_hot(tags, mask)
    tlm = init(energy, 18)["tlm"]
    tlm, _, _ = fit(lambda p: seq.tlm_pretrain_loss(energy, p, gold, mask), tlm, 150)
    log_probs = tlm_log_probs(energy, tlm, gold, mask)
    prob = {
      k: np.exp(np.take_along_axis(np.asarray(v)[..., :L], np.asarray(tags)[..., None], -1)[..., 0])
      for k, v in log_probs.items()
    }
    self.assertGreater(prob["backward"][:, 0].min(), 0.9)
    self.assertLess(prob["forward"][:, 0].max(), 0.7)
    self.assertGreater(prob["forward"][:, 2].min(), 0.9)
    self.assertLess(prob["backward"][:, 2].max(), 0.7)

  @parameterized.parameters((False,), (True,))
  def test_word_tlm_reads_the_words_before_t_unless_lookahead(self, lookahead):
    energy = make_energy(("word_forward",), word_tlm_lookahead=lookahead)
    mask = jnp.ones((1, T), bool)
    tlm = init(energy, 19)["tlm"]
    y = relaxed_y(20, (1, T, L))
    words = jnp.asarray([[3, 4, 5, 6]])
    changed = words.at[0, 2].set(9)
    lp = tlm_log_probs(energy, tlm, y, mask, words)["word_forward"]
    lp_changed = tlm_log_probs(energy, tlm, y, mask, changed)["word_forward"]
    np.testing.assert_array_equal(lp[:, :2], lp_changed[:, :2])
    moved = float(jnp.max(jnp.abs(lp[:, 2] - lp_changed[:, 2])))
    if lookahead:
      self.assertGreater(moved, 1e-4)
    else:
      self.assertEqual(moved, 0.0)
      self.assertGreater(float(jnp.max(jnp.abs(lp[:, 3] - lp_changed[:, 3]))), 1e-4)


class SequenceModelTest(parameterized.TestCase):
  def test_gbi_mirror_descent_lowers_the_energy(self):
    energy = make_energy(("word_backward",))
    model = protocol.as_energy(energy)
    self.assertEqual(model.groups, ("local_net", "pairwise", "tlm"))
    self.assertIsInstance(model.domain, domains.Simplex)
    x = make_x(21, [4, 3, 2])
    params = init(energy, 21, x=x)
    config = GBIConfig(parametrization=Mirror(), direction=SGD(), learning_rate=0.1, num_steps=10)

    @jax.jit
    def run(params, x):
      inputs = model.encode(params, x)
      y, trace = gbi_scan(
        model.energy, params, inputs, model.start(inputs, x, "uniform"), model.domain, config
      )
      # Test-time prediction (gbi_while) through ssvm.infer, from the tagger's softmax.
      result = ssvm.infer(model, params, x, GBIConfig(max_steps=10), init="local")
      start = model.energy(params, inputs, model.start(inputs, x, "local"))
      return y, trace, result, start

    y, trace, result, start = run(params, x)
    self.assertTrue(np.all(np.asarray(trace.energies[-1]) < np.asarray(trace.initial_energy)))
    np.testing.assert_allclose(jnp.sum(y, -1), 1.0, rtol=1e-5)
    self.assertTrue(np.all(np.asarray(result.energy) < np.asarray(start)))

  def test_with_zero_pairwise_gbi_decodes_the_local_argmax(self):
    energy = make_energy()
    model = protocol.as_energy(energy)
    self.assertEqual(model.groups, ("local_net", "pairwise"))
    x = make_x(22, [4, 3, 2, 1])
    config = GBIConfig(parametrization=Mirror(), direction=Momentum(), num_steps=30)

    @functools.partial(jax.jit, static_argnums=1)
    def decode(params, init):
      """GBI's decoded one-hot output, its energy, the logits, and Viterbi's energy."""
      inputs = model.encode(params, x)
      y, _ = gbi_scan(
        model.energy, params, inputs, model.start(inputs, x, init), model.domain, config
      )
      decoded = domains.Simplex().decode(y) * inputs.mask[..., None]
      tags, _ = crf.viterbi_decode(inputs.logits, params["pairwise"], inputs.mask)
      return (
        decoded,
        inputs.logits,
        model.energy(params, inputs, decoded),
        model.energy(params, inputs, one_hot(tags, inputs.mask)),
      )

    mask = np.asarray(unpack_tokens(x)["mask"])
    params = dict(init(energy, 22, x=x), pairwise=jnp.zeros((L, L)))
    decoded, logits, _, _ = decode(params, "uniform")
    np.testing.assert_array_equal(np.argmax(decoded, -1)[mask], np.argmax(logits, -1)[mask])
    # With W != 0, Viterbi's one-hot energy lower-bounds the decoded GBI output's.
    _, _, gbi_energy, best = decode(init(energy, 23, x=x, scale=1.0), "local")
    self.assertTrue(np.all(np.asarray(best) <= np.asarray(gbi_energy) + 1e-5))

  def test_starts(self):
    energy = make_energy()
    model = protocol.as_energy(energy)
    x = make_x(24, [4, 2])
    inputs = encode(energy, init(energy, 24, x=x), x)
    np.testing.assert_allclose(model.start(inputs, x, "uniform"), np.full((2, T, L), 1 / L))
    np.testing.assert_allclose(model.start(inputs, x, "local"), jax.nn.softmax(inputs.logits, -1))
    with self.assertRaisesRegex(ValueError, "unknown init"):
      model.start(inputs, x, "zeros")

  def test_carry(self):
    energy = make_energy()
    model = protocol.as_energy(energy)
    x = make_x(25, [4, 2])
    y = one_hot(jnp.zeros((2, T), jnp.int32), unpack_tokens(x)["mask"])
    # A token-CE tagger (the same PackedTagger) becomes local_net unchanged.
    ce = local.local_token_ce(make_tagger(), optax.sgd(1e-3))
    shapes = jax.eval_shape(ce.init, jax.random.key(0), {"x": x, "y": y})["net"].params
    rs = np.random.RandomState(0)
    tagger = jax.tree.map(lambda a: jnp.asarray(rs.randn(*a.shape), a.dtype), shapes)
    w = jnp.arange(L * L, dtype=jnp.float32).reshape(L, L)
    crf_params = {
      "tagger": tagger,
      "crf": {"transitions": w, "start": jnp.zeros(L), "end": jnp.zeros(L)},
    }
    # Both carries in one compiled function (each initializes the fresh groups).
    params, from_crf = jax.jit(
      lambda rng: (
        model.carry({"net": base.init_group(tagger, optax.sgd(1e-3))}, rng, x, y),
        model.carry({"net": base.ParamGroup(crf_params, None)}, rng, x, y),
      )
    )(jax.random.key(1))
    self.assertEqual(set(params), {"local_net", "pairwise"})
    jax.tree.map(np.testing.assert_array_equal, params["local_net"], tagger)
    np.testing.assert_array_equal(
      jitted(energy, "local_logits")(params, x), jitted(make_tagger())(tagger, x)
    )
    # A previous sequence-energy state: everything carried.
    again = model.carry({"energy": base.ParamGroup(params, None)}, jax.random.key(2), x, y)
    jax.tree.map(np.testing.assert_array_equal, again, params)
    # A CRF state: its tagger and transitions.
    np.testing.assert_array_equal(from_crf["pairwise"], w)
    jax.tree.map(np.testing.assert_array_equal, from_crf["local_net"], tagger)
    with self.assertRaisesRegex(ValueError, "cannot continue"):
      model.carry({"task_net": None}, jax.random.key(0), x, y)
    with self.assertRaisesRegex(ValueError, "cannot carry"):
      model.carry({"net": base.ParamGroup({"head": {}}, None)}, jax.random.key(0), x, y)
    self.assertEqual(
      protocol.as_energy(make_energy(("forward",))).groups, ("local_net", "pairwise", "tlm")
    )


if __name__ == "__main__":
  absltest.main()


def test_as_model_recognizes_a_sequence_energy():
  tagger = rnn.PackedTagger(
    embedder=rnn.TokenEmbedder(vocab_size=5, word_dim=3),
    encoder=rnn.BiLSTM(hidden_size=2),
    num_tags=3,
  )
  model = protocol.as_energy(seq.SequenceEnergy(local_net=tagger))
  assert isinstance(model.domain, domains.Simplex)

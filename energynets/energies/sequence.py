"""The sequence-labeling energy of Tu, Pang & Gimpel (2020), Eq. (7)-(9).

For tokens x (one row of the packed array `[B, T, 3 + C]`, real tokens a prefix of
length n) and relaxed tags y `[B, T, L]` (one point of the simplex per token),

    E(x, y) = −Σ_{t≤n} Σ_j y_{t,j} U_jᵀ b(x, t)                 local term,  Eq. (7)
              −Σ_{2≤t≤n} y_{t−1}ᵀ W y_t                          pairwise term, Eq. (7)
              [+ E_GE(y)]                                        global (TLM) terms, Eq. (8)-(9)

one value per example. Padded positions (t > n) contribute nothing, whatever y or the
non-word columns of x hold there, and the pairwise term couples consecutive real
tokens only. With a one-hot y and no global term, −E is exactly the linear-chain CRF
score with unaries `U b(x, t)` and transitions W (start and end scores zero:
`energynets.inference.crf.crf_sequence_score`), so Viterbi minimizes E over one-hot
sequences. The paper's training does not use that; it is the tests' oracle.

Sign convention (as `mlc.py`). The local term is minus the logits `U_jᵀ b(x,t) + a_j`
of a per-token softmax tagger, so a BiLSTM tagger pretrained with token cross-entropy
(`local_token_ce`) is the right local energy with no sign flip and drops in unchanged
as `local_net`. Its head bias a_j is kept (the paper's Eq. (7) has none; a bias is a
per-tag prior that the tagger baseline has, and it changes no argmin of the paper's
form that W could not already express).

Global energies (the paper's §"Global Energies for Sequence Labeling"). A tag language
model (TLM) h is an LSTM that reads the relaxed tag vectors y_0, ..., y_{t−1} (y_0 the
start symbol) and returns ȳ_t, a distribution over the L tags and an end symbol; the
energy is the TLM's negative log-likelihood of the candidate, with relaxed y:

    E_TLM(y) = −Σ_{t=1}^{n+1} log(y_tᵀ ȳ_t),   y_{n+1} = the end symbol        Eq. (8)

Eq. (9) adds a backward TLM ȳ'_t = h'(y_{n+1}, ..., y_{t+1}) (reading right to left,
ending with the start symbol) and word-augmented forward / backward TLMs
ỹ_t = g(x_0, ..., x_{t−1}, y_0, ..., y_{t−1}) (and ỹ'_t reversed), weighted by γ:

    E_GE(y) = −Σ_t [log(y_tᵀ ȳ_t) + log(y_tᵀ ȳ'_t) + γ (log(y_tᵀ ỹ_t) + log(y_tᵀ ỹ'_t))]

Select the terms with `tlm_variants` (any of `TLM_VARIANTS`); the paper's settings are
`GLOBAL_ENERGIES`: GE(a) forward only (Tu & Gimpel 2018), GE(b) forward + backward
(γ = 0), GE(c) all four. Training: Tu & Gimpel (2018) pretrained h on an automatically
tagged corpus and kept it fixed; *this* paper does not pretrain: "its parameters are
learned when optimizing Θ". So by default the TLMs are ordinary energy parameters (the
`tlm` group, trained with the rest); `tlm_pretrain_loss` (token NLL of gold tag
sequences) gives the 2018 variant: pretrain, then clamp `tlm` (`trainable=`).

Choices the paper leaves open (documented here, configurable where cheap):
- the word-augmented TLMs' word vectors: their own embedding table (`tlm/words`,
  `tlm_word_dim`, optionally `tlm_word_init` such as GloVe), not the local net's, so the
  local net stays a plain tagger and the TLMs a separate group; computed once per x in
  `encode`;
- which words they see: the printed ỹ_t = g(x_0..x_{t−1}, y_0..y_{t−1}) reads the words
  *before* t (x_0 a start word, here the zero vector next to the start tag), which we
  follow; `word_tlm_lookahead=True` feeds x_1..x_t instead (the word being tagged);
- `tlm_weight` scales the plain TLM terms (the paper: 1), γ the word-augmented ones;
- the TLMs run without dropout (the paper's keep-prob 0.7 is for its LSTMs in
  general): the energy is evaluated many times per example by GBI and by the hinge
  losses, and a stochastic energy would make those objectives noisy;
- an empty row (n = 0, a sharded step's padding row) has energy 0, also in the TLM
  terms (whose end-symbol prediction would otherwise add a constant), as in
  `energynets.inference.crf`;
- the TLM hidden size defaults to the paper's 128 (NER: "the hidden size for all LSTMs
  is 128").

Parameters, by top-level name (the units staged training clamps or trains):
- `local_net`: the tagger (`PackedTagger` / `BiLSTMTagger(packed=True)`) giving b(x,t)
  and the local logits; a `local_token_ce` state's params drop in unchanged.
- `pairwise`: W `[L, L]` (row = previous tag), zeros at init unless `pairwise_scale`.
- `tlm` (only when `tlm_variants` is not empty): one LSTM TLM per variant, named by
  the variant, and `words`, the word-augmented TLMs' shared embedding.
"""

from typing import Any, Callable, NamedTuple, Optional, Sequence

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets import domains
from energynets.tokens import unpack_tokens
from energynets.energies import protocol
from energynets.nets.rnn import CELLS

TLM_VARIANTS = ("forward", "backward", "word_forward", "word_backward")
# The paper's three global-energy settings (Table 4).
GLOBAL_ENERGIES = {"a": ("forward",), "b": ("forward", "backward"), "c": TLM_VARIANTS}

Initializer = Callable[..., jax.Array]


class SequenceEncoding(NamedTuple):
  """What the energy needs from x, computed once per input (GBI reuses it every step).

  Attributes:
    features: `[B, T, H]`, b(x, t): what the tagger's head sees.
    logits: `[B, T, L]`, the local logits U_jᵀ b(x, t) + a_j (the tagger's output).
    mask: `[B, T]` bool, True on real tokens (a prefix of each row).
    word_vectors: `[B, T, D]`, the word-augmented TLMs' word embeddings (zero at
      padding), or None when no word-augmented TLM is on.
  """
  features: jax.Array
  logits: jax.Array
  mask: jax.Array
  word_vectors: Optional[jax.Array] = None


# ---------------------------------------------------------------------------------------
# Tag language models.


def reverse_real(a: jax.Array, mask: jax.Array) -> jax.Array:
  """`a [B, T, ...]` with each row's real prefix reversed in place (padding untouched).

  What turns a forward (left-to-right) model into a backward one: row b's position k < n
  holds position n − 1 − k of the input, so the reversed row is again a prefix of n real
  tokens. It is its own inverse.
  """
  steps = mask.shape[1]
  lengths = jnp.sum(mask, axis=-1, dtype=jnp.int32)[:, None]
  k = jnp.arange(steps, dtype=jnp.int32)[None]
  index = jnp.where(k < lengths, lengths - 1 - k, k)
  index = index.reshape(index.shape + (1,) * (a.ndim - 2))
  return jnp.take_along_axis(a, index, axis=1)


class TagLM(nn.Module):
  """An LSTM tag language model over relaxed tags, `(y, words) -> [B, T + 1, L + 1]`.

  Step k = 0..T reads the start symbol (k = 0) or y_k (k ≥ 1), plus, when words are
  given, the word vector of step k, and outputs log-probabilities over the L tags and
  the end symbol (last column) for position k + 1. Output k depends on inputs 0..k
  only, so the outputs a row of length n needs (k ≤ n) never see its padding.
  """
  num_tags: int
  hidden_size: int = 128
  cell: str = "optimized_lstm"

  @nn.compact
  def __call__(self, y: jax.Array, words: Optional[jax.Array] = None) -> jax.Array:
    b, _, num_tags = y.shape
    if num_tags != self.num_tags:
      raise ValueError(f"TagLM has {self.num_tags} tags; got y of shape {y.shape}")
    # Tag inputs [L tags, start flag]: start symbol, then y_1 .. y_T.
    start = jnp.zeros((b, 1, num_tags + 1), y.dtype).at[..., -1].set(1.0)
    tags = jnp.concatenate([y, jnp.zeros(y.shape[:2] + (1,), y.dtype)], axis=-1)
    inputs = jnp.concatenate([start, tags], axis=1)
    if words is not None:
      inputs = jnp.concatenate([inputs, words.astype(inputs.dtype)], axis=-1)
    cell = CELLS[self.cell](self.hidden_size, name="lstm")
    # The zero initial state in the dtype the steps compute in (float64 inputs under
    # x64 with float32 params included), which the scan requires of its carry.
    dtype = cell.dtype or jnp.promote_types(inputs.dtype, cell.param_dtype)
    carry = jax.tree.map(lambda c: c.astype(dtype),
                         cell.initialize_carry(jax.random.key(0), inputs[:, 0].shape))
    hidden = nn.RNN(cell)(inputs, initial_carry=carry)
    return jax.nn.log_softmax(nn.Dense(num_tags + 1, name="head")(hidden), axis=-1)


def tlm_log_likelihood(log_probs: jax.Array, y: jax.Array, mask: jax.Array
                       ) -> tuple[jax.Array, jax.Array]:
  """Per-token `log(y_tᵀ ȳ_t)` `[B, T]` (0 at padding) and the end term `[B]`.

  `log_probs [B, T + 1, L + 1]` is a `TagLM` output on y in its reading order. The
  end term is `log ȳ_{n+1}[end]`, 0 for an empty row. `y` at padding is replaced by a
  constant before the log, so that junk there (even NaN) reaches neither the value nor
  the gradient.
  """
  num_tags = y.shape[-1]
  weights = jnp.where(mask[..., None], y, 1.0)
  # log Σ_j y_j p_j, stable also when p_j underflows and for one-hot y.
  per_token = jax.nn.logsumexp(log_probs[:, :-1, :num_tags], axis=-1, b=weights)
  per_token = jnp.where(mask, per_token, 0.0)
  lengths = jnp.sum(mask, axis=-1, dtype=jnp.int32)
  end = jnp.take_along_axis(log_probs[..., num_tags], lengths[:, None], axis=1)[:, 0]
  return per_token, jnp.where(lengths > 0, end, 0.0)


class TagLanguageModels(nn.Module):
  """The enabled TLMs (`variants` ⊆ `TLM_VARIANTS`) and the word-augmented ones' words.

  `log_likelihoods(y, mask, word_vectors)` gives, per variant, the log-likelihood of
  each row under that TLM (`[B]`; the negative of its energy term); `log_probs` the
  per-token predictive log-probabilities in the original token order.
  """
  variants: tuple[str, ...]
  num_tags: int
  hidden_size: int = 128
  cell: str = "optimized_lstm"
  vocab_size: int = 0
  word_dim: int = 100
  word_init: Optional[Initializer] = None
  word_lookahead: bool = False

  def setup(self):
    unknown = set(self.variants) - set(TLM_VARIANTS)
    if unknown or not self.variants or len(set(self.variants)) != len(self.variants):
      raise ValueError(f"tlm_variants must be distinct names from {TLM_VARIANTS}; got "
                       f"{self.variants}")
    if self.cell not in CELLS:
      raise ValueError(f"unknown TLM cell {self.cell!r}; expected one of {sorted(CELLS)}")
    self.models = {v: TagLM(self.num_tags, self.hidden_size, self.cell, name=v)
                   for v in self.variants}
    if self.uses_words:
      if self.vocab_size < 1:
        raise ValueError("the word-augmented TLMs need the vocabulary size: set "
                         "SequenceEnergy.tlm_vocab_size, or give local_net an embedder "
                         "with vocab_size")
      init = self.word_init or nn.linear.default_embed_init
      self.words = nn.Embed(self.vocab_size, self.word_dim, embedding_init=init)

  @property
  def uses_words(self) -> bool:
    return any(v.startswith("word_") for v in self.variants)

  def embed_words(self, words: jax.Array, mask: jax.Array) -> jax.Array:
    """`[B, T]` word ids -> `[B, T, word_dim]`, zero at padding."""
    return self.words(words) * mask[..., None]

  def _run(self, variant: str, y: jax.Array, mask: jax.Array,
           word_vectors: Optional[jax.Array]):
    """The variant's `TagLM` output on y in its reading order, and y in that order."""
    backward = variant.endswith("backward")
    y = jnp.where(mask[..., None], y, 0.0)
    if backward:
      y = reverse_real(y, mask)
    words = None
    if variant.startswith("word_"):
      if word_vectors is None:
        raise ValueError(f"the {variant!r} TLM needs word vectors (SequenceEncoding."
                         f"word_vectors, or words=... for the pretraining loss)")
      words = reverse_real(word_vectors, mask) if backward else word_vectors
      zero = jnp.zeros_like(words[:, :1])
      # Step k reads x_k (x_0: the start word, zeros) or, with lookahead, x_{k+1}.
      words = (jnp.concatenate([words, zero], axis=1) if self.word_lookahead
               else jnp.concatenate([zero, words], axis=1))
    return self.models[variant](y, words), y

  def log_likelihoods(self, y: jax.Array, mask: jax.Array,
                      word_vectors: Optional[jax.Array] = None) -> dict[str, jax.Array]:
    """`{variant: [B]}`: `Σ_t log(y_tᵀ ȳ_t)` over the n + 1 predictions of each row."""
    out = {}
    for variant in self.variants:
      log_probs, y_read = self._run(variant, y, mask, word_vectors)
      per_token, end = tlm_log_likelihood(log_probs, y_read, mask)
      out[variant] = jnp.sum(per_token, axis=-1) + end
    return out

  def log_probs(self, y: jax.Array, mask: jax.Array,
                word_vectors: Optional[jax.Array] = None) -> dict[str, jax.Array]:
    """`{variant: [B, T, L + 1]}`: the distribution each TLM predicts for token t (last
    column: the boundary symbol), from the tokens before t (forward) or after t
    (backward), in the original token order; padding rows are meaningless."""
    out = {}
    for variant in self.variants:
      log_probs, _ = self._run(variant, y, mask, word_vectors)
      log_probs = log_probs[:, :-1]
      out[variant] = (reverse_real(log_probs, mask) if variant.endswith("backward")
                      else log_probs)
    return out


# ---------------------------------------------------------------------------------------
# The energy.


def _num_tags(local_net: nn.Module) -> int:
  num_tags = getattr(local_net, "num_tags", None)
  if not isinstance(num_tags, int) or num_tags < 1:
    raise ValueError(f"SequenceEnergy.local_net must be a tagger with num_tags >= 1 (e.g. "
                     f"PackedTagger); got {type(local_net).__name__} with num_tags={num_tags}")
  return num_tags


def tag_language_models(energy: "SequenceEnergy", name: Optional[str] = None
                        ) -> TagLanguageModels:
  """The `TagLanguageModels` module of `energy` (its `tlm` group), unbound."""
  vocab_size = energy.tlm_vocab_size or getattr(
      getattr(energy.local_net, "embedder", None), "vocab_size", 0)
  return TagLanguageModels(tuple(energy.tlm_variants), _num_tags(energy.local_net),
                           energy.tlm_hidden, energy.tlm_cell, vocab_size,
                           energy.tlm_word_dim, energy.tlm_word_init,
                           energy.word_tlm_lookahead, name=name)


class SequenceEnergy(nn.Module):
  """The sequence-labeling energy `E(x, y) -> [B]` (see the module docstring).

  Attributes:
    local_net: the tagger on the packed token array: `local_net(x, train=...,
      return_features=True) -> (logits [B, T, L], b(x, t) [B, T, H])`, with `num_tags`
      (`PackedTagger`).
    tlm_variants: the global TLM terms, any of `TLM_VARIANTS` (`GLOBAL_ENERGIES[k]` for
      the paper's GE(k)); `()` (default) is the energy of Eq. (7) alone.
    gamma: γ of Eq. (9), the weight of the word-augmented TLM terms.
    tlm_weight: the weight of the plain forward / backward TLM terms (paper: 1).
    tlm_hidden: hidden size of every TLM's LSTM (paper, NER: 128).
    tlm_cell: `'optimized_lstm'` or `'lstm'` (`energynets.nets.rnn.CELLS`).
    tlm_vocab_size: word vocabulary of the word-augmented TLMs (0: the local net's
      `embedder.vocab_size`).
    tlm_word_dim: their word embedding size (paper: 100-d embeddings).
    tlm_word_init: optional embedding initializer (`pretrained_embedding_init(glove)`).
    word_tlm_lookahead: False (paper's Eq. 9): ỹ_t reads words x_0..x_{t−1}; True: x_1..x_t.
    pairwise_scale: W starts at zero (0.0, default: E starts as the tagger's local
      energy) or normal with this standard deviation.
    local_scale: s > 0 multiplying the local term (default 1: Eq. 7). A tagger
      pretrained with token CE has confident logits, so its carried local term alone
      separates gold from F_Φ(x) by more than the margin Δ and every hinge stays zero
      (W then never moves); s < 1 tempers it, as a softmax temperature 1/s would.
  """
  local_net: nn.Module
  tlm_variants: Sequence[str] = ()
  gamma: float = 1.0
  tlm_weight: float = 1.0
  tlm_hidden: int = 128
  tlm_cell: str = "optimized_lstm"
  tlm_vocab_size: int = 0
  tlm_word_dim: int = 100
  tlm_word_init: Optional[Initializer] = None
  word_tlm_lookahead: bool = False
  pairwise_scale: float = 0.0
  local_scale: float = 1.0

  def setup(self):
    num_tags = _num_tags(self.local_net)
    if self.pairwise_scale < 0:
      raise ValueError(f"pairwise_scale must be >= 0; got {self.pairwise_scale}")
    if not self.local_scale > 0:
      raise ValueError(f"local_scale must be > 0; got {self.local_scale}")
    init = (nn.initializers.normal(self.pairwise_scale) if self.pairwise_scale
            else nn.initializers.zeros)
    self.pairwise = self.param("pairwise", init, (num_tags, num_tags))
    if self.tlm_variants:
      self.tlm = tag_language_models(self)

  @property
  def num_tags(self) -> int:
    return _num_tags(self.local_net)

  def __call__(self, x: jax.Array, y: jax.Array, train: bool = False) -> jax.Array:
    """`x [B, T, 3 + C] (packed tokens), y [B, T, L] -> [B]`."""
    return self.energy_from_encoding(self.encode(x, train=train), y)

  def encode(self, x: jax.Array, train: bool = False) -> SequenceEncoding:
    """b(x, t), the local logits and the mask from one tagger pass (+ the TLM words)."""
    tokens = unpack_tokens(x)
    logits, features = self.local_net(x, train=train, return_features=True)
    word_vectors = None
    if self.tlm_variants and self.tlm.uses_words:
      word_vectors = self.tlm.embed_words(tokens["words"], tokens["mask"])
    return SequenceEncoding(features, logits, tokens["mask"], word_vectors)

  def local_logits(self, x: jax.Array, train: bool = False) -> jax.Array:
    """`[B, T, L]`: what a `local_token_ce` tagger with these params would output."""
    return self.local_net(x, train=train)

  def as_energy(self) -> protocol.Energy:
    """This energy as an `Energy` (`sequence_energy`)."""
    return sequence_energy(self)

  def energy_from_encoding(self, encoding: SequenceEncoding, y: jax.Array) -> jax.Array:
    """`[B]`: the energy of `y [B, T, L]` given `encode(x)` (GBI's inner call)."""
    if y.ndim != 3 or y.shape != encoding.logits.shape:
      raise ValueError(f"y must be [B, T, L] = {encoding.logits.shape} to match the "
                       f"encoding's logits; got {y.shape}")
    mask = encoding.mask
    # where, not a product: junk at padding (even NaN) reaches neither value nor gradient.
    y_real = jnp.where(mask[..., None], y, 0.0)
    local = -self.local_scale * jnp.sum(y_real * encoding.logits, axis=(1, 2))
    # Padded rows of y_real are zero, so only transitions between real tokens count.
    pair = -jnp.einsum("bti,ij,btj->b", y_real[:, :-1], self.pairwise.astype(y.dtype),
                       y_real[:, 1:])
    energy = local + pair
    if self.tlm_variants:
      loglik = self.tlm.log_likelihoods(y, mask, encoding.word_vectors)
      for variant, value in loglik.items():
        weight = self.gamma if variant.startswith("word_") else self.tlm_weight
        energy = energy - weight * value
    return energy


def sequence_energy(energy: SequenceEnergy) -> protocol.Energy:
  """`energy.as_energy()`: the per-token Simplex, the tagger run once per x.

  Starts `'uniform'` (1/K per token) and `'local'` (the tagger's softmax); padded
  positions are points of the simplex like real ones (the energy ignores them, decoding
  masks them). `carry` continues a sequence-energy state `{"energy": ...}`, a token-CE
  tagger `{"net": ...}` (its params become `local_net`) or a CRF `{"net": {"tagger",
  "crf"}}` (the tagger becomes `local_net`, the transitions `pairwise`); other groups
  are freshly initialized.
  """

  def init(rng, x, y=None):
    del y
    return init_params(energy, rng, x)

  def carry(prev_state, rng, x, y=None):
    reference = jax.eval_shape(lambda: init(rng, x))
    if "energy" in prev_state:
      return protocol.carried(prev_state["energy"].params, reference,
                              "the previous state into this SequenceEnergy")
    if "net" in prev_state:
      prev = flax.core.unfreeze(prev_state["net"].params)
      if isinstance(prev, dict) and set(prev) == {"tagger", "crf"}:
        carried = dict(
            local_net=protocol.carried(
                prev["tagger"], reference["local_net"],
                "the CRF's tagger into this SequenceEnergy as local_net"),
            pairwise=protocol.carried(
                prev["crf"]["transitions"], reference["pairwise"],
                "the CRF transitions into this SequenceEnergy as pairwise"))
      else:
        carried = dict(local_net=protocol.carried(
            prev, reference["local_net"],
            "the token-CE tagger into this SequenceEnergy as local_net"))
      # Checked before the (costly) fresh initialization of the other groups.
      return dict(init(rng, x), **carried)
    raise ValueError(f"cannot continue from a state with keys {sorted(prev_state)}; expected "
                     "'energy' (a sequence-energy stage) or 'net' (token CE or CRF)")

  return protocol.encoded_module(
      energy, domain=domains.Simplex(),
      y_shape=lambda x: (x.shape[1], _num_tags(energy.local_net)),
      groups=param_groups(energy), local_start=lambda logits: jax.nn.softmax(logits, -1),
      carry=carry, init=init)


def param_groups(energy: SequenceEnergy) -> tuple[str, ...]:
  """The top-level parameter names of `energy`: `local_net`, `pairwise` (+ `tlm`)."""
  return ("local_net", "pairwise") + (("tlm",) if energy.tlm_variants else ())


# ---------------------------------------------------------------------------------------
# Pretraining the TLMs on gold tags (Tu & Gimpel 2018; this paper trains them jointly).


def _tlm_params(params: Any) -> Any:
  """The `tlm` group of energy params, or `params` itself if it already is one."""
  params = flax.core.unfreeze(params)
  return params["tlm"] if "tlm" in params else params


def tlm_log_likelihoods(energy: SequenceEnergy, params: Any, y: jax.Array, mask: jax.Array,
                        words: Optional[jax.Array] = None) -> dict[str, jax.Array]:
  """`{variant: [B]}`, each TLM's log-likelihood of y (`params`: the energy's, or only
  their `tlm` group); `words [B, T]` ids are needed by the word-augmented TLMs."""
  module = tag_language_models(energy)

  def fn(tlm):
    vectors = tlm.embed_words(words, mask) if words is not None and tlm.uses_words else None
    return tlm.log_likelihoods(y, mask, vectors)

  return module.apply({"params": _tlm_params(params)}, method=fn)


def tlm_log_probs(energy: SequenceEnergy, params: Any, y: jax.Array, mask: jax.Array,
                  words: Optional[jax.Array] = None) -> dict[str, jax.Array]:
  """`{variant: [B, T, L + 1]}`: `TagLanguageModels.log_probs` with these params."""
  module = tag_language_models(energy)

  def fn(tlm):
    vectors = tlm.embed_words(words, mask) if words is not None and tlm.uses_words else None
    return tlm.log_probs(y, mask, vectors)

  return module.apply({"params": _tlm_params(params)}, method=fn)


def tlm_pretrain_loss(energy: SequenceEnergy, params: Any, y_gold: jax.Array,
                      mask: jax.Array, words: Optional[jax.Array] = None) -> jax.Array:
  """Scalar: the TLMs' NLL of the gold tag sequences per predicted symbol.

  For one-hot `y_gold [B, T, L]` the TLM energy term *is* the sequence's negative
  log-likelihood, so this is the token NLL (each row's n tags and its end symbol),
  summed over the enabled variants (unweighted: γ weighs energy terms, not the
  pretraining of each model) and averaged over the batch's predicted symbols.
  Differentiate it w.r.t. `params` (the energy's, or only their `tlm` group) to pretrain.
  """
  loglik = tlm_log_likelihoods(energy, params, y_gold, mask, words)
  lengths = jnp.sum(mask, axis=-1)
  symbols = jnp.maximum(jnp.sum(jnp.where(lengths > 0, lengths + 1, 0)), 1)
  return -sum(jnp.sum(v) for v in loglik.values()) / symbols


def init_params(energy: SequenceEnergy, rng: jax.Array, x: jax.Array) -> dict:
  """Fresh energy params for packed tokens like `x [B, T, 3 + C]`."""
  y = jnp.zeros(x.shape[:2] + (_num_tags(energy.local_net),), jnp.float32)
  return flax.core.unfreeze(energy.init({"params": rng}, x, y)["params"])

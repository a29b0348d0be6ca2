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

The global terms are tag language models (`energynets.energies.tag_language_models`),
selected with `tlm_variants`.

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

from collections.abc import Sequence
from typing import Any
from typing import NamedTuple
from typing import cast

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets import domains
from energynets.energies import protocol

# The TLM names stay importable from here, where the energy that uses them lives.
from energynets.energies.tag_language_models import BACKWARD  # noqa: F401
from energynets.energies.tag_language_models import FORWARD  # noqa: F401
from energynets.energies.tag_language_models import GLOBAL_ENERGIES  # noqa: F401
from energynets.energies.tag_language_models import TLM_VARIANTS  # noqa: F401
from energynets.energies.tag_language_models import WORD_BACKWARD  # noqa: F401
from energynets.energies.tag_language_models import WORD_FORWARD  # noqa: F401
from energynets.energies.tag_language_models import Initializer  # noqa: F401
from energynets.energies.tag_language_models import TagLanguageModels  # noqa: F401
from energynets.energies.tag_language_models import TagLM  # noqa: F401
from energynets.energies.tag_language_models import TLMVariant
from energynets.energies.tag_language_models import check_variants
from energynets.energies.tag_language_models import reverse_real  # noqa: F401
from energynets.energies.tag_language_models import tlm_log_likelihood  # noqa: F401
from energynets.tokens import unpack_tokens


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
  word_vectors: jax.Array | None = None


# ---------------------------------------------------------------------------------------
# The energy.


def _num_tags(local_net: nn.Module) -> int:
  num_tags = getattr(local_net, "num_tags", None)
  if not isinstance(num_tags, int) or num_tags < 1:
    raise ValueError(
      f"SequenceEnergy.local_net must be a tagger with num_tags >= 1 (e.g. "
      f"PackedTagger); got {type(local_net).__name__} with num_tags={num_tags}"
    )
  return num_tags


def tag_language_models(energy: "SequenceEnergy", name: str | None = None) -> TagLanguageModels:
  """The `TagLanguageModels` module of `energy` (its `tlm` group), unbound."""
  vocab_size = energy.tlm_vocab_size or getattr(
    getattr(energy.local_net, "embedder", None), "vocab_size", 0
  )
  return TagLanguageModels(
    check_variants(energy.tlm_variants),
    _num_tags(energy.local_net),
    energy.tlm_hidden,
    energy.tlm_cell,
    vocab_size,
    energy.tlm_word_dim,
    energy.tlm_word_init,
    energy.word_tlm_lookahead,
    name=name,
  )


class SequenceEnergy(nn.Module):
  """The sequence-labeling energy `E(x, y) -> [B]` (see the module docstring).

  Attributes:
    local_net: the tagger on the packed token array: `local_net(x, train=...,
      return_features=True) -> (logits [B, T, L], b(x, t) [B, T, H])`, with `num_tags`
      (`PackedTagger`).
    tlm_variants: the global TLM terms, distinct `TLMVariant`s (`FORWARD`, `BACKWARD`,
      `WORD_FORWARD`, `WORD_BACKWARD`; `GLOBAL_ENERGIES[k]` for the paper's GE(k));
      `()` (default) is the energy of Eq. (7) alone.
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
  tlm_variants: Sequence[TLMVariant] = ()
  gamma: float = 1.0
  tlm_weight: float = 1.0
  tlm_hidden: int = 128
  tlm_cell: str = "optimized_lstm"
  tlm_vocab_size: int = 0
  tlm_word_dim: int = 100
  tlm_word_init: Initializer | None = None
  word_tlm_lookahead: bool = False
  pairwise_scale: float = 0.0
  local_scale: float = 1.0

  def setup(self):
    num_tags = _num_tags(self.local_net)
    if self.pairwise_scale < 0:
      raise ValueError(f"pairwise_scale must be >= 0; got {self.pairwise_scale}")
    if not self.local_scale > 0:
      raise ValueError(f"local_scale must be > 0; got {self.local_scale}")
    init = (
      nn.initializers.normal(self.pairwise_scale) if self.pairwise_scale else nn.initializers.zeros
    )
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
      raise ValueError(
        f"y must be [B, T, L] = {encoding.logits.shape} to match the "
        f"encoding's logits; got {y.shape}"
      )
    mask = encoding.mask
    # where, not a product: junk at padding (even NaN) reaches neither value nor gradient.
    y_real = jnp.where(mask[..., None], y, 0.0)
    local = -self.local_scale * jnp.sum(y_real * encoding.logits, axis=(1, 2))
    # Padded rows of y_real are zero, so only transitions between real tokens count.
    pair = -jnp.einsum(
      "bti,ij,btj->b", y_real[:, :-1], self.pairwise.astype(y.dtype), y_real[:, 1:]
    )
    energy = local + pair
    if self.tlm_variants:
      loglik = self.tlm.log_likelihoods(y, mask, encoding.word_vectors)
      for variant in self.tlm.variants:
        weight = self.gamma if variant.words else self.tlm_weight
        energy = energy - weight * loglik[variant.name]
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
      return protocol.carried(
        prev_state["energy"].params, reference, "the previous state into this SequenceEnergy"
      )
    if "net" in prev_state:
      prev = flax.core.unfreeze(prev_state["net"].params)
      if isinstance(prev, dict) and set(prev) == {"tagger", "crf"}:
        carried = dict(
          local_net=protocol.carried(
            prev["tagger"],
            reference["local_net"],
            "the CRF's tagger into this SequenceEnergy as local_net",
          ),
          pairwise=protocol.carried(
            prev["crf"]["transitions"],
            reference["pairwise"],
            "the CRF transitions into this SequenceEnergy as pairwise",
          ),
        )
      else:
        carried = dict(
          local_net=protocol.carried(
            prev,
            reference["local_net"],
            "the token-CE tagger into this SequenceEnergy as local_net",
          )
        )
      # Checked before the (costly) fresh initialization of the other groups.
      return dict(init(rng, x), **carried)
    raise ValueError(
      f"cannot continue from a state with keys {sorted(prev_state)}; expected "
      "'energy' (a sequence-energy stage) or 'net' (token CE or CRF)"
    )

  return protocol.encoded_module(
    energy,
    domain=domains.Simplex(),
    y_shape=lambda x: (x.shape[1], _num_tags(energy.local_net)),
    groups=param_groups(energy),
    local_start=lambda logits: jax.nn.softmax(logits, -1),
    carry=carry,
    init=init,
  )


def param_groups(energy: SequenceEnergy) -> tuple[str, ...]:
  """The top-level parameter names of `energy`: `local_net`, `pairwise` (+ `tlm`)."""
  return ("local_net", "pairwise") + (("tlm",) if energy.tlm_variants else ())


# ---------------------------------------------------------------------------------------
# Pretraining the TLMs on gold tags (Tu & Gimpel 2018; this paper trains them jointly).


def _tlm_params(params: Any) -> Any:
  """The `tlm` group of energy params, or `params` itself if it already is one."""
  params = flax.core.unfreeze(params)
  return params["tlm"] if "tlm" in params else params


def tlm_log_likelihoods(
  energy: SequenceEnergy, params: Any, y: jax.Array, mask: jax.Array, words: jax.Array | None = None
) -> dict[str, jax.Array]:
  """`{variant name: [B]}`, each TLM's log-likelihood of y (`params`: the energy's, or only
  their `tlm` group); `words [B, T]` ids are needed by the word-augmented TLMs."""
  module = tag_language_models(energy)

  def fn(tlm):
    vectors = tlm.embed_words(words, mask) if words is not None and tlm.uses_words else None
    return tlm.log_likelihoods(y, mask, vectors)

  # Nothing is mutable, so apply returns fn's value alone.
  return cast(dict[str, jax.Array], module.apply({"params": _tlm_params(params)}, method=fn))


def tlm_log_probs(
  energy: SequenceEnergy, params: Any, y: jax.Array, mask: jax.Array, words: jax.Array | None = None
) -> dict[str, jax.Array]:
  """`{variant name: [B, T, L + 1]}`: `TagLanguageModels.log_probs` with these params."""
  module = tag_language_models(energy)

  def fn(tlm):
    vectors = tlm.embed_words(words, mask) if words is not None and tlm.uses_words else None
    return tlm.log_probs(y, mask, vectors)

  return cast(dict[str, jax.Array], module.apply({"params": _tlm_params(params)}, method=fn))


def tlm_pretrain_loss(
  energy: SequenceEnergy,
  params: Any,
  y_gold: jax.Array,
  mask: jax.Array,
  words: jax.Array | None = None,
) -> jax.Array:
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

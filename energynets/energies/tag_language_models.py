"""Tag language models (TLMs): the global energies of Tu, Pang & Gimpel (2020), Eq. (8)-(9).

Global energies (the paper's §"Global Energies for Sequence Labeling"). A tag language
model (TLM) h is an LSTM that reads the relaxed tag vectors y_0, ..., y_{t−1} (y_0 the
start symbol) and returns ȳ_t, a distribution over the L tags and an end symbol; the
energy is the TLM's negative log-likelihood of the candidate, with relaxed y:

    E_TLM(y) = −Σ_{t=1}^{n+1} log(y_tᵀ ȳ_t),   y_{n+1} = the end symbol        Eq. (8)

Eq. (9) adds a backward TLM ȳ'_t = h'(y_{n+1}, ..., y_{t+1}) (reading right to left,
ending with the start symbol) and word-augmented forward / backward TLMs
ỹ_t = g(x_0, ..., x_{t−1}, y_0, ..., y_{t−1}) (and ỹ'_t reversed), weighted by γ:

    E_GE(y) = −Σ_t [log(y_tᵀ ȳ_t) + log(y_tᵀ ȳ'_t) + γ (log(y_tᵀ ỹ_t) + log(y_tᵀ ỹ'_t))]

Select the terms with `tlm_variants`, `TLMVariant` values (`FORWARD`, `BACKWARD`,
`WORD_FORWARD`, `WORD_BACKWARD`; all four are `TLM_VARIANTS`); the paper's settings are
`GLOBAL_ENERGIES`: GE(a) forward only (Tu & Gimpel 2018), GE(b) forward + backward
(γ = 0), GE(c) all four. Training: Tu & Gimpel (2018) pretrained h on an automatically
tagged corpus and kept it fixed; *this* paper does not pretrain: "its parameters are
learned when optimizing Θ". So by default the TLMs are ordinary energy parameters (the
`tlm` group, trained with the rest); `sequence.tlm_pretrain_loss` (token NLL of gold tag
sequences) gives the 2018 variant: pretrain, then clamp `tlm` (`trainable=`).

`SequenceEnergy` (`energynets.energies.sequence`) adds the enabled TLMs' terms to its
local and pairwise terms; its docstring lists the choices the paper leaves open.
"""

from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets.nets.rnn import CELLS


class TLMVariant(NamedTuple):
  """One tag language model of Eq. (9): its reading direction and whether it reads words.

  Attributes:
    name: its module under the `tlm` parameter group, and its key in the
      `log_likelihoods` / `log_probs` dicts.
    backward: reads the tags right to left (ȳ'_t), else left to right (ȳ_t).
    words: word-augmented (ỹ_t, weighted by γ): reads the words beside the tags.
  """

  name: str
  backward: bool = False
  words: bool = False


FORWARD = TLMVariant("forward")
BACKWARD = TLMVariant("backward", backward=True)
WORD_FORWARD = TLMVariant("word_forward", words=True)
WORD_BACKWARD = TLMVariant("word_backward", backward=True, words=True)
TLM_VARIANTS = (FORWARD, BACKWARD, WORD_FORWARD, WORD_BACKWARD)
# The paper's three global-energy settings (Table 4).
GLOBAL_ENERGIES = {"a": (FORWARD,), "b": (FORWARD, BACKWARD), "c": TLM_VARIANTS}

Initializer = Callable[..., jax.Array]


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
  def __call__(self, y: jax.Array, words: jax.Array | None = None) -> jax.Array:
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
    carry = jax.tree.map(
      lambda c: c.astype(dtype), cell.initialize_carry(jax.random.key(0), inputs[:, 0].shape)
    )
    hidden = nn.RNN(cell)(inputs, initial_carry=carry)
    return jax.nn.log_softmax(nn.Dense(num_tags + 1, name="head")(hidden), axis=-1)


def tlm_log_likelihood(
  log_probs: jax.Array, y: jax.Array, mask: jax.Array
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


def check_variants(variants) -> tuple[TLMVariant, ...]:
  """`variants` as a tuple, if they are distinct `TLMVariant`s and not none; else a
  one-line TypeError or ValueError."""
  variants = tuple(variants)
  if not all(isinstance(v, TLMVariant) for v in variants):
    raise TypeError(
      f"tlm_variants must be TLMVariant values (FORWARD, BACKWARD, WORD_FORWARD, "
      f"WORD_BACKWARD); got {variants}"
    )
  names = [v.name for v in variants]
  if not names or len(set(names)) != len(names):
    raise ValueError(f"tlm_variants must be distinct and not empty; got {tuple(names)}")
  return variants


class TagLanguageModels(nn.Module):
  """The enabled TLMs (`variants`, distinct `TLMVariant`s) and the word-augmented ones' words.

  `log_likelihoods(y, mask, word_vectors)` gives, per variant, the log-likelihood of
  each row under that TLM (`[B]`; the negative of its energy term); `log_probs` the
  per-token predictive log-probabilities in the original token order.
  """

  variants: tuple[TLMVariant, ...]
  num_tags: int
  hidden_size: int = 128
  cell: str = "optimized_lstm"
  vocab_size: int = 0
  word_dim: int = 100
  word_init: Initializer | None = None
  word_lookahead: bool = False

  def setup(self):
    check_variants(self.variants)
    if self.cell not in CELLS:
      raise ValueError(f"unknown TLM cell {self.cell!r}; expected one of {sorted(CELLS)}")
    self.models = {
      v.name: TagLM(self.num_tags, self.hidden_size, self.cell, name=v.name) for v in self.variants
    }
    if self.uses_words:
      if self.vocab_size < 1:
        raise ValueError(
          "the word-augmented TLMs need the vocabulary size: set "
          "SequenceEnergy.tlm_vocab_size, or give local_net an embedder "
          "with vocab_size"
        )
      init = self.word_init or nn.linear.default_embed_init
      self.words = nn.Embed(self.vocab_size, self.word_dim, embedding_init=init)

  @property
  def uses_words(self) -> bool:
    return any(v.words for v in self.variants)

  def embed_words(self, words: jax.Array, mask: jax.Array) -> jax.Array:
    """`[B, T]` word ids -> `[B, T, word_dim]`, zero at padding."""
    return self.words(words) * mask[..., None]

  def _run(
    self, variant: TLMVariant, y: jax.Array, mask: jax.Array, word_vectors: jax.Array | None
  ):
    """The variant's `TagLM` output on y in its reading order, and y in that order."""
    backward = variant.backward
    y = jnp.where(mask[..., None], y, 0.0)
    if backward:
      y = reverse_real(y, mask)
    words = None
    if variant.words:
      if word_vectors is None:
        raise ValueError(
          f"the {variant.name!r} TLM needs word vectors (SequenceEncoding."
          f"word_vectors, or words=... for the pretraining loss)"
        )
      words = reverse_real(word_vectors, mask) if backward else word_vectors
      zero = jnp.zeros_like(words[:, :1])
      # Step k reads x_k (x_0: the start word, zeros) or, with lookahead, x_{k+1}.
      words = (
        jnp.concatenate([words, zero], axis=1)
        if self.word_lookahead
        else jnp.concatenate([zero, words], axis=1)
      )
    return self.models[variant.name](y, words), y

  def log_likelihoods(
    self, y: jax.Array, mask: jax.Array, word_vectors: jax.Array | None = None
  ) -> dict[str, jax.Array]:
    """`{variant name: [B]}`: `Σ_t log(y_tᵀ ȳ_t)` over the n + 1 predictions of each row."""
    out = {}
    for variant in self.variants:
      log_probs, y_read = self._run(variant, y, mask, word_vectors)
      per_token, end = tlm_log_likelihood(log_probs, y_read, mask)
      out[variant.name] = jnp.sum(per_token, axis=-1) + end
    return out

  def log_probs(
    self, y: jax.Array, mask: jax.Array, word_vectors: jax.Array | None = None
  ) -> dict[str, jax.Array]:
    """`{variant name: [B, T, L + 1]}`: the distribution each TLM predicts for token t (last
    column: the boundary symbol), from the tokens before t (forward) or after t
    (backward), in the original token order; padding rows are meaningless."""
    out = {}
    for variant in self.variants:
      log_probs, _ = self._run(variant, y, mask, word_vectors)
      log_probs = log_probs[:, :-1]
      out[variant.name] = reverse_real(log_probs, mask) if variant.backward else log_probs
    return out

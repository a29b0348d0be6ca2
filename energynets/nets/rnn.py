"""Token embedder, BiLSTM encoder and BiLSTM tagger for sequence labeling.

These are the feature network b(x, t) of the sequence energy of Tu, Pang & Gimpel
(2020), eq. (7), and the BiLSTM inference / task networks of that paper (one-layer
BiLSTMs; hidden 100 for POS, 128 for NER; dropout keep-prob 0.7, i.e. rate 0.3). The
input is the sequence batch dict: `words`, `chars`, `pos`, `chunk` int32 and `mask`
bool (True on real tokens, a prefix of each row).

Padding contract. Every output at a real position is a function of the real tokens
of its row only: the backward LSTM starts at each row's last real token (flax's
`seq_lengths`), the character CNN sees padding characters as the conv's own zero
padding and pools over real characters only, and every output at a padded position
is zero. The last point is not needed for correctness at real positions; it makes
padded positions deterministic, so that a sum over positions that forgets the mask
is wrong by a constant rather than by padding-dependent garbage.

NER+ in the paper also uses the case of the first letter; it is not in the batch
format and is not implemented here (the character CNN sees case).
"""

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets.nets.mlp import float32_outputs
from energynets.tokens import unpack_tokens

Batch = dict[str, jax.Array]
Initializer = Callable[..., jax.Array]

CELLS: dict[str, type] = {"optimized_lstm": nn.OptimizedLSTMCell, "lstm": nn.LSTMCell}


def pretrained_embedding_init(matrix: Any) -> Initializer:
  """An `nn.Embed` initializer that returns a given `[vocab, dim]` matrix (e.g. GloVe).

  A closure rather than an array attribute on the module: flax modules must stay
  hashable, and an array attribute is not. The parameter initialized from it is an
  ordinary trainable parameter (the paper's NER+ fine-tunes GloVe; freezing, as in
  its plain NER setting, is an optimizer choice, e.g. `optax.multi_transform`).
  """
  matrix = jnp.asarray(matrix)
  if matrix.ndim != 2:
    raise ValueError(f"pretrained embedding matrix must be [vocab, dim]; got {matrix.shape}")

  def init(key, shape, dtype=jnp.float32):
    del key
    if tuple(shape) != matrix.shape:
      raise ValueError(
        f"pretrained embedding matrix has shape {matrix.shape} but the "
        f"embedding expects {tuple(shape)} (vocab_size, word_dim)"
      )
    return matrix.astype(dtype)

  return init


def _require(batch: Batch, key: str, why: str) -> jax.Array:
  if key not in batch:
    raise ValueError(f"batch has no {key!r} (needed for {why}); keys: {sorted(batch)}")
  return batch[key]


class CharCNN(nn.Module):
  """`chars [..., C] -> [..., num_filters]`: embed, 1-D conv over characters, max-pool.

  Char id 0 is padding. Its embedding is zeroed before the conv, so it is exactly the
  conv's own zero padding ('SAME'), and the max runs over real characters only; a
  word's vector therefore does not depend on how many padding characters follow it.
  A word with no characters (a padding token) gets zeros. No nonlinearity after the
  pool, as in Ma & Hovy (2016): the max is already one. `dtype`: the compute dtype
  (`TokenEmbedder.dtype`).
  """

  vocab_size: int
  char_dim: int = 30
  num_filters: int = 50
  kernel_size: int = 3
  dtype: Any | None = None

  @nn.compact
  def __call__(self, chars: jax.Array) -> jax.Array:
    real = chars > 0
    emb = nn.Embed(self.vocab_size, self.char_dim, dtype=self.dtype, name="embed")(chars)
    emb = emb * real[..., None]
    lead, num_chars = chars.shape[:-1], chars.shape[-1]
    flat = emb.reshape((-1, num_chars, self.char_dim))
    conv = nn.Conv(
      self.num_filters, (self.kernel_size,), padding="SAME", dtype=self.dtype, name="conv"
    )(flat)
    conv = conv.reshape(lead + (num_chars, self.num_filters))
    pooled = jnp.max(jnp.where(real[..., None], conv, -jnp.inf), axis=-2)
    return jnp.where(real.any(-1)[..., None], pooled, 0.0)


class TokenEmbedder(nn.Module):
  """`batch -> [B, T, D]`: concatenation of the enabled token features, then dropout.

  Word embedding always; character CNN if `char_vocab_size > 0`; POS and chunk
  embeddings (the NER+ setting) if `num_pos` / `num_chunk > 0`. Pass
  `word_init=pretrained_embedding_init(glove)` to start from pretrained vectors.
  `dtype` (e.g. `jnp.bfloat16`) is the dtype of the embedded tokens (the tables stay
  float32); None keeps the tables' float32.
  """

  vocab_size: int
  word_dim: int = 100
  word_init: Initializer | None = None
  char_vocab_size: int = 0
  char_dim: int = 30
  char_filters: int = 50
  char_kernel: int = 3
  num_pos: int = 0
  pos_dim: int = 25
  num_chunk: int = 0
  chunk_dim: int = 25
  dropout: float = 0.0
  dtype: Any | None = None

  @nn.compact
  def __call__(self, batch: Batch, *, train: bool = False) -> jax.Array:
    mask = _require(batch, "mask", "every sequence model")
    words = _require(batch, "words", "the word embedding")
    init = self.word_init or nn.linear.default_embed_init
    parts = [
      nn.Embed(self.vocab_size, self.word_dim, embedding_init=init, dtype=self.dtype, name="words")(
        words
      )
    ]
    if self.char_vocab_size:
      chars = _require(batch, "chars", "the character CNN (char_vocab_size > 0)")
      parts.append(
        CharCNN(
          self.char_vocab_size,
          self.char_dim,
          self.char_filters,
          self.char_kernel,
          dtype=self.dtype,
          name="chars",
        )(chars)
      )
    for key, size, dim in (
      ("pos", self.num_pos, self.pos_dim),
      ("chunk", self.num_chunk, self.chunk_dim),
    ):
      if size:
        ids = _require(batch, key, f"the {key} embedding (num_{key} > 0)")
        parts.append(nn.Embed(size, dim, dtype=self.dtype, name=key)(ids))
    x = jnp.concatenate(parts, axis=-1)
    if self.dropout:
      x = nn.Dropout(self.dropout, deterministic=not train)(x)
    return x * mask[..., None]


class BiLSTM(nn.Module):
  """`x [B, T, D], mask [B, T] -> [B, T, 2·hidden_size]`, forward ‖ backward states.

  `seq_lengths` makes the backward direction start at each row's last real token
  instead of reading padding first. Dropout is applied between layers (not after
  the last; the caller decides what its head sees).

  `dtype` (e.g. `jnp.bfloat16`) is the compute dtype of the cells' matmuls; their
  parameters and carried cell state stay float32 (Flax's cells start the carry in
  `param_dtype`), so the states they return are float32.
  """

  hidden_size: int
  num_layers: int = 1
  dropout: float = 0.0
  cell: str = "optimized_lstm"
  dtype: Any | None = None

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, train: bool = False) -> jax.Array:
    if self.cell not in CELLS:
      raise ValueError(f"unknown LSTM cell {self.cell!r}; expected one of {sorted(CELLS)}")
    if self.num_layers < 1:
      raise ValueError(f"num_layers must be >= 1; got {self.num_layers}")
    if mask.shape != x.shape[:2]:
      raise ValueError(f"mask must be [B, T] = {x.shape[:2]} to match x; got {mask.shape}")
    cell = CELLS[self.cell]
    lengths = mask.sum(axis=-1).astype(jnp.int32)
    for i in range(self.num_layers):
      if i and self.dropout:
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
      # The cells are created here, so their parameters live in this module under
      # these names (the RNN / Bidirectional wrappers hold none).
      forward = cell(self.hidden_size, dtype=self.dtype, name=f"forward_{i}")
      backward = cell(self.hidden_size, dtype=self.dtype, name=f"backward_{i}")
      # Without return_carry the wrapper returns the outputs alone.
      x = cast(
        jax.Array, nn.Bidirectional(nn.RNN(forward), nn.RNN(backward))(x, seq_lengths=lengths)
      )
      x = x * mask[..., None]
    return x


class BiLSTMTagger(nn.Module):
  """`tagger(batch, train=...) -> logits [B, T, num_tags]`: embedder, BiLSTM, Dense.

  With `return_features=True` the call returns `(logits, features)`, where
  `features [B, T, 2H]` is b(x, t), exactly what the head sees (after its dropout),
  as in `MLP`: an energy needs the logits for its local term and the features for
  its other terms, from one pass and with the parameter names of a plain tagger.
  Logits at padded positions are the head's bias; losses must mask them.

  With `packed=True` (or as `PackedTagger`) the input is instead the packed token array
  `x [B, T, 3 + C]` of `energynets.data.pack_tokens` (word id 0 = padding), which is
  what the trainer, the objectives and the energies move; it is unpacked here, so the
  parameters are exactly those of the dict-input tagger.

  `dtype` is the compute dtype of the head (`MLP.dtype`; logits returned float32); give
  the embedder and encoder the same one.
  """

  embedder: TokenEmbedder
  encoder: BiLSTM
  num_tags: int
  dropout: float = 0.0
  packed: bool = False
  dtype: Any | None = None

  @nn.compact
  def __call__(
    self, batch: Batch | jax.Array, *, train: bool = False, return_features: bool = False
  ) -> jax.Array | tuple[jax.Array, jax.Array]:
    if self.packed:
      batch = unpack_tokens(batch)
    elif not isinstance(batch, Mapping):
      raise ValueError(
        f"{type(self).__name__}(packed=False) takes the batch dict; got a "
        f"{type(batch).__name__} (use packed=True for the packed token array)"
      )
    mask = _require(batch, "mask", "every sequence model")
    x = self.embedder(batch, train=train)
    x = self.encoder(x, mask, train=train)
    if self.dropout:
      x = nn.Dropout(self.dropout, deterministic=not train)(x)
    logits = float32_outputs(nn.Dense(self.num_tags, dtype=self.dtype, name="head")(x), self.dtype)
    return (logits, x) if return_features else logits


class PackedTagger(BiLSTMTagger):
  """`BiLSTMTagger` on the packed token array `x [B, T, 3 + C]` (`packed=True`).

  The tagger of the sequence objectives (`local_token_ce`, `crf_objective`) and the
  `local_net` of `energynets.energies.SequenceEnergy`: the same module and parameter
  names in all of them, so a token-CE stage's params drop into the energy unchanged.
  """

  packed: bool = True

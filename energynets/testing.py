"""Test oracles shared by the test suite (and by users checking their own energies), and
`fake_gcs`, a local stand-in for Google Cloud Storage to test `gs://` workdirs offline."""

from collections.abc import Callable
from collections.abc import Iterator
import contextlib
import os
import pathlib
import sys
from typing import Any
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets import domains
from energynets import nets
from energynets.energies import protocol


def directional_derivatives(
  value_fn: Callable[[Any], jax.Array],
  grad_fn: Callable[[Any], Any],
  params: Any,
  seed: int,
  eps: float = 1e-6,
) -> tuple[float, float]:
  """`(⟨grad_fn(params), v⟩, central difference of value_fn along v)` for a random v.

  v is a standard-normal pytree shaped like `params` (drawn from
  `np.random.RandomState(seed)`); the numeric value is
  `(value_fn(params + eps·v) − value_fn(params − eps·v)) / (2·eps)`. Use float64
  parameters or x64 mode (`jax.enable_x64(True)`) for a 1e-6 relative agreement. `grad_fn`
  may differ from the gradient of `value_fn` on purpose (a `stop_gradient` under test).
  """
  rs = np.random.RandomState(seed)
  # Default dtype (float64 under x64): float32 parameters are then shifted in float64 too.
  direction = jax.tree.map(lambda a: jnp.asarray(rs.randn(*jnp.shape(a))), params)
  grads = grad_fn(params)
  analytic = sum(jnp.vdot(g, v) for g, v in zip(jax.tree.leaves(grads), jax.tree.leaves(direction)))
  step = lambda s: jax.tree.map(lambda p, v: p + s * eps * v, params, direction)
  numeric = (value_fn(step(1.0)) - value_fn(step(-1.0))) / (2 * eps)
  return float(analytic), float(numeric)


class EnergyDerivatives(NamedTuple):
  """What `energy_derivatives` measured on `energy_fn` at y (all float64 numpy)."""

  analytic: float  # ⟨∇ Σ_b E_b(y), d⟩ along a random direction d
  finite_difference: float  # the same by central differences of the value
  grad_at_y: np.ndarray  # ∇_y Σ_b E_b(y)
  grad_other: np.ndarray  # the same with every example but the first changed
  hvp: np.ndarray  # ∇²_y Σ_b E_b(y) v (jvp of grad)
  hvp_finite_difference: np.ndarray  # central differences of the gradient along v


def energy_derivatives(
  energy_fn: Callable[[Any], jax.Array], y: np.ndarray, seed: int, eps: float = 1e-5
) -> EnergyDerivatives:
  """The checks every energy `energy_fn(y [B, ...]) -> [B]` should pass, in one call.

  Gradient against finite differences of the value (`directional_derivatives`),
  per-example independence (example 0's gradient must not move when the other
  examples' y change: `grad_at_y[0] == grad_other[0]`), and the Hessian-vector product
  (`jax.jvp` of `jax.grad`, what unrolled GBI differentiates) against central differences
  of the gradient. Call it with float64 inputs (`jax.enable_x64`).
  """
  total = lambda v: jnp.sum(energy_fn(v))
  grad = jax.grad(total)

  @jax.jit
  def derivatives(v, direction):
    g, hvp = jax.jvp(grad, (v,), (direction,))
    return total(v), g, hvp

  value_fn = lambda v: derivatives(v, v)[0]
  grad_fn = lambda v: np.asarray(derivatives(v, v)[1])
  analytic, fd = directional_derivatives(value_fn, grad_fn, y, seed)
  other = np.array(y, copy=True)
  other[1:] = 1.0 - other[1:]
  v = np.random.RandomState(seed + 1).randn(*np.shape(y))
  hvp = np.asarray(derivatives(y, v)[2])
  fd_hvp = (grad_fn(y + eps * v) - grad_fn(y - eps * v)) / (2 * eps)
  return EnergyDerivatives(analytic, fd, grad_fn(y), grad_fn(other), hvp, fd_hvp)


def fit_one_batch(objective, batch, num_steps: int, seed: int = 0) -> tuple[Any, list[float], dict]:
  """`num_steps` jitted `objective.update`s on one fixed batch, from `objective.init`.

  The shared body of the "a few steps reduce the objective's own loss" tests. Returns
  `(state, losses, last_metrics)`; step t uses `jax.random.key(t)`.
  """
  state = objective.init(jax.random.key(seed), batch)
  update = jax.jit(objective.update)
  losses, metrics = [], {}
  for t in range(num_steps):
    state, metrics = update(state, batch, jax.random.key(t))
    losses.append(float(metrics["loss"]))
  return state, losses, metrics


def trajectory_best(y0, trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The oracle of `GBIConfig(pick_best=True)`: per example, the point of lowest objective
  among `y0` and the iterates of a `GBITrace`, as `(t [B], y [B, ...], objective [B])`
  with t = 0 for `y0` and t = k for the k-th iterate."""
  ys = np.concatenate([np.asarray(y0)[None], np.asarray(trace.ys)])
  objectives = np.concatenate([np.asarray(trace.initial_energy)[None], np.asarray(trace.energies)])
  t = np.argmin(objectives, axis=0)
  examples = np.arange(ys.shape[1])
  return t, ys[t, examples], objectives[t, examples]


def assert_trees_equal(tree, reference) -> None:
  """Same structure and exactly equal leaves (what a carried parameter group must be)."""
  # jaxlib ships no type stub for PyTreeDef, so mypy cannot see its __eq__.
  assert jax.tree.structure(tree) == jax.tree.structure(reference), (  # type: ignore[operator]
    jax.tree.structure(tree),
    jax.tree.structure(reference),
  )
  for a, b in zip(jax.tree.leaves(tree), jax.tree.leaves(reference)):
    np.testing.assert_array_equal(a, b)


# A tiny sequence-labeling problem: 4 sentences of lengths 6, 4, 1, 3 padded to 6, a
# vocabulary of 12 words (0 = padding), 3 characters per word, 5 tags.
SEQ_BATCH, SEQ_STEPS, SEQ_CHARS, SEQ_TAGS, SEQ_VOCAB = 4, 6, 3, 5, 12


def tiny_sequence_batch(seed: int = 0) -> tuple[dict, np.ndarray, np.ndarray]:
  """`({"x": packed tokens [4, 6, 6], "y": one-hot tags [4, 6, 5]}, mask, tags)`."""
  b, t, c, num_tags, vocab = SEQ_BATCH, SEQ_STEPS, SEQ_CHARS, SEQ_TAGS, SEQ_VOCAB
  rs = np.random.RandomState(seed)
  lengths = np.array([6, 4, 1, 3])
  mask = np.arange(t) < lengths[:, None]
  words = np.where(mask, rs.randint(2, vocab, (b, t)), 0)
  chars = np.where(mask[..., None], rs.randint(1, 7, (b, t, c)), 0)
  x = np.concatenate([words[..., None], np.zeros((b, t, 2), int), chars], -1)
  tags = rs.randint(0, num_tags, (b, t))
  y = np.eye(num_tags, dtype=np.float32)[tags] * mask[..., None]
  return {"x": jnp.asarray(x.astype(np.int32)), "y": jnp.asarray(y)}, mask, tags


def tiny_tagger():
  """A `PackedTagger` for `tiny_sequence_batch` (word + char CNN, BiLSTM of 5)."""
  return nets.PackedTagger(
    embedder=nets.TokenEmbedder(
      vocab_size=SEQ_VOCAB, word_dim=6, char_vocab_size=7, char_dim=4, char_filters=3
    ),
    encoder=nets.BiLSTM(hidden_size=5),
    num_tags=SEQ_TAGS,
  )


def minimize(
  loss: Callable[[Any], jax.Array], params: Any, steps: int, learning_rate: float = 0.05
) -> tuple[Any, list[float]]:
  """`steps` jitted Adam steps on `loss(params)`; the final params and every step's loss
  (the loss at the params the step started from)."""
  opt = optax.adam(learning_rate)

  @jax.jit
  def step(params, state):
    value, grads = jax.value_and_grad(loss)(params)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state, value

  state, values = opt.init(params), []
  for _ in range(steps):
    params, state, value = step(params, state)
    values.append(float(value))
  return params, values


class LowRankPairEnergy(nn.Module):
  """A user's own multi-label energy as a plain Flax module (no `encode`, no `as_energy`):
  E(x, y) = −⟨W x + b, y⟩ − yᵀ U Vᵀ y, a local linear term and a low-rank label-pair term.

  Attributes:
    num_labels: L.
    rank: the rank of U Vᵀ.
    per_label: return the wrong shape, the local terms `[B, L]` instead of `[B]`.
  """

  num_labels: int
  rank: int = 2
  per_label: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
    local = nn.Dense(self.num_labels, name="local")(x)
    init = nn.initializers.normal(0.3)
    u = self.param("u", init, (self.num_labels, self.rank))
    v = self.param("v", init, (self.num_labels, self.rank))
    pair = jnp.einsum("bi,ir,jr,bj->b", y, u, v, y)
    if self.per_label:
      return -local * y
    return -jnp.sum(local * y, axis=-1) - pair


def low_rank_pair_function(num_features: int, num_labels: int, rank: int = 2):
  """`LowRankPairEnergy` as a user writes it without Flax: a plain function
  `energy(params, x, y) -> [B]` and its init, wrapped by `energy_from_function` on the
  Box domain of `y [B, num_labels]` for `x [B, num_features]`."""

  def low_rank_pair(params, x, y):
    local = x @ params["w"] + params["b"]
    pair = jnp.einsum("bi,ir,jr,bj->b", y, params["u"], params["v"], y)
    return -jnp.sum(local * y, axis=-1) - pair

  def init(rng, x, y):
    del x, y
    keys = jax.random.split(rng, 3)
    return {
      "w": 0.3 * jax.random.normal(keys[0], (num_features, num_labels)),
      "b": jnp.zeros(num_labels),
      "u": 0.3 * jax.random.normal(keys[1], (num_labels, rank)),
      "v": 0.3 * jax.random.normal(keys[2], (num_labels, rank)),
    }

  return protocol.energy_from_function(
    low_rank_pair, domain=domains.Box(), y_shape=(num_labels,), init=init
  )


@contextlib.contextmanager
def fake_gcs(root: str | os.PathLike) -> Iterator[pathlib.Path]:
  """Serves `gs://` URLs from the local folder `root`, for offline tests.

  Inside the context `gs://bucket/run/x` is the file `<root>/bucket/run/x` for everything
  that reaches storage through `etils.epath` (which uses fsspec for `gs://` when
  TensorFlow is absent) and for orbax checkpoints, with orbax's GCS code path (its
  GCS-specific deletion and atomic-rename choices) rather than its local one. What it
  takes over, all restored on exit:

  - fsspec's `gs` and `gcs` protocols (epath asks fsspec for `gcs`): a
    `DirFileSystem` rooted at `root` that, like GCS, refuses to append to a file;
  - etils' cache of fsspec file systems (cleared on entry and exit);
  - orbax's path normalization for TensorStore, so that TensorStore reads and writes
    `<root>/bucket/...` with its file driver instead of calling GCS;
  - orbax's hierarchical-namespace query, which asks the GCS API about the bucket
    (answered: not hierarchical).

  It is one process's view: other processes do not see it unless they enter it too
  (with the same `root`, which then behaves as a bucket they share).

  Args:
    root: the local folder that holds the buckets (created if missing).

  Yields:
    `root` as a `pathlib.Path`.

  Example:
    >>> with fake_gcs(tmp_path) as root:  # doctest: +SKIP
    ...   train_and_evaluate(config, "gs://bucket/run")
    ...   assert (root / "bucket" / "run" / "results.json").exists()
  """
  # pylint: disable=g-import-not-at-top
  from etils.epath import backend as epath_backend
  import fsspec
  from fsspec.implementations.dirfs import DirFileSystem
  from fsspec.implementations.local import LocalFileSystem
  from orbax.checkpoint._src.path import gcs_utils
  from orbax.checkpoint._src.serialization import tensorstore_utils

  # pylint: enable=g-import-not-at-top
  root = pathlib.Path(root).absolute()
  root.mkdir(parents=True, exist_ok=True)
  prefixes = ("gs://", "gcs://")

  class FakeGCSFileSystem(DirFileSystem):
    """`gs://bucket/key` as `<root>/bucket/key`."""

    protocol = ("gs", "gcs")

    def __init__(self, *args, finalize_on_close=None, **kwargs):
      # etils passes GCS's finalize_on_close; a local file is final when closed.
      del args, finalize_on_close, kwargs
      super().__init__(path=str(root), fs=LocalFileSystem(auto_mkdir=True))

    def open(self, path, mode="rb", *args, **kwargs):
      if "a" in mode:  # GCS objects are immutable: no appending, as with gcsfs
        raise NotImplementedError(f"gs://{path}: GCS objects cannot be appended to")
      return super().open(path, mode, *args, **kwargs)

    @classmethod
    def _strip_protocol(cls, path):
      path = fsspec.utils.stringify_path(path)
      for prefix in prefixes:
        path = path.removeprefix(prefix)
      return path.rstrip("/")

  normalize = tensorstore_utils._normalize_path  # pylint: disable=protected-access

  def local_normalize(path: str) -> str:
    for prefix in prefixes:
      if path.startswith(prefix):
        path = str(root / path[len(prefix) :])
    return normalize(path)

  # The module: `fsspec.registry` is also the name of its read-only view.
  registry = sys.modules["fsspec.registry"]._registry  # pylint: disable=protected-access
  saved = {name: registry.get(name) for name in ("gs", "gcs")}
  saved_hns = gcs_utils.is_hierarchical_namespace_enabled
  clear_cache = epath_backend.fsspec_backend._get_filesystem.cache_clear  # pylint: disable=protected-access
  for name in saved:
    fsspec.register_implementation(name, FakeGCSFileSystem, clobber=True)
  tensorstore_utils._normalize_path = local_normalize  # pylint: disable=protected-access
  gcs_utils.is_hierarchical_namespace_enabled = lambda path: False
  clear_cache()
  try:
    yield root
  finally:
    for name, implementation in saved.items():
      if implementation is None:
        registry.pop(name, None)
      else:
        registry[name] = implementation
    tensorstore_utils._normalize_path = normalize  # pylint: disable=protected-access
    gcs_utils.is_hierarchical_namespace_enabled = saved_hns
    clear_cache()

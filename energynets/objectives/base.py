"""The objective interface every method implements (see docs/design.md, "The objective interface").

An `Objective` is a NamedTuple of pure functions, in the spirit of optax's
`GradientTransformation`. The trainer knows nothing about a method beyond it:

- `init(rng, example_batch) -> state`: every parameter group the method trains and
  its optimizer state, as one pytree;
- `update(state, batch, rng) -> (state, metrics)`: one full training step (all of
  its alternations), so that one `jax.jit` covers it;
- `predict(state, x) -> y_soft`: soft prediction in the output domain;
- `init_from(prev_state, rng, example_batch) -> state` (optional): the first state of
  a training stage that continues from the previous stage's final state (staged
  training: pretrain features, clamp them and train the energy, fine-tune all). It
  carries parameters over and starts fresh optimizer states.

A batch is a dict of arrays with a leading batch axis (`{"x": [B, D], "y": [B, L]}`
for multi-label data).
"""

from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Mapping
from typing import Any
from typing import NamedTuple

import flax
import jax
import jax.numpy as jnp
import optax

from energynets.energies.protocol import carried  # noqa: F401  (re-exported)
from energynets.energies.protocol import same_shapes  # re-exported

Batch = Mapping[str, jax.Array]
State = Any
Metrics = dict[str, jax.Array]


class Objective(NamedTuple):
  """A training method as pure functions (see the module docstring), like optax's
  `GradientTransformation`.

  Attributes:
    init: `(rng, example_batch) -> state`, every trained group and its optimizer state.
    update: `(state, batch, rng) -> (state, metrics)`, one full step; `metrics` holds at
      least `loss` and `grad_norm` (scalars).
    predict: `(state, x [B, ...]) -> y_soft [B, ...]`, a soft prediction in the output
      domain (e.g. `[B, L]` in [0, 1] for multi-label data).
    init_from: optional `(prev_state, rng, example_batch) -> state`, the first state of
      a stage that continues from the previous stage's state.
  """

  init: Callable[[jax.Array, Batch], State]
  update: Callable[[State, Batch, jax.Array], tuple[State, Metrics]]
  predict: Callable[[State, jax.Array], jax.Array]
  init_from: Callable[[State, jax.Array, Batch], State] | None = None


class ParamGroup(NamedTuple):
  """Parameters trained by one optimizer, with that optimizer's state.

  Attributes:
    params: the parameters (a pytree, e.g. Flax `params`).
    opt_state: the optimizer's state (an `optax.OptState` for `params`).
  """

  params: Any
  opt_state: Any  # optax.OptState (typed Any: its forward references break pdoc)


def init_group(params: Any, optimizer: optax.GradientTransformation) -> ParamGroup:
  """`ParamGroup(params, optimizer.init(params))`."""
  return ParamGroup(params, optimizer.init(params))


def apply_gradients(
  group: ParamGroup, grads: Any, optimizer: optax.GradientTransformation
) -> ParamGroup:
  """One optimizer step: `group` moved by `grads` (a pytree shaped like its params)."""
  updates, opt_state = optimizer.update(grads, group.opt_state, group.params)
  return ParamGroup(optax.apply_updates(group.params, updates), opt_state)


def minimize_step(
  loss_fn: Callable[..., tuple[jax.Array, Metrics]],
  optimizer: optax.GradientTransformation,
  group: ParamGroup,
  *args: Any,
) -> tuple[ParamGroup, Metrics]:
  """One optimizer step on `loss_fn(params, *args) -> (loss, metrics)`.

  The returned metrics always carry `loss` and the global gradient norm, which the
  trainer uses for logging and for its non-finite-loss guard.
  """
  metrics, grads = metrics_and_grads(loss_fn, group.params, *args)
  return apply_gradients(group, grads, optimizer), metrics


def metrics_and_grads(
  loss_fn: Callable[..., tuple[jax.Array, Metrics]], params: Any, *args: Any
) -> tuple[Metrics, Any]:
  """Gradients of `loss_fn(params, *args) -> (loss, metrics)` w.r.t. `params`, and its
  metrics plus `loss` and the global gradient norm (what the trainer logs and guards)."""
  (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, *args)
  return dict(metrics, loss=loss, grad_norm=optax.tree.norm(grads)), grads


def multilabel_bce(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Per-label binary cross-entropy on logits, summed over labels, averaged over examples.

  The local loss of every multi-label method (BR/MLP, SPEN pretraining, DMF marginals),
  and the pixel BCE of binary segmentation: every non-batch axis is a label axis, so a
  mask `[B, H, W]` sums over its H·W pixels, the same scale as the segmentation
  energies and task losses, which also sum over pixels.
  """
  per_label = optax.sigmoid_binary_cross_entropy(logits, labels)
  return per_label.reshape(per_label.shape[0], -1).sum(-1).mean()


def check_non_negative(name: str, value: Any) -> None:
  """Refuses a negative (or NaN) option; None passes (an unset option).

  Args:
    name: the option's name, for the message.
    value: its value.

  Raises:
    ValueError: one line naming the option and its value.
  """
  if value is not None and not value >= 0:  # `not >=` also refuses NaN
    raise ValueError(f"{name} must be >= 0, got {value}")


def first_match(candidates, reference):
  """The first `(name, params)` of `candidates` shaped like `reference`, else None.

  What `init_from` uses to pick, among groups of a previous state that could seed a
  network (e.g. `test_net`, `net`, `energy.local_net`), the first that fits it.
  """
  for name, params in candidates:
    if params is not None and same_shapes(flax.core.unfreeze(params), reference):
      return name, flax.core.unfreeze(params)
  return None


def l2_penalty(params: Any) -> jax.Array | float:
  """½‖W‖² over weight matrices only (biases are not regularized, as in scikit-learn); 0.0
  when `params` has none."""
  leaves = jax.tree_util.tree_leaves_with_path(params)
  return 0.5 * sum(jnp.sum(jnp.square(leaf)) for path, leaf in leaves if _is_kernel(path))


def _is_kernel(path) -> bool:
  last = path[-1]
  return getattr(last, "key", None) == "kernel"


# Clamped parameter groups (staged training: some top-level groups frozen).


def masked_optimizer(
  optimizer: optax.GradientTransformation, trainable: Collection[str] | None
) -> optax.GradientTransformation:
  """`optimizer` on the top-level groups in `trainable`, zero updates on the rest."""
  if trainable is None:
    return optimizer
  trained = frozenset(trainable)
  labels = lambda params: {k: "trained" if k in trained else "frozen" for k in params}
  return optax.multi_transform({"trained": optimizer, "frozen": optax.set_to_zero()}, labels)


def clamp_groups(params, trainable: frozenset | None):
  """`params` with the top-level groups not in `trainable` behind `stop_gradient`."""
  if trainable is None:
    return params
  return {k: v if k in trainable else jax.lax.stop_gradient(v) for k, v in params.items()}


def groups_l2(params, trainable: frozenset | None) -> jax.Array | float:
  """`l2_penalty` of the `trainable` top-level groups (all when None)."""
  if trainable is not None:
    params = {k: v for k, v in params.items() if k in trainable}
  return l2_penalty(params)

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

import dataclasses
import re
import typing
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

import flax
import jax
import jax.numpy as jnp
import optax

from energynets.energies.protocol import carried, same_shapes  # re-exported

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
  init_from: Optional[Callable[[State, jax.Array, Batch], State]] = None


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


def apply_gradients(group: ParamGroup, grads: Any,
                    optimizer: optax.GradientTransformation) -> ParamGroup:
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


def metrics_and_grads(loss_fn: Callable[..., tuple[jax.Array, Metrics]], params: Any,
                      *args: Any) -> tuple[Metrics, Any]:
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


def field_names(cls) -> tuple[str, ...]:
  """The field names of an options dataclass, in declaration order."""
  return tuple(f.name for f in dataclasses.fields(cls))


def options_not_taken(cls, options) -> tuple[list[str], tuple[str, ...]]:
  """`(sorted names in options that are not fields of cls, cls's fields)`: what the
  name-to-value functions (`get_loss_net_objective`, ...) refuse, and what they list."""
  fields = field_names(cls)
  return sorted(set(options) - set(fields)), fields


def check_choice(value: Any, choices: Sequence[Any], what: str) -> None:
  """Refuses a value outside its choices.

  Args:
    value: the value given (e.g. an option's string).
    choices: the values it may take.
    what: what the value is, for the message (e.g. `'SEAL phase'`).

  Raises:
    ValueError: one line naming `what`, the value and the choices.
  """
  if value not in choices:
    raise ValueError(f"unknown {what} {value!r}; expected one of {tuple(choices)}")


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


def lookup(kind: str, registry: Mapping[str, Any], name: str) -> Any:
  """The entry of `registry` called `name`.

  Args:
    kind: what the registry holds, for the message (e.g. `'primary loss'`).
    registry: `{name: entry}`.
    name: the name asked for.

  Returns:
    `registry[name]`.

  Raises:
    ValueError: one line naming `kind`, the unknown name and the known names.
  """
  if name not in registry:
    raise ValueError(f"unknown {kind} {name!r}; known: {tuple(registry)}")
  return registry[name]


def build_named(kind: str, registry: Mapping[str, type], name: str,
                options: Mapping[str, Any]) -> Any:
  """The value of the options dataclass called `name` in `registry`, built with `options`:
  the body of the name-to-value functions (`get_loss_net_objective`, ...).

  Args:
    kind: what the registry holds, for the messages (e.g. `'primary loss'`).
    registry: `{name: options dataclass}`.
    name: the name asked for.
    options: fields of that dataclass.

  Returns:
    `registry[name](**options)`.

  Raises:
    ValueError: one line naming an unknown `name` and the known names, or options that
      `name`'s dataclass does not take and the fields it does.
  """
  cls = lookup(kind, registry, name)
  foreign, fields = options_not_taken(cls, options)
  if foreign:
    raise ValueError(f"options {foreign} do not apply to the {kind} {name!r} "
                     f"(its options: {fields})")
  return cls(**options)


def sequence_element_type(classes: Sequence[type], field: str) -> Optional[type]:
  """The element type of `field` where the first of `classes` that has it types it as a
  tuple (a list in a config), else None."""
  for cls in classes:
    hints = typing.get_type_hints(cls)
    if field in hints:
      for arg in (hints[field], *typing.get_args(hints[field])):
        if typing.get_origin(arg) is tuple:
          return typing.get_args(arg)[0]
      return None
  return None


def config_value(classes: Sequence[type], field: str, value: Any) -> Any:
  """A config value as the field's value: a tuple field takes a string of names or
  numbers separated by `,` or `+` (`+` lets a list ride inside a comma-separated list
  of runs, as compare's --methods); the empty string is None."""
  element = sequence_element_type(classes, field)
  if element is None or not isinstance(value, str):
    return value
  items = [item.strip() for item in re.split(r"[,+]", value) if item.strip()]
  return tuple(element(item) for item in items) if items else None


def options_from_config(cls: type, block: Mapping[str, Any], *, strict: bool = True,
                        **values: Any) -> Any:
  """An options dataclass from a config block and Python values.

  Args:
    cls: the options dataclass (`SSVMOptions`, `E2EOptions`, `DVNOptions`, ...).
    block: a config block (a dict or a `ConfigDict`); its keys that are fields of `cls`
      are taken, tuple fields from comma-separated strings (`config_value`).
    strict: refuse a key of `block` that is not a field (False for blocks that several
      methods share, e.g. `config.loss`).
    **values: field values (e.g. `GBIConfig`s, or config values of other blocks) that
      override `block`.

  Returns:
    `cls(**fields)`.

  Raises:
    ValueError: one line naming an unknown key and the known fields.
  """
  block = block.to_dict() if hasattr(block, "to_dict") else dict(block)
  fields = field_names(cls)
  unknown = sorted(k for k in set(block) | set(values) if k not in fields
                   and (strict or k in values))
  if unknown:
    raise ValueError(f"unknown {cls.__name__} options {unknown}; known: {fields}")
  kwargs = {k: v for k, v in block.items() if k in fields}
  kwargs.update(values)
  return cls(**{k: config_value((cls,), k, v) for k, v in kwargs.items()})


def resolve_options(cls: type, options: Any, flat: Mapping[str, Any]) -> Any:
  """An objective's options: the `options` value, or `cls(**flat)` from the same
  fields given as keywords, or `cls()`; a one-line ValueError for both at once or for
  a keyword that is not a field."""
  if options is not None:
    if flat:
      raise ValueError(f"give the options either as options={cls.__name__}(...) or as "
                       f"keywords, not both; got options and {sorted(flat)}")
    if not isinstance(options, cls):
      raise TypeError(f"options must be a {cls.__name__}, not {type(options).__name__}")
    return options
  unknown, fields = options_not_taken(cls, flat)
  if unknown:
    raise ValueError(f"unknown {cls.__name__} options {unknown}; known: {fields}")
  return cls(**flat)


def options_and_named_from_config(
    kind: str, options_cls: type, registry: Mapping[str, type], name_key: str,
    default_name: str, get_named: Callable[..., Any], merged: Mapping[str, Any]
) -> tuple[Any, Any]:
  """A family's options and named sub-objective from one flat block of options.

  `merged[name_key]` (default `default_name`) names the sub-objective in `registry`;
  the keys that are `options_cls` fields go to the options, the chosen entry's fields
  to `get_named(name, **those)`. A field of another registry entry is ignored (a config
  block carries every entry's options); any other key is a one-line ValueError naming
  `kind`.
  """
  option_fields = field_names(options_cls)
  named_fields = tuple(dict.fromkeys(
      f for cls in registry.values() for f in field_names(cls)))
  known = (name_key,) + option_fields + named_fields
  unknown = sorted(k for k in merged if k not in known)
  if unknown:
    raise ValueError(f"unknown {kind} options {unknown}; known: {known}")
  name = merged.get(name_key, default_name)
  taken = field_names(registry[name]) if name in registry else ()
  named = get_named(name, **{k: v for k, v in merged.items() if k in taken})
  options = options_cls(**{k: v for k, v in merged.items() if k in option_fields})
  return options, named


def resolve_options_and_named(
    options: Any, named: Any, flat: Mapping[str, Any], *, options_cls: type,
    from_flat: Callable[..., tuple[Any, Any]], default_named: Callable[[], Any],
    owner: str, named_kind: str, beside: str, set_on: str) -> tuple[Any, Any]:
  """An objective family's `(options, named sub-objective)`: the values given, or both
  from flat keywords (`from_flat(**flat)`), or the defaults.

  One-line ValueErrors: `"give {owner} options either as options=...(...) or as
  keywords, not both"`, and `"{named_kind} options [...] given beside {beside}: set them
  on {set_on}"` for a sub-objective's keywords next to a sub-objective value.
  """
  if flat:
    if options is not None:
      raise ValueError(f"give {owner} options either as options={options_cls.__name__}(...) "
                       f"or as keywords, not both; got options and {sorted(flat)}")
    option_fields = field_names(options_cls)
    for_named = sorted(k for k in flat if k not in option_fields)
    if named is not None and for_named:
      raise ValueError(f"{named_kind} options {for_named} given beside {beside}: set them "
                       f"on {set_on}")
    options, from_keywords = from_flat(**flat)
    named = from_keywords if named is None else named
  return (options_cls() if options is None else options,
          default_named() if named is None else named)


def first_match(candidates, reference):
  """The first `(name, params)` of `candidates` shaped like `reference`, else None.

  What `init_from` uses to pick, among groups of a previous state that could seed a
  network (e.g. `test_net`, `net`, `energy.local_net`), the first that fits it.
  """
  for name, params in candidates:
    if params is not None and same_shapes(flax.core.unfreeze(params), reference):
      return name, flax.core.unfreeze(params)
  return None


def l2_penalty(params: Any) -> jax.Array:
  """½‖W‖² over weight matrices only (biases are not regularized, as in scikit-learn)."""
  leaves = jax.tree_util.tree_leaves_with_path(params)
  return 0.5 * sum(jnp.sum(jnp.square(leaf)) for path, leaf in leaves
                   if _is_kernel(path))


def _is_kernel(path) -> bool:
  last = path[-1]
  return getattr(last, "key", None) == "kernel"


# Clamped parameter groups (staged training: some top-level groups frozen).


def masked_optimizer(optimizer: optax.GradientTransformation,
                     trainable: Optional[Sequence[str]]) -> optax.GradientTransformation:
  """`optimizer` on the top-level groups in `trainable`, zero updates on the rest."""
  if trainable is None:
    return optimizer
  trainable = frozenset(trainable)
  labels = lambda params: {k: "trained" if k in trainable else "frozen" for k in params}
  return optax.multi_transform({"trained": optimizer, "frozen": optax.set_to_zero()},
                               labels)


def clamp_groups(params, trainable: Optional[frozenset]):
  """`params` with the top-level groups not in `trainable` behind `stop_gradient`."""
  if trainable is None:
    return params
  return {k: v if k in trainable else jax.lax.stop_gradient(v) for k, v in params.items()}


def groups_l2(params, trainable: Optional[frozenset]) -> jax.Array:
  """`l2_penalty` of the `trainable` top-level groups (all when None)."""
  if trainable is not None:
    params = {k: v for k, v in params.items() if k in trainable}
  return l2_penalty(params)

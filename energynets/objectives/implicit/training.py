"""The implicit objective's losses and bilevel step: L_aux and L_prim as pure functions
(`ImplicitLosses`) and `implicit_objective` (inner steps on the net, then one step of
the energy on the implicit gradient).
"""

from collections.abc import Mapping
from typing import Any
from typing import cast

from absl import logging
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets import diff
from energynets.diff.implicit import MAX_UNROLL
from energynets.energies import protocol
from energynets.objectives import base
from energynets.objectives import outputs
from energynets.objectives.implicit.options import ImplicitOptions
from energynets.objectives.implicit.primary_losses import ImplicitCD
from energynets.objectives.implicit.primary_losses import ImplicitPrimary
from energynets.objectives.implicit.primary_losses import ImplicitPrimaryInputs
from energynets.objectives.seal.blocks import sample_energies


def _check_values(options: ImplicitOptions, primary: ImplicitPrimary) -> None:
  """One-line TypeErrors for options or a primary loss that are not values."""
  if not isinstance(options, ImplicitOptions):
    raise TypeError(f"options must be an ImplicitOptions, not {type(options).__name__}")
  if isinstance(primary, type) or not callable(getattr(primary, "loss", None)):
    raise TypeError(
      f"primary must be a primary loss value (ImplicitSSVM(...), ImplicitCD(...), "
      f"ImplicitDVN() or an object with loss(inputs)); got {primary!r}"
    )


def _as_energy_first(energy: Any) -> protocol.Energy:
  """The `Energy` of the first argument, or a one-line TypeError naming the argument
  order (a swapped call would otherwise train the net as the energy)."""
  try:
    return protocol.as_energy(energy)
  except TypeError as error:
    raise TypeError(
      f"implicit_objective takes (energy, net, optimizer, inner_optimizer); the "
      f"first argument is not an energy: {error}"
    ) from None


class ImplicitLosses:
  """L_aux and L_prim as pure functions of (θ, φ, batch, rng), and the net's logits.

  Args:
    energy: the energy E_φ (an `Energy` or a library energy).
    net: the inference network A_θ.
    options: the family's options.
    primary: L_prim, an `ImplicitPrimary` value.
  """

  def __init__(
    self,
    energy: Any,
    net: nn.Module,
    *,
    options: ImplicitOptions = ImplicitOptions(),
    primary: ImplicitPrimary = ImplicitCD(),
  ):
    _check_values(options, primary)
    self.model = _as_energy_first(energy)
    self.net, self.energy, self.primary, self.options = net, energy, primary, options
    self.energy_weight = options.energy_weight
    self.score = options.score_fn()
    self.l2, self.net_l2 = options.l2, options.net_l2
    self.energy_fn = self.model.energy
    self.structure = outputs.for_domain(self.model.domain)

  def real_score(self, y_soft: jax.Array, y: jax.Array) -> jax.Array:
    """The task score over real positions (sequences: padding excluded)."""
    return self.score(self.structure.mask_padding(y_soft, y), y)

  def logits(self, theta, x: jax.Array, rng: jax.Array | None = None) -> jax.Array:
    # Without `mutable`, `apply` returns the output alone, not `(output, state)`.
    if rng is None:
      return cast(jax.Array, self.net.apply({"params": theta}, x, train=False))
    return cast(jax.Array, self.net.apply({"params": theta}, x, train=True, rngs={"dropout": rng}))

  def aux(self, theta, phi, batch, rng, encoding=None):
    """`(L_aux, metrics)`; `encoding` (of φ, precomputed) saves re-encoding x."""
    if encoding is None:
      encoding = self.model.encode(phi, batch["x"])
    logits = self.logits(theta, batch["x"], rng)
    bce = self.structure.local_loss(logits, batch["y"])  # BCE, or token CE on sequences
    energy = jnp.mean(self.energy_fn(phi, encoding, self.structure.link(logits)))
    loss = bce + self.energy_weight * energy + self.net_l2 * base.l2_penalty(theta)
    return loss, {"bce": bce, "energy": energy}

  def prim(self, theta, phi, batch, rng):
    """`(L_prim, metrics)`; `rng` draws the primary loss's samples (CD's negatives)."""
    x, y = batch["x"], batch["y"]
    logits = self.logits(theta, x)
    y_net = self.structure.link(logits)
    encoding = self.model.encode(phi, x)
    energy_of = lambda ys: sample_energies(self.energy_fn, phi, encoding, ys)
    primary, metrics = self.primary.loss(
      ImplicitPrimaryInputs(
        logits=logits,
        y_net=y_net,
        y=y,
        energies=energy_of,
        score=self.real_score,
        structure=self.structure,
        rng=rng,
      )
    )
    metrics = dict(metrics, primary=primary, gold_energy=jnp.mean(energy_of(y[:, None])))
    return primary + self.l2 * base.l2_penalty(phi), metrics


def implicit_objective(
  energy: Any,
  net: nn.Module,
  optimizer: optax.GradientTransformation,
  inner_optimizer: optax.GradientTransformation,
  *,
  options: ImplicitOptions = ImplicitOptions(),
  primary: ImplicitPrimary = ImplicitCD(),
) -> base.Objective:
  """The implicit bilevel objective; state `{"inference_net", "energy"}` (`ParamGroup`s).

  Args:
    energy: the energy E_φ: any `Energy` (`energy_from_function`, `energy_from_module`)
      or a library energy (`protocol.as_energy`); on the per-token Simplex (a
      `SequenceEnergy`, for taggers) outputs are per-token softmax, token CE,
      categorical negatives (`outputs.for_domain`).
    net: the inference network A_θ, `net(x, train=...) -> logits [B, L]` (a tagger's
      `[B, T, L]` on sequences).
    optimizer: the outer optimizer of φ (the energy's).
    inner_optimizer: the inner optimizer of θ (the net's; its state persists across
      updates).
    options: the family's options, `ImplicitOptions` (default: λ = 1, T_inner = 5,
      `diff.Neumann()`, the implicit term included, soft-F1 score).
    primary: L_prim, an `ImplicitPrimary` value: `ImplicitSSVM(...)`,
      `ImplicitCD(...)` (the default, K = 10 straight-through negatives),
      `ImplicitDVN()` or your own.

  Returns:
    An `Objective`; `update`'s metrics are listed in the module docstring.

  Raises:
    TypeError: one line when the first argument is not an energy (naming the argument
      order), or when `options` / `primary` are not values.
  """
  losses = ImplicitLosses(energy, net, options=options, primary=primary)
  inverse_hvp = options.inverse_hvp
  inner_steps, implicit_term = options.inner_steps, options.implicit_term
  max_residual = options.max_residual

  model = losses.model

  def fresh(rng, batch):
    net_rng, energy_rng = jax.random.split(rng)
    x = batch["x"]
    return (
      flax.core.unfreeze(net.init({"params": net_rng}, x)["params"]),
      # Checked against the batch: a wrong-shaped energy fails here, in one line.
      protocol.init_checked(model, energy_rng, x, batch["y"]),
    )

  def make_state(theta, phi):
    return {
      "inference_net": base.init_group(theta, inner_optimizer),
      "energy": base.init_group(phi, optimizer),
    }

  def init(rng, batch):
    return make_state(*fresh(rng, batch))

  def init_from(prev_state, rng, batch):
    theta, _ = fresh(rng, batch)
    phi = model.continue_from(prev_state, rng, batch["x"], batch["y"])
    prev = {k: getattr(v, "params", v) for k, v in prev_state.items()}
    # The carried local_net, where the energy's parameter tree has one (a SPEN's): the
    # previous energy's, a local_bce MLP or token-CE tagger, or a CRF's tagger (whose
    # {"tagger", "crf"} params match no inference net themselves).
    local = phi.get("local_net") if isinstance(phi, Mapping) else None
    match = base.first_match(
      [
        ("inference_net", prev.get("inference_net")),
        ("test_net", prev.get("test_net")),
        ("net", prev.get("net")),
        ("energy.local_net", local),
      ],
      theta,
    )
    source = match[0] if match else "fresh"
    theta = match[1] if match else theta
    logging.info(
      "implicit init_from: inference_net <- %s, energy <- %s",
      source,
      "energy" if "energy" in prev else "net -> local_net",
    )
    return make_state(theta, phi)

  def update(state, batch, rng):
    inner_rng, hessian_rng, prim_rng = jax.random.split(rng, 3)
    phi = state["energy"].params
    # φ is fixed during the inner loop: encode x once.
    encoding = jax.lax.stop_gradient(model.encode(phi, batch["x"]))

    def inner_step(group, step_rng):
      return base.minimize_step(losses.aux, inner_optimizer, group, phi, batch, step_rng, encoding)

    # Unrolled, as are the Neumann terms: a loop around the BiLSTM taggers runs several
    # times slower on XLA:CPU than the unrolled steps. Up to
    # MAX_UNROLL steps per loop iteration: the configs' T_inner (≤ 10) unrolls
    # fully, while a long inner loop (the tests' 1500 steps) compiles in seconds instead
    # of minutes.
    theta_group, inner_metrics = jax.lax.scan(
      inner_step,
      state["inference_net"],
      jax.random.split(inner_rng, inner_steps),
      unroll=min(inner_steps, MAX_UNROLL),
    )
    theta = theta_group.params
    aux = lambda t, p: losses.aux(t, p, batch, hessian_rng)[0]
    prim = lambda t, p: losses.prim(t, p, batch, prim_rng)
    norm = optax.tree.norm
    if implicit_term:
      g = diff.implicit_gradient(aux, prim, theta, phi, inverse_hvp, has_aux=True)
      value, prim_metrics = g.value, g.aux
      used = g.residual <= max_residual
      grads = jax.tree.map(lambda e, t: jnp.where(used, t, e), g.explicit, g.total)
      extra = dict(
        explicit_norm=norm(g.explicit),
        implicit_norm=norm(g.implicit),
        prim_grad_theta_norm=norm(g.prim_grad_theta),
        ihvp_residual=g.residual,
        implicit_used=used.astype(jnp.float32),
      )
    else:
      (value, prim_metrics), grads = jax.value_and_grad(prim, argnums=1, has_aux=True)(theta, phi)
      extra = dict(explicit_norm=norm(grads))
    energy_group = base.apply_gradients(state["energy"], grads, optimizer)
    metrics = dict(prim_metrics, loss=value, grad_norm=norm(grads), **extra)
    metrics.update(
      {
        f"aux_{k}": v[-1]
        for k, v in inner_metrics.items()
        if k in ("loss", "bce", "energy", "grad_norm")
      }
    )
    return {"inference_net": theta_group, "energy": energy_group}, metrics

  def predict(state, x):
    return losses.structure.link(losses.logits(state["inference_net"].params, x))

  return base.Objective(init, update, predict, init_from)

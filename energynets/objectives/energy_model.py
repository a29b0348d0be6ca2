"""What an objective needs from an energy, as pure functions: `EnergyModel`.

The inference-based objectives (`ssvm`, `e2e`) are written once against this interface,
so the same SSVM or end-to-end training applies to the multi-label `SPENEnergy` (Box
domain, features computed once per x) and to any Flax energy module `E(x, y) -> [B]`
with y shaped like x (the denoising energies: Real domain, GBI from the noisy input).

- `spen_model(SPENEnergy)`: `encode` runs the feature network and local head once
  (`Encoding`), `energy` is `energy_from_encoding`, starts `'uniform'` (0.5) or
  `'local'` (σ of the local logits) (and DVN's `'random'`, see `RANDOM`), parameter
  groups `param_groups(energy)`, and `carry` continues a SPEN state or a `local_bce` MLP
  (its params become `local_net`).
- `module_model(module, domain)`: `encode` is the identity, starts `'input'` (y_0 = x),
  `'uniform'` or `'zeros'`; `carry` continues a state with the same `energy` params.
- `sequence_model(SequenceEnergy)`: the Simplex per token; `encode` runs the tagger once
  (`SequenceEncoding`), starts `'uniform'` (1/L) or `'local'` (softmax of the logits),
  `carry` continues a sequence-energy state, a token-CE tagger or a CRF.
- `segmentation_model(SegmentationEnergy)`: the Box over pixels (masks `[B, H, W]`, x
  images `[B, H, W, C]`, so not y shaped like x); `encode` runs the local FCN once
  (`SegmentationEncoding`), starts `'uniform'` (0.5) or `'local'` (σ of the FCN's
  logits) (and DVN's `'random'`), `carry` continues a segmentation-energy state or a
  `local_bce` FCN.

The SPEN adapters (`encode`, `encoding_energy`, `start_point`, `init_params`,
`carry_params`) are also used directly by the SEAL, DVN and inference-network
objectives, whose loss-nets are SPEN energies.
"""

from typing import Any, Callable, NamedTuple, Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets import domains
from energynets.energies.mlc import Encoding, LocalNetEnergy, SPENEnergy, param_groups
from energynets.energies import image as image_lib
from energynets.energies import sequence as sequence_lib
from energynets.inference import gbi as gbi_lib
from energynets.objectives import base

INITS = ("uniform", "local")
# `start_point` (so the SPEN and segmentation models' `start`) also takes a random point,
# U[0,1] per coordinate, for DVN (SEAL's public DVN configs). It is not in those models'
# `inits`: SSVM's loss-augmented starts must not take it, since a fixed key would give
# the same "random" point at every step. At test time it comes from the fixed key
# `RANDOM_START_SEED`, so prediction stays deterministic; DVN's training-time samples
# draw their own keys.
RANDOM = "random"
RANDOM_START_SEED = 0
MODULE_INITS = ("input", "uniform", "zeros")
NON_SMOOTH = ("relu", "hardtanh")
BOX = domains.Box()


# ---------------------------------------------------------------------------------------
# SPEN energies.


def encoding_energy(energy: SPENEnergy) -> gbi_lib.EnergyFn:
  """`(params, Encoding, y) -> [B]`: the energy over a precomputed `encode(x)`."""
  def fn(params, encoding, y):
    return energy.apply({"params": params}, encoding, y,
                        method="energy_from_encoding")
  return fn


def encode(energy: SPENEnergy, params, x: jax.Array, train: bool = False,
           rng: Optional[jax.Array] = None) -> Encoding:
  rngs = {"dropout": rng} if rng is not None else None
  return energy.apply({"params": params}, x, train=train, rngs=rngs,
                      method="encode")


def start_point(encoding: Encoding, init: str, rng: Optional[jax.Array] = None) -> jax.Array:
  """GBI's `y0` on the Box: uniform (0.5), the local classifier's `sigmoid(logits)`, or
  random, U[0,1] from `rng` (default: the fixed key of `RANDOM_START_SEED`)."""
  shape, dtype = encoding.logits.shape, encoding.logits.dtype
  if init == "uniform":
    return BOX.uniform_init(shape, dtype)
  if init == "local":
    return jax.nn.sigmoid(encoding.logits)
  if init == RANDOM:
    key = jax.random.PRNGKey(RANDOM_START_SEED) if rng is None else rng
    return jax.random.uniform(key, shape, dtype)
  raise ValueError(f"unknown init {init!r}; expected one of {INITS + (RANDOM,)}")


def init_params(energy: SPENEnergy, rng: jax.Array, x: jax.Array):
  y = jnp.zeros(x.shape[:1] + (energy.num_labels,), x.dtype)
  return flax.core.unfreeze(energy.init({"params": rng}, x, y)["params"])


def carry_params(energy: SPENEnergy, prev_state, rng: jax.Array, x: jax.Array):
  """The energy params that continue `prev_state`.

  `prev_state` is either a SPEN state `{"energy": ParamGroup}` (all params carried) or
  a `local_bce` state `{"net": ParamGroup}` of the same MLP (its params become
  `local_net`; the other groups are freshly initialized from `rng`).
  """
  reference = jax.eval_shape(lambda: init_params(energy, rng, x))
  if "energy" in prev_state:
    return base.carried(prev_state["energy"].params, reference,
                        "the previous SPEN state into this SPENEnergy")
  if "net" in prev_state:
    local = base.carried(prev_state["net"].params, reference["local_net"],
                         "the local_bce network into this SPENEnergy as local_net")
    return dict(init_params(energy, rng, x), local_net=local)
  raise ValueError(f"cannot continue from a state with keys {sorted(prev_state)}; expected "
                   "'energy' (a SPEN stage) or 'net' (local_bce)")


# ---------------------------------------------------------------------------------------
# The interface.


class EnergyModel(NamedTuple):
  """What `e2e_objective` needs from an energy, as pure functions.

  Attributes:
    domain: the relaxation GBI searches (`Box` for multi-label, `Real` for denoising).
    init_params: `(rng, x, y) -> params`, a fresh initialization from example arrays.
    encode: `(params, x, train, rng) -> inputs`: what the energy conditions on,
      computed once per example before inference and differentiable (SPEN: the features
      and local logits; an image energy: x itself). `rng` is None at test time.
    energy: `(params, inputs, y) -> [B]`, GBI's inner function.
    start: `(inputs, x, init) -> y_0` for an init name of `inits`.
    inits: the init names `start` accepts.
    carry: `(prev_state, rng, x, y) -> params`, the parameters that continue a previous
      stage's state (staged training).
    groups: the top-level parameter names `trainable` may pick (None: not checked).
    candidate_energy: `(params, inputs, candidates [C, L]) -> [B, C]`, the energy of
      every example with every labeling, for exact inference by enumeration
      (`energynets.inference.exhaustive`); None: `exhaustive.pairwise_table(energy)`.
  """
  domain: Any
  init_params: Callable[..., Any]
  encode: Callable[..., Any]
  energy: Callable[..., jax.Array]
  start: Callable[..., jax.Array]
  inits: tuple[str, ...]
  carry: Callable[..., Any]
  groups: Optional[tuple[str, ...]] = None
  candidate_energy: Optional[Callable[..., jax.Array]] = None


def check_smooth(module: nn.Module) -> None:
  """ValueError if `module.activation` names a non-smooth non-linearity (ReLU, HardTanh).

  Training through GBI differentiates `∇_y E`: with a piecewise-linear activation the
  Hessian is zero almost everywhere, so the unroll passes no second-order signal (and
  HardTanh's flat regions stop GBI altogether).
  """
  activation = getattr(module, "activation", None)
  if isinstance(activation, str) and activation in NON_SMOOTH:
    raise ValueError(
        f"{type(module).__name__}.activation={activation!r} is not smooth: energies trained "
        f"end to end through inference need a twice-differentiable non-linearity "
        f"(E2E-SPEN §5 uses softplus); use activation='softplus'")


def spen_model(energy: SPENEnergy) -> EnergyModel:
  """A SPEN-style energy (`SPENEnergy`, `ICNNEnergy`) on the Box: F(x) and the local
  logits computed once by `encode`."""

  def encode_x(params, x, train=False, rng=None):
    return encode(energy, params, x, train=train, rng=rng)

  def start(encoding, x, init):
    del x
    return start_point(encoding, init)

  candidate_energy = None
  if hasattr(energy, "candidate_energies"):
    def candidate_energy(params, encoding, candidates):
      return energy.apply({"params": params}, encoding, candidates,
                          method="candidate_energies")

  return EnergyModel(
      domain=BOX,
      init_params=lambda rng, x, y: init_params(energy, rng, x),
      encode=encode_x,
      energy=encoding_energy(energy),
      start=start,
      inits=INITS,
      carry=lambda prev_state, rng, x, y: carry_params(energy, prev_state, rng, x),
      groups=param_groups(energy),
      candidate_energy=candidate_energy)


def sequence_model(energy: sequence_lib.SequenceEnergy) -> EnergyModel:
  """A `SequenceEnergy` on the per-token Simplex; the tagger runs once per x (`encode`).

  Starts: `'uniform'` (1/L per token) or `'local'` (the tagger's softmax). Padded
  positions get the same treatment as real ones (a point of the simplex); the energy
  ignores them, so GBI moves them only through the entropy term, harmlessly, and
  decoding must mask them as for every sequence output.

  `carry` continues `prev_state`:
  - `{"energy": ...}` of a sequence energy: every group carried;
  - `{"net": ...}` of `local_token_ce` (the same tagger): its params become `local_net`;
  - `{"net": ...}` of `crf_objective` (`{"tagger", "crf"}`): the tagger becomes
    `local_net` and the CRF transitions W become `pairwise` (its start and end scores
    have no counterpart in Eq. (7) and are dropped);
  other groups are freshly initialized from `rng`.

  Objectives take this model, not the bare module: `as_model` does not recognize a
  `SequenceEnergy` (it would treat it as a module with y shaped like x).
  """
  simplex = domains.Simplex()

  def init_params(rng, x, y=None):
    del y
    return sequence_lib.init_params(energy, rng, x)

  def encode_x(params, x, train=False, rng=None):
    rngs = {"dropout": rng} if rng is not None else None
    return energy.apply({"params": params}, x, train=train, rngs=rngs, method="encode")

  def energy_fn(params, encoding, y):
    return energy.apply({"params": params}, encoding, y, method="energy_from_encoding")

  def start(encoding, x, init):
    del x
    logits = encoding.logits
    if init == "uniform":
      return simplex.uniform_init(logits.shape, logits.dtype)
    if init == "local":
      return jax.nn.softmax(logits, axis=-1)
    raise ValueError(f"unknown init {init!r}; expected one of {INITS}")

  def carry(prev_state, rng, x, y=None):
    reference = jax.eval_shape(lambda: init_params(rng, x))
    if "energy" in prev_state:
      return base.carried(prev_state["energy"].params, reference,
                          "the previous state into this SequenceEnergy")
    if "net" in prev_state:
      prev = flax.core.unfreeze(prev_state["net"].params)
      if isinstance(prev, dict) and set(prev) == {"tagger", "crf"}:
        carried = dict(
            local_net=base.carried(prev["tagger"], reference["local_net"],
                                   "the CRF's tagger into this SequenceEnergy as local_net"),
            pairwise=base.carried(prev["crf"]["transitions"], reference["pairwise"],
                                  "the CRF transitions into this SequenceEnergy as pairwise"))
      else:
        carried = dict(local_net=base.carried(
            prev, reference["local_net"],
            "the token-CE tagger into this SequenceEnergy as local_net"))
      # Checked before the (costly) fresh initialization of the other groups.
      return dict(init_params(rng, x), **carried)
    raise ValueError(f"cannot continue from a state with keys {sorted(prev_state)}; expected "
                     "'energy' (a sequence-energy stage) or 'net' (token CE or CRF)")

  return EnergyModel(
      domain=simplex,
      init_params=init_params,
      encode=encode_x,
      energy=energy_fn,
      start=start,
      inits=INITS,
      carry=carry,
      groups=sequence_lib.param_groups(energy))


def segmentation_model(energy: image_lib.SegmentationEnergy) -> EnergyModel:
  """A `SegmentationEnergy` on the Box over pixels; the local FCN runs once per x.

  The SPEN adapters apply as they are (`encode`, `encoding_energy`, `start_point`: the
  starts `'uniform'` and `'local'` read only the encoding's `[B, H, W]` logits); what
  differs is the shape of y, `[B, H, W]` for images x `[B, H, W, C]`.

  `carry` continues `prev_state`:
  - `{"energy": ...}` of a segmentation energy: every group carried;
  - `{"net": ...}` of `local_bce` on the same `FCN`: its params become `local_net` (the
    pretrain stage of staged training), `global` is freshly initialized from `rng`.
  """

  def init(rng, x, y=None):
    del y  # a mask shaped like the images' pixels
    return flax.core.unfreeze(
        energy.init({"params": rng}, x, jnp.zeros(x.shape[:3], jnp.float32))["params"])

  def start(encoding, x, init_name):
    del x
    return start_point(encoding, init_name)

  def carry(prev_state, rng, x, y=None):
    reference = jax.eval_shape(lambda: init(rng, x))
    if "energy" in prev_state:
      return base.carried(prev_state["energy"].params, reference,
                          "the previous state into this SegmentationEnergy")
    if "net" in prev_state and energy.local_net is not None:
      local = base.carried(prev_state["net"].params, reference["local_net"],
                           "the local_bce FCN into this SegmentationEnergy as local_net")
      return dict(init(rng, x), local_net=local)
    raise ValueError(f"cannot continue from a state with keys {sorted(prev_state)}; expected "
                     "'energy' (a segmentation-energy stage) or 'net' (a local_bce FCN, "
                     "for an energy with a local_net)")

  return EnergyModel(
      domain=BOX,
      init_params=init,
      encode=lambda params, x, train=False, rng=None: encode(energy, params, x, train, rng),
      energy=encoding_energy(energy),
      start=start,
      inits=INITS,
      carry=carry,
      groups=image_lib.segmentation_param_groups(energy))


def module_model(module: nn.Module, domain=domains.Real()) -> EnergyModel:
  """Any Flax module `E(x, y) -> [B]` with y shaped like x (denoising).

  `encode` is the identity (the energy sees x itself); starts: `'input'` (y_0 = x, the
  noisy image), `'uniform'` (`domain.uniform_init`) or `'zeros'`.
  """

  def init_params(rng, x, y):
    return flax.core.unfreeze(module.init({"params": rng}, x, y)["params"])

  def encode(params, x, train=False, rng=None):
    del params, train, rng
    return x

  def energy(params, x, y):
    return module.apply({"params": params}, x, y)

  def start(x_enc, x, init):
    del x_enc
    if init == "input":
      return jnp.asarray(x)
    if init == "uniform":
      return domain.uniform_init(x.shape, x.dtype)
    if init == "zeros":
      return jnp.zeros_like(x)
    raise ValueError(f"unknown init {init!r}; expected one of {MODULE_INITS}")

  def carry(prev_state, rng, x, y):
    if "energy" not in prev_state:
      raise ValueError(f"cannot continue from a state with keys {sorted(prev_state)}; "
                       "expected 'energy'")
    reference = jax.eval_shape(lambda: init_params(rng, x, y))
    return base.carried(prev_state["energy"].params, reference,
                        f"the previous state into this {type(module).__name__}")

  return EnergyModel(domain, init_params, encode, energy, start, MODULE_INITS, carry)


def as_model(energy) -> EnergyModel:
  """`EnergyModel` as is; a SPEN-style energy (`SPENEnergy`, `ICNNEnergy`: `encode` +
  `energy_from_encoding`) -> `spen_model`; a `SequenceEnergy` -> `sequence_model`;
  a `SegmentationEnergy` -> `segmentation_model`; other modules -> `module_model`."""
  if isinstance(energy, EnergyModel):
    return energy
  if isinstance(energy, LocalNetEnergy):  # SPENEnergy, ICNNEnergy
    return spen_model(energy)
  if isinstance(energy, sequence_lib.SequenceEnergy):
    return sequence_model(energy)
  if isinstance(energy, image_lib.SegmentationEnergy):
    return segmentation_model(energy)
  if isinstance(energy, nn.Module):
    return module_model(energy)
  raise TypeError(f"expected an EnergyModel, a SPENEnergy or a Flax module; got "
                  f"{type(energy).__name__}")


def trainable_groups(model: EnergyModel, trainable) -> Optional[frozenset]:
  """`trainable` (group names, or None for all) checked against the model's groups."""
  if trainable is None:
    return None
  if isinstance(trainable, str):
    raise TypeError(f"trainable must be a sequence of group names, not the string "
                    f"{trainable!r}; write ({trainable!r},)")
  if model.groups is not None and (set(trainable) - set(model.groups) or not trainable):
    raise ValueError(f"trainable must name some of {model.groups}; got {tuple(trainable)}")
  return frozenset(trainable)

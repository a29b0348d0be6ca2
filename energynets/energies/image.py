"""Image energies: the denoising energies of E2E-SPEN (Belanger, Yang & McCallum 2017,
§6.1). The binary-segmentation energy of DVN / SEAL is `energynets.energies.segmentation`.

x is the observed noisy grayscale image and y a candidate clean image, both `[B, H, W]`
in the data's scale: the project's denoising data are in [0, 1] (PSNR is then reported
with peak 1 ≙ 255), and `noise_variance` is in that scale (σ = 25/255 ≈ 0.1 gives
σ² ≈ 0.01). Every energy returns `[B]`, one value per example; there are no batch
statistics, so an example's energy and GBI trajectory do not depend on its batch-mates.
H and W are free (subject to the receptive field under `VALID` padding).

Both energies are MAP energies for a Gaussian noise model (§6.1, Eq. 12):

    E(x, y) = (1 / (2σ²)) Σ_p (y_p − x_p)²  +  R(y),        R(y) = −log P(y) + const,

where σ² is trainable ("we treat σ² as a trainable parameter", §6.1.2; stored as
`log_noise_variance`, σ² = exp(·) > 0) or fixed (`learn_noise_variance=False`). The
printed Eq. 12 is garbled in our copy of the paper; it is either this form or
`‖y − x‖² − 2σ² log P(y)`, which is the same energy times 2σ²: same minimizer, only the
scale of the gradient (hence GBI's step size) differs. The prior sees only y: "the second
[term], which does not depend on x, is the global energy network" (§6.1).

- `FieldOfExperts` (§6.1.1, Eqs. 13–14): the ℓ1 field of experts
  `R(y) = Σ_k α_k Σ_p SoftAbs((f_k ⋆ y)(p))`, with K learned filters f_k and the paper's
  smooth absolute value
      SoftPlus_β(u) = (1/β) log(1 + exp(β u)),
      SoftAbs(u)    = ½ SoftPlus_β(u) + ½ SoftPlus_β(−u)          (Eq. 14, β = 25),
  "a SoftPlus with temperature 25". The paper's "temperature" is Torch's `SoftPlus(beta)`,
  a sharpness: larger β is closer to the kink. Note that SoftAbs(u) → |u|/2 (not |u|)
  for |u| ≫ 1/β and SoftAbs(0) = log(2)/β; the ½ and the per-pixel constant are absorbed
  by α_k and change no gradient. α_k = exp(`log_weights`_k) ≥ 0 separates a filter's
  strength from its shape relative to 1/β (Eq. 13 has no α: with the exact |·| it would
  be redundant with the filter's norm, with SoftAbs it is not). The paper gives neither
  K nor the filter size; the defaults (24 filters of 5×5) are Roth & Black's (2005) FoE.
  The energy is convex in y for any filters (α ≥ 0 and SoftAbs convex), as §6.1.3 notes.
- `DeepPriorEnergy` (§6.1.1, Eq. 15): `R(y) = DNN(y)`, "a 7×7×32 convolution, a SoftPlus,
  another 7×7×32 convolution, a SoftPlus, a 1×1×1 convolution, and finally spatial
  average pooling" (the trunk is `energynets.nets.ConvStack`, shared with the
  feed-forward `CNNDenoiser` baseline). Pooling is a per-example *sum* over output
  pixels by default (`pooling=sum_pool`), `mean_pool` being the literal reading. For a fixed
  image size the two are the same function class (sum = H'W' · mean; the 1×1 weights
  rescale), but with the data term a sum over pixels, mean pooling shrinks the prior's
  per-pixel gradient by 1/(H'W'): at 96×128 training crops the prior would start ~10⁴
  times weaker than the data term, and a model (and its learned GBI step sizes) trained
  on crops would weigh its prior differently on full test images. With sums both terms'
  per-pixel gradients are local and independent of the image size.

Convolutions are cross-correlations (`f ⋆ y`, as `flax.linen.Conv`); for learned filters
this is the paper's `f * y` with the filters flipped. Padding (`energynets.nets.VALID` by default):
filters are applied only where they fit inside the image, so no invented border pixels
are penalized (zero padding would make every bright border an "edge"); border pixels are
then constrained by fewer filter responses, and the image must be at least as large as
the receptive field. `REFLECT` (mirror padding, full-size response maps) and `SAME`
(zeros) are available.

Smoothness: SoftPlus and SoftAbs are C^∞, so both energies are twice differentiable in y,
as unrolled GBI training requires (Hessian-vector products, E2E-SPEN §3); do not pick a
ReLU activation for the DeepPrior when training through inference.
"""

from collections.abc import Callable
from collections.abc import Sequence
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets import domains
from energynets.energies import protocol
from energynets.nets import VALID
from energynets.nets import ConvStack
from energynets.nets.cnn import ConvImpl
from energynets.nets.cnn import Padding
from energynets.nets.cnn import auto_conv
from energynets.nets.cnn import check_padding
from energynets.nets.cnn import conv2d
from energynets.nets.cnn import pad_image
from energynets.nets.cnn import sum_pool
from energynets.nets.mlp import Activation
from energynets.nets.mlp import checked_activation
from energynets.nets.mlp import softplus

__all__ = [
  "DeepPriorEnergy",
  "FieldOfExperts",
  "GaussianDataTerm",
  "soft_abs",
  "softplus_t",
]


def softplus_t(u: jax.Array, temperature: float) -> jax.Array:
  """`(1/β) log(1 + exp(β u))`, Torch's `SoftPlus(beta=β)` (the paper's "temperature" β)."""
  return softplus(temperature * u) / temperature


def soft_abs(u: jax.Array, temperature: float = 25.0) -> jax.Array:
  """E2E-SPEN Eq. 14: `½ SoftPlus_β(u) + ½ SoftPlus_β(−u)`, a smooth |u|/2; β = temperature."""
  return 0.5 * softplus_t(u, temperature) + 0.5 * softplus_t(-u, temperature)


def _check_images(x: jax.Array, y: jax.Array) -> None:
  if y.ndim != 3 or x.shape != y.shape:
    raise ValueError(
      f"x and y must both be [B, H, W] grayscale images of one shape; got x {x.shape}, y {y.shape}"
    )


def _check_size(y: jax.Array, receptive_field: int, padding: Padding, who: str) -> None:
  if not padding.keeps_size and min(y.shape[1], y.shape[2]) < receptive_field:
    raise ValueError(
      f"{who} with 'VALID' padding needs images of at least "
      f"{receptive_field}x{receptive_field} pixels; got {y.shape[1:]}"
    )


class GaussianDataTerm(nn.Module):
  """`(x, y) -> [B]`: `Σ_p (y_p − x_p)² / (2σ²)`, the negative Gaussian log-likelihood.

  Attributes:
    noise_variance: σ² in the images' scale; the initial value when learned.
    learn_noise_variance: learn σ² as `exp(log_noise_variance)` (paper, §6.1.2; the log
      keeps it positive without a projection and makes its updates scale-free).
  """

  noise_variance: float = 0.01
  learn_noise_variance: bool = True

  def setup(self):
    if not self.noise_variance > 0:
      raise ValueError(f"noise_variance must be positive; got {self.noise_variance}")
    if self.learn_noise_variance:
      self.log_noise_variance = self.param(
        "log_noise_variance", nn.initializers.constant(math.log(self.noise_variance)), ()
      )

  def variance(self) -> jax.Array:
    """σ², learned or fixed."""
    if self.learn_noise_variance:
      return jnp.exp(self.log_noise_variance)
    return jnp.asarray(self.noise_variance)

  def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
    sq = jnp.sum(jnp.square(y - x), axis=tuple(range(1, y.ndim)))
    return sq / (2.0 * self.variance().astype(sq.dtype))


class FieldOfExperts(nn.Module):
  """The SoftAbs field-of-experts denoising energy `E(x, y) -> [B]` (module docstring).

      E(x, y) = Σ_p (y_p − x_p)² / (2σ²) + Σ_k α_k Σ_p SoftAbs_β((f_k ⋆ y)(p))

  Parameters: `data_term/log_noise_variance` (if learned), `filters/kernel`
  `[s, s, 1, K]` (no bias: Eq. 13 has none), `log_weights` `[K]` (α = exp).

  Attributes:
    num_filters: K.
    filter_size: s (filters are s×s).
    temperature: β of SoftAbs (paper: 25; larger is sharper).
    noise_variance, learn_noise_variance: the data term (`GaussianDataTerm`).
    init_weight: the initial α_k (all equal).
    padding: an `energynets.nets.Padding` (default `VALID`; module docstring).
    conv_impl: how the filters are applied (`energynets.nets.auto_conv`, `lax_conv`,
      `patch_conv`; the same function either way).
  """

  num_filters: int = 24
  filter_size: int = 5
  temperature: float = 25.0
  noise_variance: float = 0.01
  learn_noise_variance: bool = True
  init_weight: float = 1.0
  padding: Padding = VALID
  conv_impl: ConvImpl = auto_conv

  def setup(self):
    if self.num_filters < 1 or self.filter_size < 1 or not self.temperature > 0:
      raise ValueError(
        f"bad FieldOfExperts settings: num_filters={self.num_filters}, "
        f"filter_size={self.filter_size}, temperature={self.temperature}"
      )
    if not self.init_weight > 0:
      raise ValueError(f"init_weight must be positive; got {self.init_weight}")
    self.data_term = GaussianDataTerm(self.noise_variance, self.learn_noise_variance)
    self.filters = conv2d(
      self.num_filters,
      (self.filter_size, self.filter_size),
      padding=check_padding(self.padding).conv_padding,
      conv_impl=self.conv_impl,
      use_bias=False,
    )
    self.log_weights = self.param(
      "log_weights", nn.initializers.constant(math.log(self.init_weight)), (self.num_filters,)
    )

  def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
    """`x, y [B, H, W] -> [B]`."""
    _check_images(x, y)
    return self.data_term(x, y) + self.prior_energy(y)

  def filter_responses(self, y: jax.Array) -> jax.Array:
    """`[B, H', W', K]`: `(f_k ⋆ y)(p)` at every position the padding allows."""
    _check_size(y, self.filter_size, self.padding, "FieldOfExperts")
    v, _ = pad_image(y[..., None], self.filter_size, self.padding)
    return self.filters(v)

  def prior_energy(self, y: jax.Array) -> jax.Array:
    """`[B]`: `Σ_k α_k Σ_p SoftAbs((f_k ⋆ y)(p))`, the −log P(y) of Eqs. 13–14."""
    penalty = soft_abs(self.filter_responses(y), self.temperature)
    weights = jnp.exp(self.log_weights).astype(penalty.dtype)
    return jnp.sum(penalty * weights, axis=(1, 2, 3))

  def data_energy(self, x: jax.Array, y: jax.Array) -> jax.Array:
    """`[B]`: the Gaussian data term alone."""
    _check_images(x, y)
    return self.data_term(x, y)

  def as_energy(self) -> protocol.Energy:
    """This energy as an `Energy` on the Real domain with y shaped like x; starts
    `'input'` (y0 = the noisy x), `'uniform'` and `'zeros'`."""
    return protocol.energy_from_module(self, domain=domains.Real())

  def noise_variance_value(self) -> jax.Array:
    """σ², learned or fixed."""
    return self.data_term.variance()


class DeepPriorEnergy(nn.Module):
  """The DeepPrior denoising energy `E(x, y) -> [B]` (module docstring, Eq. 15).

      E(x, y) = Σ_p (y_p − x_p)² / (2σ²) + pool_p ConvStack(y)(p)

  Parameters: `data_term/log_noise_variance` (if learned) and `prior`
  (`conv_0`, `conv_1`, `readout` of a `ConvStack`; the readout has no bias, a constant
  changes no gradient).

  Attributes:
    features: hidden channels (paper: (32, 32)).
    kernel_size: hidden kernel size (paper: 7).
    activation: the elementwise non-linearity (paper: `softplus`).
    pooling: `[B, H', W'] -> [B]` over output pixels: `energynets.nets.sum_pool`
      (default) or `mean_pool` (module docstring).
    noise_variance, learn_noise_variance: the data term (`GaussianDataTerm`).
    padding: an `energynets.nets.Padding` (default `VALID`).
    conv_impl: how the convolutions are computed (as `FieldOfExperts`).
    input_mean, input_std: the trunk sees `(y − input_mean) / input_std`
      (`energynets.nets.cnn.normalized_input`; a fixed reparametrization of the prior,
      the data term keeps the image scale). Defaults (0, 1): y as it is.
  """

  features: Sequence[int] = (32, 32)
  kernel_size: int = 7
  activation: Activation = softplus
  pooling: Callable[[jax.Array], jax.Array] = sum_pool
  noise_variance: float = 0.01
  learn_noise_variance: bool = True
  padding: Padding = VALID
  conv_impl: ConvImpl = auto_conv
  input_mean: float = 0.0
  input_std: float = 1.0

  def setup(self):
    if not callable(self.pooling):
      raise TypeError(
        f"pooling must be a function like energynets.nets.sum_pool; got {self.pooling!r}"
      )
    check_padding(self.padding)
    self.data_term = GaussianDataTerm(self.noise_variance, self.learn_noise_variance)
    self.prior = ConvStack(
      tuple(self.features),
      self.kernel_size,
      1,
      checked_activation(self),
      self.padding,
      readout_bias=False,
      conv_impl=self.conv_impl,
      input_mean=self.input_mean,
      input_std=self.input_std,
    )

  def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
    """`x, y [B, H, W] -> [B]`."""
    _check_images(x, y)
    return self.data_term(x, y) + self.prior_energy(y)

  def prior_energy(self, y: jax.Array) -> jax.Array:
    """`[B]`: DNN(y), the pooled output of the conv trunk (independent of x)."""
    field = len(self.features) * (self.kernel_size - 1) + 1
    _check_size(y, field, self.padding, "DeepPriorEnergy")
    return self.pooling(self.prior(y[..., None])[..., 0])

  def data_energy(self, x: jax.Array, y: jax.Array) -> jax.Array:
    """`[B]`: the Gaussian data term alone."""
    _check_images(x, y)
    return self.data_term(x, y)

  def as_energy(self) -> protocol.Energy:
    """This energy as an `Energy` on the Real domain with y shaped like x; starts
    `'input'` (y0 = the noisy x), `'uniform'` and `'zeros'`."""
    return protocol.energy_from_module(self, domain=domains.Real())

  def noise_variance_value(self) -> jax.Array:
    """σ², learned or fixed."""
    return self.data_term.variance()

"""The guards of `fit`: a NaN/Inf loss, or a loss that stays above a bound, stops training.

`LossGuard` watches every step's loss on the device (no host sync per step) and checks
it where the loop reads metrics anyway; the error names the step, the loss, the likely
cause and the last checkpoint a rerun could start from.
"""

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["LossGuard", "NonFiniteLossError", "TrainingDivergedError"]


class TrainingDivergedError(FloatingPointError):
  """Training diverged: a NaN/Inf loss, or a loss above `LoopOptions.max_loss` at
  `LoopOptions.max_loss_patience` logged steps in a row. The message (one line) names
  the step, the loss, the likely cause and the last good checkpoint."""


class NonFiniteLossError(TrainingDivergedError):
  """Training produced a NaN/Inf loss; the message names the step and the last good checkpoint."""


@jax.jit
def _first_nonfinite(first: jax.Array, loss: jax.Array, step: jax.Array) -> jax.Array:
  # Tracked on device so that checking every step costs no host sync.
  return jnp.where((first < 0) & ~jnp.isfinite(loss), step, first)


class LossGuard:
  """Stops `fit` on a non-finite loss or on a loss above `max_loss` for too long.

  Args:
    max_loss: the bound of the logged training loss (None: no bound).
    max_loss_patience: logged steps in a row above `max_loss` that stop training.
    checkpoint_directory: where the latest checkpoints go (named in the errors).
    last_good_step: the step of a checkpoint known good (a resumed run's), else None.
  """

  def __init__(
    self,
    max_loss: float | None,
    max_loss_patience: int,
    checkpoint_directory: Any,
    last_good_step: int | None = None,
  ):
    self.max_loss, self.max_loss_patience = max_loss, max_loss_patience
    self.checkpoint_directory = checkpoint_directory
    self.last_good_step = last_good_step
    self._first_bad = jnp.asarray(-1, jnp.int32)
    # Logged steps in a row with the loss above max_loss, and the first of them.
    self._over_count = 0
    self._over_since: int | None = None

  def watch(self, step: int, loss: jax.Array) -> None:
    """Records, on the device, whether the loss of update `step` (0-based) is finite."""
    self._first_bad = _first_nonfinite(self._first_bad, loss, jnp.asarray(step, jnp.int32))

  def check_finite(self, step: int, metrics: Mapping[str, Any]) -> None:
    """Raises `NonFiniteLossError` if any update so far had a NaN/Inf loss."""
    bad = int(self._first_bad)
    if bad >= 0:
      raise NonFiniteLossError(
        f"non-finite loss at step {bad + 1} (loss at step {step}: {float(metrics['loss'])}); "
        f"training stopped, {self._last_good()}. Lower the learning rate, clip gradients, or "
        "check the input data for NaN/Inf."
      )

  def check_bounded(self, step: int, loss: float) -> None:
    """Raises `TrainingDivergedError` once the logged `loss` has been above `max_loss` at
    `max_loss_patience` logged steps in a row."""
    if self.max_loss is None or not loss > self.max_loss:
      self._over_count, self._over_since = 0, None
      return
    self._over_count += 1
    self._over_since = step if self._over_since is None else self._over_since
    if self._over_count >= self.max_loss_patience:
      raise TrainingDivergedError(
        f"training diverged: loss {loss:.4g} at step {step}, above max_loss="
        f"{self.max_loss:g} at {self._over_count} logged steps in a row since step "
        f"{self._over_since}; training stopped, {self._last_good()}. The learning rate is "
        "likely too high: lower it, or clip gradients."
      )

  def saved(self, step: int) -> None:
    """Notes the checkpoint of `step`; one saved while the loss is above `max_loss` is no
    fallback."""
    if not self._over_count:
      self.last_good_step = step

  def _last_good(self) -> str:
    if self.last_good_step is None:
      return "no checkpoint was written before it"
    return f"the last good checkpoint is step {self.last_good_step} in {self.checkpoint_directory}"

"""Early stopping on the validation metric: when `fit` ends before its step count.

The rule reads only the evaluation history (the `select_metric` values in order), so a
run resumed from a checkpoint takes the same decision as an uninterrupted one: it stops
after the first evaluation that ends `patience` evaluations in a row without improving
on the best value before them by more than `min_delta`. The state `fit` returns is the
best checkpoint either way, so stopping changes the result only when the metric would
have improved again later.
"""

from collections.abc import Sequence


def evals_without_improvement(
  values: Sequence[float], mode: str = "max", min_delta: float = 0.0
) -> int:
  """How many evaluations in a row, at the end of `values`, did not improve on the best.

  Args:
    values: the metric at each evaluation, in order.
    mode: `'max'` (higher is better) or `'min'`.
    min_delta: an evaluation improves only if it beats the best value before it by
      more than this; smaller gains neither count nor move the best value.

  Returns:
    0 when the last evaluation improved (or `values` is empty), else the number of
    evaluations since the last improving one.
  """
  if mode not in ("max", "min"):
    raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
  best, since = None, 0
  for value in values:
    gain = (value - best if mode == "max" else best - value) if best is not None else None
    if gain is None or gain > min_delta:
      best, since = value, 0
    else:
      since += 1
  return since


def stop_reason(
  history: Sequence[dict],
  metric: str,
  mode: str = "max",
  patience: int = 20,
  min_delta: float = 0.0,
) -> str | None:
  """Why training stops after the last record of `history`, or None to go on.

  Args:
    history: the evaluation records in order, `{"step": int, metric: float, ...}`.
    metric: the selection metric (`LoopOptions.select_metric`).
    mode: `'max'` or `'min'` of `metric`.
    patience: stop after this many evaluations in a row without improvement.
    min_delta: the smallest gain that counts as an improvement.

  Returns:
    A one-line reason (metric, patience, the last improvement and its step), or None.
  """
  values = [float(r[metric]) for r in history if metric in r]
  since = evals_without_improvement(values, mode, min_delta)
  if not values or since < patience:
    return None
  best = values[-1 - since]
  best_step = [r["step"] for r in history if metric in r][-1 - since]
  return (
    f"early stopping: {metric} did not improve by more than {min_delta:g} in "
    f"{since} evaluations (patience {patience}); last improvement {best:.6g} at step "
    f"{best_step}"
  )

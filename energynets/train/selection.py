"""Evaluation, selection and early stopping of `fit`: one part, on when `fit` has validation.

`fit(..., validation=Validation(...))` evaluates the state every `eval_every` steps and
at the end, keeps the best state by `LoopOptions.select_metric` in `workdir/best`,
stops early once that metric stops improving (`early_stopping`) and returns the best
state. Without validation nothing is evaluated and `fit` returns the last state; a
`select_metric` chosen explicitly then has nothing to select on, which is an error.
"""

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
from typing import Any

from absl import logging
import jax
import numpy as np

from energynets.metrics import multilabel
from energynets.metrics import sequences
from energynets.train import early_stopping as early_stopping_lib
from energynets.train import process_rows as process_rows_lib
from energynets.train import run as run_lib
from energynets.train import step as step_lib
from energynets.train.checkpoint import Checkpointer
from energynets.train.writers import MetricWriter

__all__ = [
  "DefaultMetric",
  "SELECT_METRIC_DEFAULT",
  "Selection",
  "Validation",
  "replaces_best",
  "rows_evaluator",
  "selected_index",
  "selected_stage",
  "validation_metrics",
]


class DefaultMetric(str):
  """`LoopOptions.select_metric` left at its default: `fit` selects by it only when it has
  validation; a metric named explicitly without validation is an error."""


SELECT_METRIC_DEFAULT = DefaultMetric("validation/example_f1")
"""The default `LoopOptions.select_metric`: example-F1 (`validation/example_f1`)."""


@dataclasses.dataclass(frozen=True, eq=False)  # rows are arrays: compared by identity
class Validation:
  """What `fit` evaluates on: with it, evaluation, selection and early stopping are on.

  Attributes:
    evaluate: `state -> {"validation/<metric>": value}`, called every `eval_every` steps
      and at the end. None: the metrics of the rows `x`, `y` (`validation_metrics`:
      `validation/example_f1` and `validation/hamming_loss` of 0/1 labels at 0.5,
      `validation/token_acc` of one-hot tags, `validation/mse` of real targets).
    x: validation inputs `[N, ...]`; with `y`, the predictions of the selected state on
      them tune run.json's decision threshold of 0/1 labels (else it is 0.5).
    y: validation labels `[N, ...]`.
  """

  evaluate: Callable[[Any], Mapping[str, float]] | None = None
  x: Any = None
  y: Any = None

  def __post_init__(self):
    if (self.x is None) != (self.y is None):
      raise ValueError("Validation needs both x and y, or neither")
    if self.evaluate is None and self.x is None:
      raise ValueError("Validation needs evaluate=, or rows x= and y= to evaluate on")
    if self.evaluate is not None and not callable(self.evaluate):
      raise TypeError(
        f"Validation.evaluate must be a function state -> metrics, got "
        f"{type(self.evaluate).__name__}"
      )

  @property
  def arrays(self) -> dict[str, Any] | None:
    """`{"x": x, "y": y}`, or None without rows."""
    return None if self.x is None else {"x": self.x, "y": self.y}


def validation_metrics(y: np.ndarray, y_soft: np.ndarray) -> dict[str, float]:
  """The metrics `Validation` computes without `evaluate`, by what `y [N, ...]` holds
  (`run.infer_decoding`): 0/1 labels, one-hot tags (all-zero rows are padding) or real
  targets."""
  y, y_soft = np.asarray(y), np.asarray(y_soft)
  decoding = run_lib.infer_decoding(y)
  if decoding == "threshold":
    gold, pred = y.reshape(len(y), -1), multilabel.binarize(y_soft.reshape(len(y), -1), 0.5)
    return {
      "validation/example_f1": multilabel.example_f1(gold, pred),
      "validation/hamming_loss": multilabel.hamming_loss(gold, pred),
    }
  if decoding == "argmax":
    gold_tags = y.reshape(len(y), -1, y.shape[-1])
    pred_tags = y_soft.reshape(gold_tags.shape)
    return {
      "validation/token_acc": sequences.token_accuracy(
        gold_tags.argmax(-1), pred_tags.argmax(-1), gold_tags.sum(-1) == 1
      )
    }
  return {"validation/mse": float(np.mean((y_soft - y) ** 2))}


def rows_evaluator(
  objective: Any, mesh: jax.sharding.Mesh, x: Any, y: Any, batch_size: int, sharded: bool = False
) -> Callable[[Any], dict[str, float]]:
  """`evaluate(state)`: `validation_metrics` of the predictions of rows `x` (this
  process's rows with `sharded`; the metrics then read every process's)."""
  predict = step_lib.build_predict(objective, mesh)
  x = np.asarray(x)
  y = process_rows_lib.gather_process_rows(y) if sharded else np.asarray(y)
  predict_rows = (
    process_rows_lib.predict_process_rows if sharded else process_rows_lib.predict_in_batches
  )

  def evaluate(state):
    return validation_metrics(y, predict_rows(predict, state, x, batch_size, mesh))

  return evaluate


def replaces_best(value: float, best_value: float | None, best_step: int | None, mode: str) -> bool:
  """Whether an evaluation of `value` replaces the best one so far (`best_value` at
  `best_step`; None: there is none): a better value does, and so does an equal one,
  unless the best is a continuing stage's starting state (step 0)."""
  if best_value is None:
    return True
  # Of equal values the later state is kept: a small validation set saturates (genbase's
  # reaches its maximum hundreds of steps before training ends), and the earliest state at
  # that maximum is the least trained of them. A continuing stage's starting state is left
  # only for a better one: a new objective must earn its place.
  return _better(value, best_value, mode) or (value == best_value and best_step != 0)


def _better(value: float, best_value: float, mode: str) -> bool:
  return value > best_value if mode == "max" else value < best_value


def selected_index(steps: list[int], values: list[float], mode: str = "max") -> int:
  """The index of the evaluation `replaces_best` ends on, of a curve `values` at `steps`."""
  best = 0
  for i in range(1, len(values)):
    if replaces_best(values[i], values[best], steps[best], mode):
      best = i
  return best


def selected_stage(values: list[float | None], mode: str = "max") -> int | None:
  """The index of the stage a staged run reports, of each stage's best validation value
  (None: a stage that selects nothing; the result is None when none has a value).

  A later stage replaces the best of the stages before it only when it is better: it
  trains another objective (SEAL-static's task-net, a fresh network), and a tie on
  validation is no evidence for it. The same rule keeps a continuing stage's starting
  state on a tie (`replaces_best`).
  """
  best, best_value = None, None
  for i, value in enumerate(values):
    if value is not None and (best_value is None or _better(value, best_value, mode)):
      best, best_value = i, value
  return best


class Selection:
  """Evaluation, selection and early stopping of one `fit`.

  `evaluate(step, state)` writes the evaluation record, appends it to the history and
  saves the state to `best` when it is at least as good on `select_metric` as the best
  so far (of equal values the later state is kept, but a continuing stage's starting
  state, step 0, only for a better one); `stop_reason()` is
  the early stopping rule on that history; `meta` is the bookkeeping saved with every
  latest checkpoint, so a resumed run selects and stops as an uninterrupted one.

  Args:
    evaluate: `state -> {"validation/<metric>": value}`; None: nothing is evaluated.
    best: the checkpointer of the best state.
    writer: where the evaluation records are written.
    select_metric: the metric that picks the best state (None: the last state).
    select_mode: `'max'` or `'min'`.
    eval_every: evaluate every this many steps (and at the last one).
    early_stopping: stop by `early_stopping.stop_reason`.
    patience: evaluations without improvement that stop training.
    min_delta: the smallest gain that counts as an improvement.
  """

  def __init__(
    self,
    evaluate: Callable[[Any], Mapping[str, float]] | None,
    best: Checkpointer,
    writer: MetricWriter,
    *,
    select_metric: str | None,
    select_mode: str,
    eval_every: int,
    early_stopping: bool,
    patience: int,
    min_delta: float,
  ):
    self._evaluate, self.best, self._writer = evaluate, best, writer
    self.select_metric = select_metric if evaluate is not None else None
    self.select_mode, self.eval_every = select_mode, eval_every
    self._early_stopping = early_stopping and self.select_metric is not None
    self._patience, self._min_delta = patience, min_delta
    self.meta: dict[str, Any] = {"best_value": None, "best_step": None, "history": []}

  def resume(self, meta: dict | None, step: int | None) -> None:
    """Takes the bookkeeping of the latest checkpoint (`meta`, saved at `step`; None:
    a run starting afresh).

    A best state saved after that checkpoint, by a run killed before its next one, is
    kept as the best: it was reached on the path the resumed run replays, and the best
    state the bookkeeping names was deleted when it was saved.
    """
    if meta is not None:
      self.meta = meta
    if self.select_metric is None:
      return
    best_step = self.best.latest_step()
    if best_step is None or best_step == self.meta["best_step"]:
      return
    if step is None or best_step > step:
      self.meta["best_value"] = self.best.meta(best_step)["value"]
      self.meta["best_step"] = best_step

  def due(self, step: int, is_last: bool) -> bool:
    """Whether the state after `step` is evaluated."""
    return self._evaluate is not None and (step % self.eval_every == 0 or is_last)

  def evaluate(self, step: int, state: Any) -> dict[str, float]:
    """Evaluates `state` at `step`; returns the record written."""
    assert self._evaluate is not None, "evaluate is called only when `due`"
    record = {k: float(v) for k, v in self._evaluate(state).items()}
    self._writer.write(step, record)
    self.meta["history"].append({"step": step, **record})
    if self.select_metric is None:
      return record
    if self.select_metric not in record:
      raise KeyError(
        f"select_metric {self.select_metric!r} not among the evaluation metrics {sorted(record)}"
      )
    value = record[self.select_metric]
    if replaces_best(value, self.meta["best_value"], self.meta["best_step"], self.select_mode):
      self.meta["best_value"], self.meta["best_step"] = value, step
      self.best.save(step, state, {"value": value})
    logging.info("step %d | %s", step, " ".join(f"{k}={v:.4f}" for k, v in sorted(record.items())))
    return record

  def stop_reason(self) -> str | None:
    """Why training stops after the last evaluation (`early_stopping.stop_reason`), or None."""
    if not self._early_stopping:
      return None
    assert self.select_metric is not None  # early stopping needs a select_metric
    return early_stopping_lib.stop_reason(
      self.meta["history"], self.select_metric, self.select_mode, self._patience, self._min_delta
    )

  def selected(self, final_step: int, state: Any) -> tuple[Any, int, float | None]:
    """The state `fit` returns, its step and its `select_metric` (None: the last state,
    `state` at `final_step`)."""
    if self.select_metric is None or self.meta["best_step"] is None:
      return state, final_step, None
    step, value = self.meta["best_step"], self.meta["best_value"]
    if step != final_step:
      state, _ = self.best.restore(step, state)
    return state, step, value

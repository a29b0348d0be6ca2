"""The training loop: method-agnostic, deterministic, resumable, guarded against NaN and divergence.

`fit` is a short driver over parts that can be read, and replaced, on their own: the
sharded step (`sharded_step`: every step's batch on the mesh, the first state, the
jitted update), the checkpoint/resume part (`resume.LatestCheckpoints`), evaluation,
selection and early stopping as one part that `validation=` turns on
(`selection.Selection`), the loss guards (`guards.LossGuard`) and the run writer
(`run_writer.write_fit_run`, run.json once training is over). Batches and step keys
are pure functions of `(seed, step)`, so a run killed and resumed from its latest
checkpoint ends with the same parameters and metrics as an uninterrupted one.
"""

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import datetime
import os
import time
from typing import Any

from absl import logging
import jax
import numpy as np

from energynets.objectives.base import Objective
from energynets.train import faults
from energynets.train import prefetch as prefetch_lib
from energynets.train import profiling
from energynets.train import run as run_lib
from energynets.train import run_writer
from energynets.train import sharded_step
from energynets.train import step as step_lib
from energynets.train import storage
from energynets.train.checkpoint import Checkpointer
from energynets.train.guards import LossGuard
from energynets.train.guards import NonFiniteLossError
from energynets.train.guards import TrainingDivergedError
from energynets.train.resume import LatestCheckpoints
from energynets.train.selection import SELECT_METRIC_DEFAULT
from energynets.train.selection import DefaultMetric
from energynets.train.selection import Selection
from energynets.train.selection import Validation
from energynets.train.selection import rows_evaluator
from energynets.train.writers import MetricWriter

__all__ = [
  "FitResult",
  "LoopOptions",
  "NonFiniteLossError",
  "TrainingDivergedError",
  "Validation",
  "fit",
]


@dataclasses.dataclass(frozen=True)
class FitResult:
  """What `fit` returns.

  Attributes:
    state: the selected state (best on validation by `LoopOptions.select_metric`,
      else the last one), e.g. `{"task_net": ParamGroup, "loss_net": ParamGroup}`.
    final_step: the number of steps trained (including those of a resumed run).
    selected_step: the step of `state` (0: a continuing stage's starting state).
    selected_value: `select_metric` at `selected_step` (None without evaluation).
    history: the validation records in order, `{"step": int, "validation/...": float}`.
    stop_reason: why training ended at `final_step` before `LoopOptions.steps`
      (`early_stopping.stop_reason`'s line); None when it ran every step.
  """

  state: Any  # the selected state (best on validation, else the last one)
  final_step: int
  selected_step: int
  selected_value: float | None
  history: list[dict]  # the validation records, in order
  stop_reason: str | None = None


@dataclasses.dataclass(frozen=True)
class LoopOptions:
  """Options of `fit` (the `config.train` block of an experiment config).

  Attributes:
    steps: total training steps (`objective.update` calls).
    batch_size: global batch size B (split over the devices of the mesh).
    seed: seeds the initial state, every step's key and the batch order.
    log_every: write training metrics every this many steps.
    eval_every: evaluate (`fit`'s `validation`) every this many steps (and at the end).
    checkpoint_every: save the latest state every this many steps (and at the end).
    select_metric: the evaluation metric that picks the returned state (of equal values,
      the later, but `previous_state` only for a better one; None: the last state).
      Left at its default, `'validation/example_f1'`, it selects only when `fit` has
      validation; named explicitly, `fit` without validation refuses it.
    select_mode: `'max'` or `'min'` of `select_metric`.
    tensorboard: also write TensorBoard event files (else `metrics.jsonl` only).
    max_loss: stop with `TrainingDivergedError` once the logged training loss exceeds
      this at `max_loss_patience` logged steps in a row (None: no bound). The default
      is far above the loss of any run that learns (per-example cross-entropies,
      hinges and squared errors, summed over at most thousands of outputs) and above
      2**24, past which a float32 loss cannot resolve a change of 1: such a run has
      lost the data's signal, typically to a learning rate far too high.
    max_loss_patience: how many logged steps in a row above `max_loss` stop training;
      more than one, so that a transient spike a run recovers from is not fatal.
    early_stopping: stop once `select_metric` has not improved for
      `early_stopping_patience` evaluations in a row (`energynets.train.early_stopping`);
      the best checkpoint is returned as always. Needs validation and `select_metric`.
    early_stopping_patience: evaluations without improvement that stop training. With
      the default, 20, no committed bibtex run would have stopped before its selected
      step (docs/tuning.md).
    early_stopping_min_delta: the smallest gain of `select_metric` over the best value
      so far that counts as an improvement.
    prefetch: how many steps ahead a background thread builds the batches (gathers
      the rows, `shard_batch`es them to the devices), so that building one overlaps the
      steps before it (`prefetch.Prefetcher`); 0 builds each in the loop. The batches
      are the same either way.
    async_checkpoint: checkpoints are written in the background: `save` waits only for
      the copy of the state to host memory, and the next save, a restore and the end
      of `fit` wait for the write. A process killed at any moment still leaves its
      previous complete checkpoint or the new complete one (`Checkpointer`). False:
      training waits for each write.
    profile_steps: `"start:stop"` or `(start, stop)`: write a `jax.profiler` trace of
      the updates from step `start` to step `stop` into `workdir/profile`
      (`profiling.StepProfiler`; `tensorboard --logdir=workdir/profile`). `""` or
      None: no trace. Stored as `(start, stop)` or None.
  """

  steps: int
  batch_size: int
  seed: int = 0
  log_every: int = 100
  eval_every: int = 500
  checkpoint_every: int = 1000
  select_metric: str | None = SELECT_METRIC_DEFAULT
  select_mode: str = "max"
  tensorboard: bool = True
  max_loss: float | None = 1e8
  max_loss_patience: int = 3
  early_stopping: bool = True
  early_stopping_patience: int = 20
  early_stopping_min_delta: float = 0.0
  prefetch: int = 1
  async_checkpoint: bool = True
  profile_steps: str | tuple[int, int] | None = None

  def __post_init__(self):
    if self.select_mode not in ("max", "min"):
      raise ValueError(f"select_mode must be 'max' or 'min', got {self.select_mode!r}")
    if self.max_loss_patience < 1:
      raise ValueError(f"max_loss_patience must be at least 1, got {self.max_loss_patience}")
    if self.early_stopping_patience < 1:
      raise ValueError(
        f"early_stopping_patience must be at least 1, got {self.early_stopping_patience}"
      )
    if not isinstance(self.prefetch, int) or self.prefetch < 0:
      raise ValueError(f"prefetch must be an integer 0 or more, got {self.prefetch!r}")
    # Parsed here, so that a bad value stops the run before anything loads.
    object.__setattr__(self, "profile_steps", profiling.parse_profile_steps(self.profile_steps))


def fit(
  objective: Objective,
  train_arrays: Mapping[str, np.ndarray],
  options: LoopOptions,
  workdir: str | os.PathLike,
  *,
  validation: Validation | None = None,
  mesh: jax.sharding.Mesh | None = None,
  previous_state: Any = None,
  train_batch: Callable[[int], Mapping[str, np.ndarray]] | None = None,
  builder: str | tuple[str, Mapping[str, Any]] | None = None,
  label_dim: int | None = None,
  num_shards: int | None = None,
  progress: Callable[[int, Mapping[str, float]], None] | None = None,
) -> FitResult:
  """Trains `objective` on `train_arrays` (`{"x": [N, ...], "y": [N, ...]}`) for `options.steps`.

  Each step is `objective.update` on a batch of `options.batch_size` rows (`[B, ...]`),
  jitted by `build_train_step`; checkpoints go to `workdir/checkpoints` (latest: rerun
  the same call to resume) and `workdir/best` (the state selected on validation), and
  metrics to `workdir/metrics.jsonl`. Returns a `FitResult`. `workdir` is a local path
  or a URL `etils.epath` supports (`gs://bucket/run`); in a multi-process run every
  process must reach the same workdir (`storage.check_shared_workdir`, which stops
  every process at once otherwise).

  `validation`: a `Validation` turns on evaluation, selection and early stopping: it is
  evaluated every `eval_every` steps and at the end, `options.select_metric` picks the
  returned state, and with `options.early_stopping` training ends after the first
  evaluation that closes `early_stopping_patience` evaluations without improvement
  (`early_stopping.stop_reason`; `FitResult.final_step` and `stop_reason`, also in
  run.json's metadata, say where and why); a run resumed after such a stop trains no
  further. Its rows `x`, `y` also tune run.json's decision threshold. Without it the
  last state is returned, and a `select_metric` named explicitly is a ValueError.
  `previous_state`: the selected state of the previous training stage; the first
  state is then `objective.init_from(previous_state, ...)` instead of `init`. With
  validation and a `select_metric`, that first state is evaluated before step 1 and
  recorded as step 0 of the history, so selection may return it (`selected_step` 0:
  the stage did not improve on its start) and early stopping counts it.
  `train_batch(step) -> {name: [batch_size, ...]}`: the global batch of a step, a pure
  function of the step (default: `train_batch_indices` rows of `train_arrays`; sequence
  tasks pass `length_bucketed_batch`).

  At the end `workdir/run.json` describes the run for `load_run` (`energynets.train.run`):
  the returned state's checkpoint, the batch shapes, the decoding inferred from `y`,
  and for 0/1 labels the decision threshold, tuned on the validation rows (their
  predictions cost one pass) or else 0.5. `builder`: `"package.module:function"` or
  `(path, kwargs)` (JSON kwargs) that, called, returns this objective, so that
  `load_run(workdir)` needs no code but the import. Checked before step 1: a function
  of `__main__`, kwargs the function does not take, or a rebuilt objective whose
  `init` gives another state (structure, shapes, dtypes) than the one trained are a
  `BuilderError`. Without it, `load_run` needs `objective=`.

  On a mesh with a `'model'` axis (`make_mesh(model_parallelism=M)`), every state leaf
  with an axis of size `label_dim` (default: the last axis of `train_arrays["y"]`) is
  split over it (`label_axis_shardings`); checkpoints restore onto any mesh.

  `num_shards`: per-process data. The N training rows are cut into `num_shards`
  contiguous shards (`batching.shard_bounds`) and each step's global batch takes
  `batch_size / num_shards` rows from each (`batching.sharded_batch_indices`); process p
  of P then holds only its `batching.process_rows(N, p, P)` in `train_arrays` (and in
  the validation rows), and draws its part of every batch from them. A multiple of P;
  one process with `num_shards=S` trains on the batches of S processes. None: every
  process holds all rows and the batches are `train_batch_indices` (the stream of
  `num_shards=1`). With both `num_shards` and `train_batch`, `train_batch(step)` is this
  process's part of the global batch, drawn shard by shard from the rows it holds (a
  task's own batches: `batching.length_bucketed_batch`, `segmentation.augmented_batch`).

  `progress(step, scalars)`, e.g. a progress bar's update, is called with the step
  training starts from (a resumed run's last one) and then after every step, with the
  scalars written at that step: the training ones (`train/loss`, ...) every `log_every`
  steps, the evaluation record every `eval_every`, none otherwise. It reads values
  already on the host, so it costs the loop no device synchronization.
  """
  builder_entry = run_lib.builder_record(builder)
  mesh = mesh or step_lib.make_mesh()
  step_lib.check_batch_size(options.batch_size, mesh)
  _check_validation(options, validation)
  # Before any compiling: processes with a workdir each would hang at the first save.
  storage.check_shared_workdir(workdir)
  batch_at = sharded_step.batch_source(
    train_arrays, options.batch_size, options.seed, mesh, train_batch, num_shards
  )
  init_key, step_key = jax.random.split(jax.random.PRNGKey(options.seed))
  if label_dim is None and step_lib.model_parallelism(mesh) > 1:
    label_dim = np.shape(train_arrays["y"])[-1]
  state, train_step = sharded_step.first_state(
    objective, mesh, batch_at(0), init_key, label_dim, previous_state
  )
  if builder_entry is not None:
    run_lib.check_rebuilds(
      builder_entry, state, run_lib.array_specs(train_arrays), options.batch_size
    )
  run_dir = storage.workdir_path(workdir)
  run_dir.mkdir(parents=True, exist_ok=True)
  latest = LatestCheckpoints(
    run_dir / "checkpoints", options.checkpoint_every, options.async_checkpoint
  )
  writer = MetricWriter(run_dir, tensorboard=options.tensorboard)
  selection = _selection(
    objective, mesh, options, validation, run_dir, writer, sharded=num_shards is not None
  )
  state, meta, resumed = latest.resume(state, writer)
  selection.resume(meta, resumed)
  if resumed is None and previous_state is not None and selection.select_metric is not None:
    # Step 0 is a continuing stage's start, which selection may keep; saved as the latest
    # checkpoint so that a resumed stage finds its record instead of evaluating it again.
    selection.evaluate(0, state)
    latest.save(0, state, selection.meta)
    resumed = 0
  guard = LossGuard(options.max_loss, options.max_loss_patience, latest.directory, resumed)
  state, final_step, stop_reason = _train(
    state,
    train_step,
    batch_at,
    step_key,
    options,
    resumed or 0,
    run_dir,
    latest,
    selection,
    guard,
    writer,
    progress,
  )
  state, selected_step, selected_value = selection.selected(final_step, state)
  latest.close()
  selection.best.close()
  run_writer.write_fit_run(
    run_dir,
    objective,
    mesh,
    state,
    train_arrays,
    batch_size=options.batch_size,
    seed=options.seed,
    validation=validation.arrays if validation is not None else None,
    builder=builder_entry,
    checkpoint=run_lib.checkpoint_record(selected_value, selected_step),
    selected_step=selected_step,
    final_step=final_step,
    stop_reason=stop_reason,
    sharded=num_shards is not None,
    label_dim=label_dim,
  )
  return FitResult(
    state, final_step, selected_step, selected_value, list(selection.meta["history"]), stop_reason
  )


def _train(
  state: Any,
  train_step: Callable,
  batch_at: Callable[[int], Any],
  step_key: jax.Array,
  options: LoopOptions,
  start: int,
  workdir: Any,
  latest: LatestCheckpoints,
  selection: Selection,
  guard: LossGuard,
  writer: MetricWriter,
  progress: Callable[[int, Mapping[str, float]], None] | None,
) -> tuple[Any, int, str | None]:
  """The steps of `fit` from `start`: the last state, the step it ended at and why before
  `options.steps` (None when it ran every step)."""
  # A run that stopped early resumes stopped: the rule reads only the recorded history.
  stop_reason = selection.stop_reason() if start < options.steps else None
  if stop_reason is not None:
    logging.info("not training past step %d: %s", start, stop_reason)
  trained_to = start
  end = options.steps if stop_reason is None else start
  batches = prefetch_lib.Prefetcher(batch_at, start, end, options.prefetch)
  # `LoopOptions.__post_init__` has parsed a `'start:stop'` string into a pair.
  assert not isinstance(options.profile_steps, str)
  profiler = profiling.StepProfiler(options.profile_steps, workdir)
  log = _TrainingLog(writer, start, options.steps)
  if progress is not None:
    progress(start, {})
  for step in range(start, end):
    profiler.before(step)
    state, metrics = train_step(state, batches(step), jax.random.fold_in(step_key, step))
    guard.watch(step, metrics["loss"])
    done = step + 1
    profiler.after(done, metrics)
    is_last = done == options.steps
    written = {}
    if done % options.log_every == 0 or is_last:
      guard.check_finite(done, metrics)
      written.update(log.write(done, metrics))
      guard.check_bounded(done, written["train/loss"])
    if selection.due(done, is_last):
      guard.check_finite(done, metrics)
      written.update(selection.evaluate(done, state))
      stop_reason = None if is_last else selection.stop_reason()
    if progress is not None:
      progress(done, written)
    trained_to = done
    # Asked at every step on every process: all of them save the same step.
    preempted = faults.preemption_reached(done)
    if latest.due(done, is_last) or stop_reason is not None or preempted:
      guard.check_finite(done, metrics)
      latest.save(done, state, selection.meta)
      guard.saved(done)
    if preempted:
      for resource in (batches, profiler, writer, latest, selection.best):
        resource.close()  # an asynchronous save finishes before the process ends
      raise faults.Preempted(done, os.fspath(latest.directory))
    if stop_reason is not None:
      logging.info("step %d/%d | %s", done, options.steps, stop_reason)
      break
  batches.close()
  profiler.close()
  writer.close()
  return state, trained_to if stop_reason is not None else max(start, options.steps), stop_reason


def _check_validation(options: LoopOptions, validation: Validation | None) -> None:
  """A `validation` that is not a `Validation`, or a `select_metric` named explicitly
  with nothing to evaluate, is an error (one line)."""
  if validation is not None and not isinstance(validation, Validation):
    raise TypeError(
      f"validation must be a Validation(evaluate=..., x=..., y=...), got "
      f"{type(validation).__name__}"
    )
  if (
    validation is None
    and options.select_metric is not None
    and not isinstance(options.select_metric, DefaultMetric)
  ):
    raise ValueError(
      f"select_metric={options.select_metric!r} has nothing to evaluate: "
      "pass fit(..., validation=Validation(...)) or select_metric=None"
    )


def _selection(
  objective: Objective,
  mesh: jax.sharding.Mesh,
  options: LoopOptions,
  validation: Validation | None,
  workdir: Any,
  writer: MetricWriter,
  sharded: bool,
) -> Selection:
  """The evaluation, selection and early stopping part of `fit` for `validation`."""
  evaluate = None
  if validation is not None:
    evaluate = validation.evaluate or rows_evaluator(
      objective, mesh, validation.x, validation.y, options.batch_size, sharded
    )
  best = Checkpointer(workdir / "best", async_save=options.async_checkpoint)
  return Selection(
    evaluate,
    best,
    writer,
    select_metric=options.select_metric,
    select_mode=options.select_mode,
    eval_every=options.eval_every,
    early_stopping=options.early_stopping,
    patience=options.early_stopping_patience,
    min_delta=options.early_stopping_min_delta,
  )


class _TrainingLog:
  """Writes the training scalars of a logged step (`train/...`, the steps per second
  since the previous one) and logs the loss, the rate and the time left."""

  def __init__(self, writer: MetricWriter, start: int, steps: int):
    self._writer, self._steps = writer, steps
    self._window_start, self._window_step = time.perf_counter(), start

  def write(self, step: int, metrics: Mapping[str, Any]) -> dict[str, float]:
    now = time.perf_counter()
    rate = (step - self._window_step) / max(now - self._window_start, 1e-9)
    self._window_start, self._window_step = now, step
    scalars = {f"train/{k}": float(v) for k, v in metrics.items()}
    scalars["train/steps_per_sec"] = rate
    self._writer.write(step, scalars)
    logging.info(
      "step %d/%d | loss %.4f | %.1f steps/s | ETA %s",
      step,
      self._steps,
      scalars["train/loss"],
      rate,
      str(datetime.timedelta(seconds=int(max((self._steps - step) / rate, 0)))),
    )
    return scalars

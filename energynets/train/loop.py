"""The training loop: method-agnostic, deterministic, resumable, guarded against NaN and divergence.

`fit` drives any `Objective` through the sharded step of `step.py`. Batches and step
keys are pure functions of `(seed, step)`, so a run killed and resumed from its
latest checkpoint ends with the same parameters and metrics as an uninterrupted
one. Validation runs every `eval_every` steps; the best state by `select_metric`
is checkpointed separately and returned at the end.
"""

import dataclasses
import datetime
import os
import time
from typing import Any, Callable, Mapping

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from energynets import metrics as metrics_lib
from energynets.data.batching import (process_rows, process_shards, sharded_batch_indices,
                                       train_batch_indices)
from energynets.objectives.base import Objective
from energynets.train import early_stopping as early_stopping_lib
from energynets.train import faults
from energynets.train import prefetch as prefetch_lib
from energynets.train import profiling
from energynets.train import run as run_lib
from energynets.train.process_rows import (gather_process_rows, predict_in_batches,
                                           predict_process_rows, process_row_counts)
from energynets.train import storage
from energynets.train import step as step_lib
from energynets.train.checkpoint import Checkpointer
from energynets.train.writers import MetricWriter


class TrainingDivergedError(FloatingPointError):
  """Training diverged: a NaN/Inf loss, or a loss above `LoopOptions.max_loss` at
  `LoopOptions.max_loss_patience` logged steps in a row. The message (one line) names
  the step, the loss, the likely cause and the last good checkpoint."""


class NonFiniteLossError(TrainingDivergedError):
  """Training produced a NaN/Inf loss; the message names the step and the last good checkpoint."""


@dataclasses.dataclass(frozen=True)
class FitResult:
  """What `fit` returns.

  Attributes:
    state: the selected state (best on validation by `LoopOptions.select_metric`,
      else the last one), e.g. `{"task_net": ParamGroup, "loss_net": ParamGroup}`.
    final_step: the number of steps trained (including those of a resumed run).
    selected_step: the step of `state`.
    selected_value: `select_metric` at `selected_step` (None without evaluation).
    history: the validation records in order, `{"step": int, "validation/...": float}`.
    stop_reason: why training ended at `final_step` before `LoopOptions.steps`
      (`early_stopping.stop_reason`'s line); None when it ran every step.
  """
  state: Any              # the selected state (best on validation, else the last one)
  final_step: int
  selected_step: int
  selected_value: float | None
  history: list[dict]     # the validation records, in order
  stop_reason: str | None = None


@dataclasses.dataclass(frozen=True)
class LoopOptions:
  """Options of `fit` (the `config.train` block of an experiment config).

  Attributes:
    steps: total training steps (`objective.update` calls).
    batch_size: global batch size B (split over the devices of the mesh).
    seed: seeds the initial state, every step's key and the batch order.
    log_every: write training metrics every this many steps.
    eval_every: call `evaluate(state)` every this many steps (and at the end).
    checkpoint_every: save the latest state every this many steps (and at the end).
    select_metric: the evaluation metric that picks the returned state (None: last).
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
      the best checkpoint is returned as always. Needs `evaluate` and `select_metric`.
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
  select_metric: str | None = "validation/example_f1"
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
    if not isinstance(self.prefetch, int) or self.prefetch < 0:
      raise ValueError(f"prefetch must be an integer 0 or more, got {self.prefetch!r}")
    # Parsed here, so that a bad value stops the run before anything loads.
    object.__setattr__(self, "profile_steps", profiling.parse_profile_steps(self.profile_steps))

  @classmethod
  def from_config(cls, cfg: Mapping[str, Any]) -> "LoopOptions":
    """From a mapping of these fields (unknown keys are an error; `eval_batch_size`,
    `num_devices`, `model_parallelism`, `matmul_precision` and `compute_dtype`, read by
    the experiment runner, are ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(cfg) - names - {"eval_batch_size", "num_devices", "model_parallelism",
                                  "matmul_precision", "compute_dtype"}
    if unknown:
      raise ValueError(f"unknown train options {sorted(unknown)}; known: {sorted(names)}")
    return cls(**{k: v for k, v in cfg.items() if k in names})


@jax.jit
def _first_nonfinite(first: jax.Array, loss: jax.Array, step: jax.Array) -> jax.Array:
  # Tracked on device so that checking every step costs no host sync.
  return jnp.where((first < 0) & ~jnp.isfinite(loss), step, first)


def _format_eta(seconds: float) -> str:
  return str(datetime.timedelta(seconds=int(max(seconds, 0))))


def fit(objective: Objective,
        train_arrays: Mapping[str, np.ndarray],
        options: LoopOptions,
        workdir: str | os.PathLike,
        *,
        evaluate: Callable[[Any], dict[str, float]] | None = None,
        mesh: jax.sharding.Mesh | None = None,
        previous_state: Any = None,
        train_batch: Callable[[int], Mapping[str, np.ndarray]] | None = None,
        validation: Mapping[str, np.ndarray] | None = None,
        builder: str | tuple[str, Mapping[str, Any]] | None = None,
        label_dim: int | None = None,
        num_shards: int | None = None,
        progress: Callable[[int, Mapping[str, float]], None] | None = None) -> FitResult:
  """Trains `objective` on `train_arrays` (`{"x": [N, ...], "y": [N, ...]}`) for `options.steps`.

  Each step is `objective.update` on a batch of `options.batch_size` rows (`[B, ...]`),
  jitted by `build_train_step`; checkpoints go to `workdir/checkpoints` (latest: rerun
  the same call to resume) and `workdir/best` (the state selected on validation), and
  metrics to `workdir/metrics.jsonl`. Returns a `FitResult`. `workdir` is a local path
  or a URL `etils.epath` supports (`gs://bucket/run`); in a multi-process run every
  process must reach the same workdir (`storage.check_shared_workdir`, which stops
  every process at once otherwise).

  `evaluate(state) -> {"validation/<metric>": value}` is called every `eval_every`
  steps and at the end; `options.select_metric` picks the returned state. With
  `options.early_stopping`, training ends after the first evaluation that closes
  `early_stopping_patience` evaluations without improvement (`early_stopping.stop_reason`;
  `FitResult.final_step` and `stop_reason`, also in run.json's metadata, say where and
  why); a run resumed after such a stop trains no further.
  `previous_state`: the selected state of the previous training stage; the first
  state is then `objective.init_from(previous_state, ...)` instead of `init`.
  `train_batch(step) -> {name: [batch_size, ...]}`: the global batch of a step, a pure
  function of the step (default: `train_batch_indices` rows of `train_arrays`; sequence
  tasks pass `length_bucketed_batch`).

  At the end `workdir/run.json` describes the run for `load_run` (`energynets.train.run`):
  the returned state's checkpoint, the batch shapes, the decoding inferred from `y`,
  and for 0/1 labels the decision threshold, tuned on `validation` (`{"x", "y"}`; its
  predictions cost one pass) or else 0.5. `builder`: `"package.module:function"` or
  `(path, kwargs)` (JSON kwargs) that, called, returns this objective, so that
  `load_run(workdir)` needs no code but the import; checked before training. Without
  it, `load_run` needs `objective=`.

  On a mesh with a `'model'` axis (`make_mesh(model_parallelism=M)`), every state leaf
  with an axis of size `label_dim` (default: the last axis of `train_arrays["y"]`) is
  split over it (`label_axis_shardings`); checkpoints restore onto any mesh.

  `num_shards`: per-process data. The N training rows are cut into `num_shards`
  contiguous shards (`batching.shard_bounds`) and each step's global batch takes
  `batch_size / num_shards` rows from each (`batching.sharded_batch_indices`); process p
  of P then holds only its `batching.process_rows(N, p, P)` in `train_arrays` (and in
  `validation`), and draws its part of every batch from them. A multiple of P; one
  process with `num_shards=S` trains on the batches of S processes. None: every process
  holds all rows and the batches are `train_batch_indices` (the stream of
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
  if options.select_mode not in ("max", "min"):
    raise ValueError(f"select_mode must be 'max' or 'min', got {options.select_mode!r}")
  if options.max_loss_patience < 1:
    raise ValueError(f"max_loss_patience must be at least 1, got {options.max_loss_patience}")
  if options.early_stopping_patience < 1:
    raise ValueError("early_stopping_patience must be at least 1, got "
                     f"{options.early_stopping_patience}")
  # Before any compiling: processes with a workdir each would hang at the first save.
  storage.check_shared_workdir(workdir)
  num_examples = len(next(iter(train_arrays.values())))
  rows = step_lib.process_slice(options.batch_size)
  if num_shards is not None:
    local_batch = train_batch or _process_batches(train_arrays, num_examples, num_shards,
                                                  options)
  elif train_batch is None:
    def train_batch(step: int) -> dict[str, np.ndarray]:
      idx = train_batch_indices(num_examples, options.batch_size, options.seed, step)
      return {k: v[idx] for k, v in train_arrays.items()}

  def batch_at(step: int) -> dict[str, jax.Array]:
    if num_shards is not None:
      return step_lib.shard_batch(local_batch(step), mesh)
    return step_lib.shard_batch({k: v[rows] for k, v in train_batch(step).items()}, mesh)

  init_key, step_key = jax.random.split(jax.random.PRNGKey(options.seed))
  if label_dim is None and step_lib.model_parallelism(mesh) > 1:
    label_dim = np.shape(train_arrays["y"])[-1]
  example = batch_at(0)
  sharding = step_lib.state_sharding_for(objective, mesh, example, label_dim, previous_state)
  if previous_state is None:
    state = step_lib.build_init(objective, mesh, sharding)(init_key, example)
  else:
    state = step_lib.build_init_from(objective, mesh, sharding)(previous_state, init_key,
                                                                example)
  train_step = step_lib.build_train_step(objective, mesh, sharding)

  workdir = storage.workdir_path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  latest = Checkpointer(workdir / "checkpoints", async_save=options.async_checkpoint)
  best = Checkpointer(workdir / "best", async_save=options.async_checkpoint)
  writer = MetricWriter(workdir, tensorboard=options.tensorboard)
  better = (lambda a, b: a > b) if options.select_mode == "max" else (lambda a, b: a < b)

  start, meta = 0, {"best_value": None, "best_step": None, "history": []}
  if (resume_step := latest.latest_step()) is not None:
    state, meta = latest.restore(resume_step, state)
    start = resume_step
    writer.truncate_after(start)
    logging.info("resumed from %s at step %d", latest.directory, start)
  stops_early = (options.early_stopping and evaluate is not None
                 and options.select_metric is not None)

  def early_stop() -> str | None:
    if not stops_early:
      return None
    return early_stopping_lib.stop_reason(
        meta["history"], options.select_metric, options.select_mode,
        options.early_stopping_patience, options.early_stopping_min_delta)

  # A run that stopped early resumes stopped: the rule reads only the recorded history.
  stop_reason = early_stop() if start < options.steps else None
  if stop_reason is not None:
    logging.info("not training past step %d: %s", start, stop_reason)
  trained_to = start

  first_bad = jnp.asarray(-1, jnp.int32)
  last_good_step = start if resume_step is not None else None
  # Logged steps in a row with the loss above options.max_loss, and the first of them.
  over_count, over_since = 0, None

  def last_good() -> str:
    return (f"the last good checkpoint is step {last_good_step} in {latest.directory}"
            if last_good_step is not None else "no checkpoint was written before it")

  def check_finite(step: int, metrics: Mapping[str, Any]) -> None:
    bad = int(first_bad)
    if bad >= 0:
      raise NonFiniteLossError(
          f"non-finite loss at step {bad + 1} (loss at step {step}: {float(metrics['loss'])}); "
          f"training stopped, {last_good()}. Lower the learning rate, clip gradients, or "
          "check the input data for NaN/Inf.")

  def check_bounded(step: int, loss: float) -> None:
    nonlocal over_count, over_since
    if options.max_loss is None or not loss > options.max_loss:
      over_count, over_since = 0, None
      return
    over_count += 1
    over_since = step if over_since is None else over_since
    if over_count >= options.max_loss_patience:
      raise TrainingDivergedError(
          f"training diverged: loss {loss:.4g} at step {step}, above max_loss="
          f"{options.max_loss:g} at {over_count} logged steps in a row since step "
          f"{over_since}; training stopped, {last_good()}. The learning rate is likely "
          "too high: lower it, or clip gradients.")

  def run_eval(step: int) -> dict[str, float]:
    record = {k: float(v) for k, v in evaluate(state).items()}
    writer.write(step, record)
    meta["history"].append({"step": step, **record})
    if options.select_metric is None:
      return record
    if options.select_metric not in record:
      raise KeyError(f"select_metric {options.select_metric!r} not among the evaluation "
                     f"metrics {sorted(record)}")
    value = record[options.select_metric]
    if meta["best_value"] is None or better(value, meta["best_value"]):
      meta["best_value"], meta["best_step"] = value, step
      best.save(step, state, {"value": value})
    logging.info("step %d | %s", step,
                 " ".join(f"{k}={v:.4f}" for k, v in sorted(record.items())))
    return record

  window_start, window_step = time.perf_counter(), start
  metrics = None
  end = options.steps if stop_reason is None else start
  batches = prefetch_lib.Prefetcher(batch_at, start, end, options.prefetch)
  profiler = profiling.StepProfiler(options.profile_steps, workdir)
  if progress is not None:
    progress(start, {})
  for step in range(start, end):
    profiler.before(step)
    state, metrics = train_step(state, batches(step), jax.random.fold_in(step_key, step))
    first_bad = _first_nonfinite(first_bad, metrics["loss"], jnp.asarray(step, jnp.int32))
    done = step + 1
    profiler.after(done, metrics)
    is_last = done == options.steps
    written = {}
    if done % options.log_every == 0 or is_last:
      check_finite(done, metrics)
      now = time.perf_counter()
      rate = (done - window_step) / max(now - window_start, 1e-9)
      window_start, window_step = now, done
      scalars = {f"train/{k}": float(v) for k, v in metrics.items()}
      scalars["train/steps_per_sec"] = rate
      writer.write(done, scalars)
      logging.info("step %d/%d | loss %.4f | %.1f steps/s | ETA %s", done, options.steps,
                   scalars["train/loss"], rate, _format_eta((options.steps - done) / rate))
      check_bounded(done, scalars["train/loss"])
      written.update(scalars)
    if evaluate is not None and (done % options.eval_every == 0 or is_last):
      check_finite(done, metrics)
      written.update(run_eval(done))
      stop_reason = None if is_last else early_stop()
    if progress is not None:
      progress(done, written)
    trained_to = done
    # Asked at every step on every process: all of them save the same step.
    preempted = faults.preemption_reached(done)
    if done % options.checkpoint_every == 0 or is_last or stop_reason is not None or preempted:
      check_finite(done, metrics)
      latest.save(done, state, meta)
      if not over_count:  # a state saved while the loss is above max_loss is no fallback
        last_good_step = done
    if preempted:
      _close_all(batches, profiler, writer, latest, best)
      raise faults.Preempted(done, os.fspath(latest.directory))
    if stop_reason is not None:
      logging.info("step %d/%d | %s", done, options.steps, stop_reason)
      break
  batches.close()
  profiler.close()
  writer.close()

  final_step = trained_to if stop_reason is not None else max(start, options.steps)
  selected_step, selected_value = final_step, None
  if options.select_metric is not None and meta["best_step"] is not None:
    selected_step, selected_value = meta["best_step"], meta["best_value"]
    if selected_step != final_step:
      state, _ = best.restore(selected_step, state)
  latest.close()
  best.close()
  _write_run(workdir, objective, mesh, state, train_arrays, options, validation, builder_entry,
             run_lib.checkpoint_record(selected_value, selected_step), selected_step,
             sharded=num_shards is not None, final_step=final_step, stop_reason=stop_reason,
             label_dim=label_dim)
  return FitResult(state, final_step, selected_step, selected_value, list(meta["history"]),
                   stop_reason)


def _close_all(*resources: Any) -> None:
  """Closes each of `resources` (a stopped `fit`'s prefetcher, profiler, writer and
  checkpointers: an asynchronous save finishes before the process ends)."""
  for resource in resources:
    resource.close()


def _process_batches(train_arrays: Mapping[str, np.ndarray], num_held: int, num_shards: int,
                     options: LoopOptions) -> Callable[[int], dict[str, np.ndarray]]:
  """`step -> this process's part of the global batch` (`batching.sharded_batch_indices`
  over its shards), from the `num_held` training rows it holds (`fit`'s `num_shards`)."""
  index, count = jax.process_index(), jax.process_count()
  shards = process_shards(num_shards, index, count)
  counts = process_row_counts(num_held)
  num_rows = sum(counts)
  held = process_rows(num_rows, index, count)
  for p, n in enumerate(counts):
    expected = process_rows(num_rows, p, count)
    if n != expected.stop - expected.start:
      raise ValueError(f"process {p} of {count} holds {n} training rows, but its part of "
                       f"the {num_rows} is rows {expected.start}:{expected.stop} "
                       "(batching.process_rows)")

  def local_batch(step: int) -> dict[str, np.ndarray]:
    idx = sharded_batch_indices(num_rows, options.batch_size, options.seed, step, num_shards,
                                shards) - held.start
    return {k: v[idx] for k, v in train_arrays.items()}

  return local_batch


def _write_run(workdir: str | os.PathLike, objective: Objective, mesh: jax.sharding.Mesh, state: Any,
               train_arrays: Mapping[str, np.ndarray], options: LoopOptions,
               validation: Mapping[str, np.ndarray] | None, builder: dict | None,
               checkpoint: dict, selected_step: int, sharded: bool = False,
               final_step: int | None = None, stop_reason: str | None = None,
               label_dim: int | None = None) -> None:
  """`workdir/run.json` of a finished `fit` (`run_lib.write_run`); `sharded`: each
  process holds only its rows of `train_arrays` and `validation`; `final_step` and
  `stop_reason`: where and why training ended (`FitResult`); `label_dim`: the size of
  the axes split over the mesh's `'model'` axis (recorded with the split, for
  `load_run`)."""
  decoding = run_lib.infer_decoding(train_arrays["y"]) if "y" in train_arrays else "identity"
  if sharded and jax.process_count() > 1:
    # Inferred from each process's own rows: all follow process 0, which writes the file.
    names = ("identity", "threshold", "argmax")
    decoding = names[int(multihost_utils.broadcast_one_to_all(
        np.int32(names.index(decoding))))]
  threshold, source = 0.5, "default"
  if decoding == "threshold" and validation is not None:
    # Every process takes part in the prediction; process 0 alone writes the file.
    predict = step_lib.build_predict(objective, mesh)
    predict_rows = predict_process_rows if sharded else predict_in_batches
    probs = predict_rows(predict, state, np.asarray(validation["x"]), options.batch_size, mesh)
    y = gather_process_rows(validation["y"]) if sharded else np.asarray(validation["y"])
    threshold = metrics_lib.tune_threshold(y.reshape(len(y), -1), probs.reshape(len(y), -1))
    source = "validation"
  if jax.process_index() != 0:
    return
  run_lib.write_run(
      workdir, arrays=run_lib.array_specs(train_arrays), checkpoint=checkpoint,
      init_batch_size=options.batch_size, predict_batch_size=options.batch_size,
      decoding=decoding, decoding_source="inferred from the training labels y",
      threshold=threshold, threshold_source=source, builder=builder,
      metadata={"writer": "energynets.fit", "selected_step": int(selected_step),
                "seed": options.seed, "final_step": final_step, "stop_reason": stop_reason,
                **run_lib.mesh_record(mesh, label_dim)})

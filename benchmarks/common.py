"""Shared by the benchmarks: median timing of compiled calls, the report file, and the
finished runs and verdict cells they restore."""

from collections.abc import Callable
from collections.abc import Sequence
import glob
import json
import os
import platform
import re
import shlex
import statistics
import sys
import time
import types
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

import energynets as en
from energynets import metrics
from energynets.train import Checkpointer
from experiments import builders
from experiments import configuration
from experiments import workdirs
from experiments.tasks.multilabel import load_multilabel


def median_seconds(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
  """Median wall seconds per call; the functions are called in turn, `repeats` rounds."""
  for fn in fns.values():
    jax.block_until_ready(fn())  # compile (and one warm-up call)
  times: dict[str, list[float]] = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      started = time.perf_counter()
      jax.block_until_ready(fn())
      times[name].append(time.perf_counter() - started)
  return {name: statistics.median(ts) for name, ts in times.items()}


def _busy_cpu_seconds() -> float | None:
  """CPU seconds every process has spent so far (all CPUs, /proc/stat); None where there
  is no /proc/stat."""
  try:
    with open("/proc/stat") as f:
      fields = f.readline().split()
  except OSError:
    return None
  # user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait.
  ticks = [int(v) for v in fields[1:9]]
  return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
  """CPU seconds of this process and of its children that have been waited for."""
  own = os.times()
  return own.user + own.system + own.children_user + own.children_system


class OtherLoad:
  """How much of the machine other processes used while a benchmark ran, from its
  creation on: `fraction()` = (every process's CPU time − this process's) / (wall time ×
  CPUs), from /proc/stat; unlike the load average, it counts what ran during the
  measurement only."""

  def __init__(self):
    self._start = (time.perf_counter(), _busy_cpu_seconds(), _own_cpu_seconds())

  def other_cpu_seconds(self) -> float | None:
    """CPU seconds other processes have used since creation; None without /proc/stat."""
    _, busy0, own0 = self._start
    busy = _busy_cpu_seconds()
    if busy is None or busy0 is None:
      return None
    return max(0.0, (busy - busy0) - (_own_cpu_seconds() - own0))

  def fraction(self) -> float | None:
    """Other processes' share of all CPUs since creation; None without /proc/stat."""
    other = self.other_cpu_seconds()
    if other is None:
      return None
    # Clipped at 1: /proc/stat counts in clock ticks, so a short window can overshoot.
    return min(1.0, other / ((time.perf_counter() - self._start[0]) * (os.cpu_count() or 1)))

  def describe(self) -> str:
    """'other processes used N% of the CPUs meanwhile', or '' without /proc/stat."""
    share = self.fraction()
    return (
      "" if share is None else (f"other processes used {100 * share:.0f}% of the CPUs meanwhile")
    )


class MultilabelShapes:
  """What the objective builders read from a multi-label dataset: its shapes only, so a
  benchmark on random arrays of a dataset's shapes needs no data files. `train.x` is
  an empty `[num_train, 0]` array: only its length is read (BR's `loss.l2_c`)."""

  def __init__(self, num_features: int, num_labels: int, num_train: int = 4880):
    self.num_features, self.num_labels = num_features, num_labels
    self.label_names = tuple(f"l{i}" for i in range(num_labels))
    self.train = types.SimpleNamespace(x=np.empty((num_train, 0), np.float32))


def random_multilabel_batch(
  rs: np.random.RandomState, size: int, num_features: int, num_labels: int
) -> dict[str, jax.Array]:
  """`{"x", "y"}` of `size` random rows: binary features (5% on, bag-of-words like
  bibtex) and labels (2% on, bibtex's 2.4 of 159); cost does not depend on the values."""
  return {
    "x": jnp.asarray(rs.uniform(size=(size, num_features)) < 0.05, jnp.float32),
    "y": jnp.asarray(rs.uniform(size=(size, num_labels)) < 0.02, jnp.float32),
  }


def shrink_networks(config: ml_collections.ConfigDict) -> None:
  """Tiny networks and loops for a benchmark's `--quick` run: 16-unit hidden layers, 4
  measurements, at most 3 GBI steps, so that every compilation takes about a second."""
  if "model" in config and config.model.get("hidden"):
    config.model.hidden = (16, 16)
  if "energy" in config:
    if config.energy.get("feature_hidden"):
      config.energy.feature_hidden = (16, 16)
    config.energy.num_measurements = 4
  for key in ("gbi", "adversarial_gbi"):
    if key in config:
      config[key].num_steps = min(config[key].num_steps, 3)


def peak_bytes(compiled) -> int:
  """The memory a compiled function holds at its peak, from XLA's `memory_analysis()`:
  arguments + outputs + temporaries − outputs aliased to (donated) arguments."""
  m = compiled.memory_analysis()
  return int(
    m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
  )


def machine_description() -> str:
  """What timed the benchmark: jax version, backend, device kind, CPUs, processor."""
  device = jax.devices()[0]
  return (
    f"jax {jax.__version__} on {device.platform} ({device.device_kind}, "
    f"{os.cpu_count()} CPUs visible, {platform.processor() or platform.machine()})"
  )


def write_report(path: str, module: str, body: str, revision: str | None = None) -> None:
  """Writes `body` to `path` under a line naming the command that produced it.

  The command is `python -m <module>` with this process's arguments; `revision`
  defaults to the checkout's `experiments.workdirs.code_revision()`.
  """
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  command = " ".join(["python", "-m", module] + [shlex.quote(a) for a in sys.argv[1:]])
  revision = revision or workdirs.code_revision()
  with open(path, "w") as f:
    f.write(f"Generated by `{command}` (code revision {revision}).\n\n{body}\n")


def finished_run_config(run_dir: str, data_dir: str = "") -> ml_collections.ConfigDict:
  """The config a finished run of experiments.main recorded in its results.json, with
  its data directory replaced by `data_dir` when given (runs move between machines)."""
  path = os.path.join(run_dir, "results.json")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path} is missing: {run_dir} is not a finished run")
  with open(path) as f:
    config = ml_collections.ConfigDict(json.load(f)["meta"]["config"])
  if data_dir and "data_dir" in config.data:
    config.data.data_dir = data_dir
  return config


_VERDICT_CELL = re.compile(r"seed(\d+)/([^/]+)/n(\d+|all)/(.+)_(tuned|default)$")


class VerdictCell(NamedTuple):
  """A finished cell of a `benchmarks.verdict` workdir."""

  directory: str
  seed: int
  dataset: str
  size: int  # training rows; 0: all of them
  method: str


def verdict_cells(workdir: str) -> list[VerdictCell]:
  """The finished cells (`seed<s>/<dataset>/n<size>/<method>_<mode>` holding results.json
  and run.json) under `workdir`, in path order."""
  found = []
  for results in sorted(glob.glob(os.path.join(workdir, "seed*", "*", "*", "*", "results.json"))):
    directory = os.path.dirname(results)
    match = _VERDICT_CELL.search(os.path.relpath(directory, workdir))
    if match is None or not os.path.isfile(os.path.join(directory, "run.json")):
      continue
    seed, dataset, size, method, _ = match.groups()
    found.append(VerdictCell(directory, int(seed), dataset, int(size.replace("all", "0")), method))
  return found


def run_predictions(
  run_dir: str, data_dir: str = "", stages: Sequence[str] = ("",)
) -> list[dict[str, np.ndarray]]:
  """The validation and test labels and probabilities of states of a finished
  multi-label run of experiments.main, its dataset loaded once.

  Args:
    run_dir: the run's directory (results.json, run.json, its checkpoints).
    data_dir: where its dataset is, when not where the run read it.
    stages: whose states: "" the state the run reports, a stage of the run's config
      that stage's selected state (`stages/<stage>`).

  Returns:
    One `{"y_val", "p_val", "y_test", "p_test"}` per entry of `stages`.
  """
  config = finished_run_config(run_dir, data_dir)
  data = load_multilabel(config)
  stage_configs = dict(configuration.stage_configs(config))
  out = []
  for stage in stages:
    if stage:
      objective = builders.build_objective(stage_configs[stage], data)
      predictor = en.load_run(os.path.join(run_dir, "stages", stage), objective=objective)
    else:
      predictor = en.load_run(run_dir)
    out.append(
      {
        "y_val": data.validation.y,
        "p_val": np.asarray(predictor.predict(data.validation.x)),
        "y_test": data.test.y,
        "p_test": np.asarray(predictor.predict(data.test.x)),
      }
    )
  return out


class NotASpenStage(ValueError):
  """A finished run whose last stage keeps no SPEN energy (e.g. a task-net stage)."""


def restore_spen_params(config, dataset, workdir: str) -> tuple[Any, str]:
  """(energy params, where from) of a SPEN run of experiments.main at `workdir`: the
  selected state of its last stage, `best/` if it exists, else the latest checkpoint."""
  name, stage = configuration.stage_configs(config)[-1]
  stage_dir = os.path.join(workdir, "stages", name) if name else workdir
  objective = builders.build_objective(stage, dataset)
  x0 = jnp.asarray(dataset.train.x[:1], jnp.float32)
  target = objective.init(
    jax.random.PRNGKey(0), {"x": x0, "y": jnp.asarray(dataset.train.y[:1], jnp.float32)}
  )
  if "energy" not in target:
    raise NotASpenStage(f"{stage_dir}: the last stage ({stage.method}) is not a SPEN stage")
  for sub in ("best", "checkpoints"):
    directory = os.path.join(stage_dir, sub)
    if not os.path.isdir(directory):
      continue
    checkpointer = Checkpointer(directory)
    step = checkpointer.latest_step()
    if step is not None:
      state, _ = checkpointer.restore(step, target)
      checkpointer.close()
      return state["energy"].params, f"{directory} step {step}"
    checkpointer.close()
  raise FileNotFoundError(f"no checkpoint under {stage_dir}/best or /checkpoints")


class SpenRun(NamedTuple):
  """A finished SPEN run, restored: what the run-reading benchmarks start from."""

  config: ml_collections.ConfigDict  # as the run recorded it
  dataset: Any
  energy: Any  # the SPENEnergy module
  params: Any  # its last stage's selected parameters
  source: str  # where they were restored from
  last: ml_collections.ConfigDict  # the last stage's config (predict_gbi, loss.init)


def restore_spen_run(run_dir: str, data_dir: str = "") -> SpenRun:
  """The run of experiments.main at `run_dir`: config, data, energy and parameters of
  its last stage (`restore_spen_params`)."""
  config = finished_run_config(run_dir, data_dir)
  dataset = builders.load_data(config)
  energy = builders.spen_energy(config, dataset)
  params, source = restore_spen_params(config, dataset, run_dir)
  last_stage = configuration.stage_configs(config)[-1][1]
  return SpenRun(config, dataset, energy, params, source, last_stage)


def sklearn_br_results(dataset, c: float) -> dict[str, float]:
  """scikit-learn's one-vs-rest `LogisticRegression(C=c)` on a multi-label dataset,
  evaluated by our metric protocol (the oracle of `br`; here, not in the flag-defining
  br_vs_sklearn binary, so tests can import it next to other binaries)."""
  from sklearn.linear_model import LogisticRegression  # pylint: disable=g-import-not-at-top
  from sklearn.multiclass import OneVsRestClassifier  # pylint: disable=g-import-not-at-top

  y = dataset.train.y
  # A label with no positive train example cannot be fit; it is predicted 0 (its prior).
  fit_cols = np.flatnonzero(y.max(0) > 0)
  clf = OneVsRestClassifier(LogisticRegression(C=c, max_iter=2000), n_jobs=-1)
  clf.fit(dataset.train.x, y[:, fit_cols])

  def probs(split):
    p = np.zeros(split.y.shape, np.float32)
    p[:, fit_cols] = clf.predict_proba(split.x)
    return p

  return metrics.evaluate_multilabel(
    val=(dataset.validation.y, probs(dataset.validation)),
    test=(dataset.test.y, probs(dataset.test)),
  )


def build_state(stages, shapes, batch) -> tuple[Any, Any]:
  """The last stage's objective and a state built as the trainer builds it: `init` of
  the first stage, then `init_from` of each later one (SEAL-static's task-net phase,
  for one, can only continue a loss-net)."""
  rng, state, objective = jax.random.key(0), None, None
  for stage in stages:
    objective = builders.build_objective(stage, shapes)
    if state is None or objective.init_from is None:
      state = objective.init(rng, batch)
    else:
      state = objective.init_from(state, rng, batch)
  return objective, state

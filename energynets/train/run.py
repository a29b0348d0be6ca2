"""A run is a value on disk: `run.json` beside the orbax checkpoint, and `load_run`.

`fit` and `experiments.main` write `<workdir>/run.json`; `load_run(workdir)` reads it
in any process and returns a `Predictor`. The file holds what rebuilding the
predictor needs and nothing that must be re-derived from the training data:

- `format` / `version`: `RUN_FORMAT` and `RUN_VERSION`;
- `checkpoint`: the checkpoint the run reports results from, `{"directory": path
  relative to the workdir, "step": int}` (the state selected on validation, else the
  last one);
- `arrays`: per-example `{"shape", "dtype"}` of every batch array (`x`, `y`, ...) and
  `init_batch_size`, the batch the state was initialized with;
- `domain` (`'box'`, `'simplex'`, `'real'`) and `decoding` (`'threshold'`, `'argmax'`,
  `'identity'`), with `decoding_source` saying where they come from;
- `threshold` and `threshold_source` (`'validation'`: tuned on the validation split;
  `'default'`: 0.5, no validation data);
- `predict_batch_size`: rows per prediction batch;
- `builder`: `{"path": "package.module:function", "kwargs": {...}}` (JSON), which called
  as `function(**kwargs)` returns the `Objective`; null when the run has none;
- `metadata`: free-form facts about the run (task, dataset, selected step, ...), among
  them `model_parallelism` (M of the training mesh, `make_mesh`) and, with M > 1,
  `label_dim`: `load_run` splits the state's label axes the same way where the devices
  allow.
"""

import importlib
import json
import math
from typing import Any, Callable, Mapping

from etils import epath
import jax
import numpy as np

from energynets.objectives.base import Objective
from energynets.train import step as step_lib
from energynets.train import storage
from energynets.train.checkpoint import Checkpointer

RUN_FILE = "run.json"
"""The name of a run's description file in its workdir."""

RUN_FORMAT = "energynets.run"
"""The `format` field of every run.json."""

RUN_VERSION = 1
"""The run.json format version this library writes and reads."""

DECODINGS = ("threshold", "argmax", "identity")
"""How `Predictor.predict` turns soft outputs into labels: Box outputs at the threshold,
per-position Simplex outputs by argmax, real outputs unchanged."""

_DOMAIN_OF = {"threshold": "box", "argmax": "simplex", "identity": "real"}

# Rows of y inspected to infer the decoding: enough to see every label pattern that
# matters (binary or not, one-hot or not) without scanning a large training set.
_INFERENCE_ROWS = 4096


class RunNotFoundError(FileNotFoundError):
  """The workdir holds no run.json (or the checkpoint it names is missing)."""


class RunFormatError(ValueError):
  """run.json is not a run description this version of the library reads."""


class BuilderError(ValueError):
  """A builder (an objective's import path) is missing, malformed or does not import."""


def is_import_path(value: Any) -> bool:
  """Whether `value` is an import path string `"package.module:attribute"`."""
  return isinstance(value, str) and ":" in value


def import_path(path: str, what: str = "builder") -> Callable[..., Any]:
  """The object an import path `"package.module:attribute"` names.

  Args:
    path: `module:attribute`, where `attribute` may be dotted (`module:Class.method`).
    what: how errors name the path (e.g. `'config.method'`).

  Returns:
    The attribute (a callable).

  Raises:
    BuilderError: a one-line message naming `path` and why it does not resolve
      (malformed, the module does not import, the attribute is missing, not callable).
  """
  module_name, sep, attribute = str(path).partition(":")
  if not sep or not module_name or not attribute:
    raise BuilderError(f"{what} {path!r} is not an import path: expected "
                       "'package.module:function'")
  try:
    target = importlib.import_module(module_name)
  except Exception as e:  # any failure while importing user code: name it in one line
    raise BuilderError(f"{what} {path!r} does not import: {type(e).__name__}: "
                       f"{_one_line(e)}") from None
  for name in attribute.split("."):
    try:
      target = getattr(target, name)
    except AttributeError:
      raise BuilderError(f"{what} {path!r} does not import: module {module_name!r} has no "
                         f"attribute {attribute!r}") from None
  if not callable(target):
    raise BuilderError(f"{what} {path!r} names a {type(target).__name__}, not a function")
  return target


def builder_record(builder: str | tuple[str, Mapping[str, Any]] | None
                   ) -> dict[str, Any] | None:
  """The `builder` entry of run.json for `fit(builder=...)`, checked now.

  Args:
    builder: an import path `"package.module:function"`, a pair `(path, kwargs)` with
      JSON-serializable kwargs, or None.

  Returns:
    `{"path": path, "kwargs": kwargs}`, or None.

  Raises:
    BuilderError: the path does not import or the kwargs are not JSON data.
  """
  if builder is None:
    return None
  if isinstance(builder, str):
    path, kwargs = builder, {}
  elif isinstance(builder, (tuple, list)) and len(builder) == 2:
    path, kwargs = builder
  else:
    raise BuilderError(f"builder must be 'package.module:function' or (path, kwargs), got "
                       f"{builder!r}")
  import_path(path)
  try:
    kwargs = json.loads(json.dumps(dict(kwargs)))
  except (TypeError, ValueError) as e:
    raise BuilderError(f"the kwargs of builder {path!r} are not JSON data: "
                       f"{_one_line(e)}") from None
  return {"path": path, "kwargs": kwargs}


def array_specs(arrays: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
  """`{name: {"shape": per-example shape, "dtype": name}}` of `{name: [N, ...]}` arrays."""
  return {name: {"shape": [int(d) for d in np.shape(a)[1:]],
                 "dtype": np.dtype(getattr(a, "dtype", np.float32)).name}
          for name, a in arrays.items()}


def infer_decoding(y: Any) -> str:
  """The decoding `y [N, ...]` implies: `'threshold'` for 0/1 labels (multi-label, binary
  masks), `'argmax'` for one-hot rows of at least 2-D examples (per-token tags; all-zero
  rows are padding), `'identity'` otherwise (real targets)."""
  y = np.asarray(y[:_INFERENCE_ROWS])
  if y.size == 0 or not np.all((y == 0) | (y == 1)):
    return "identity"
  if y.ndim >= 3:
    sums = y.sum(-1)
    if np.all((sums == 0) | (sums == 1)) and np.any(sums == 1):
      return "argmax"
  return "threshold"


def checkpoint_record(selected_value: float | None, selected_step: int,
                      prefix: str = "") -> dict[str, Any]:
  """The `checkpoint` entry of run.json for a `fit` result: the state `fit` returned.

  Args:
    selected_value: `FitResult.selected_value` (None: no state was selected on
      validation, so the latest checkpoint is the returned state).
    selected_step: `FitResult.selected_step`.
    prefix: the directory of that `fit` call relative to the run's workdir ('' when
      they are the same; `stages/<name>` for a stage of `experiments.main`).
  """
  directory = "best" if selected_value is not None else "checkpoints"
  return {"directory": f"{prefix}/{directory}" if prefix else directory,
          "step": int(selected_step)}


def write_run(workdir: str | epath.PathLike, *, arrays: Mapping[str, Mapping[str, Any]],
              checkpoint: Mapping[str, Any], init_batch_size: int, predict_batch_size: int,
              decoding: str, decoding_source: str, threshold: float, threshold_source: str,
              builder: Mapping[str, Any] | None,
              metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
  """Writes `<workdir>/run.json` (whole or not at all) and returns its content.

  Args:
    workdir: the run's directory (an `etils.epath` path: local, mounted or `gs://`).
    arrays: `array_specs` of a batch.
    checkpoint: `checkpoint_record(...)`.
    init_batch_size: the batch size `objective.init` saw.
    predict_batch_size: rows per prediction batch.
    decoding: one of `DECODINGS`; `decoding_source` says how it was chosen.
    threshold: the decision threshold of `'threshold'` decoding; `threshold_source`:
      `'validation'` (tuned) or `'default'` (0.5).
    builder: `builder_record(...)` or None.
    metadata: JSON-serializable facts about the run.

  Returns:
    The run description as written.
  """
  if decoding not in DECODINGS:
    raise ValueError(f"decoding must be one of {DECODINGS}, got {decoding!r}")
  record = {
      "format": RUN_FORMAT, "version": RUN_VERSION, "checkpoint": dict(checkpoint),
      "arrays": {k: dict(v) for k, v in arrays.items()},
      "init_batch_size": int(init_batch_size), "predict_batch_size": int(predict_batch_size),
      "domain": _DOMAIN_OF[decoding], "decoding": decoding,
      "decoding_source": decoding_source, "threshold": float(threshold),
      "threshold_source": threshold_source,
      "builder": dict(builder) if builder is not None else None,
      "metadata": dict(metadata or {}),
  }
  text = json.dumps(record, indent=2, sort_keys=True, default=_json_default)
  directory = storage.workdir_path(workdir)
  directory.mkdir(parents=True, exist_ok=True)
  # Written beside and renamed over, so a reader never sees half a file.
  partial = directory / (RUN_FILE + ".partial")
  partial.write_text(text)
  partial.replace(directory / RUN_FILE)
  return json.loads(text)


def mesh_record(mesh: jax.sharding.Mesh, label_dim: int | None = None) -> dict[str, int]:
  """run.json metadata of the training mesh: `{"model_parallelism": M}`, and with M > 1
  the `label_dim` whose axes were split (`load_run` reads both)."""
  ways = step_lib.model_parallelism(mesh)
  record = {"model_parallelism": int(ways)}
  if ways > 1 and label_dim is not None:
    record["label_dim"] = int(label_dim)
  return record


def read_run(workdir: str | epath.PathLike) -> dict[str, Any]:
  """The run description in `<workdir>/run.json`, checked.

  Raises:
    RunNotFoundError: no run.json in `workdir`.
    RunFormatError: not valid JSON, not a run description, or another format version.
  """
  path = storage.workdir_path(workdir) / RUN_FILE
  if not path.exists():
    raise RunNotFoundError(f"no run in {workdir}: expected {RUN_FILE} written by "
                           "energynets.fit or experiments.main")
  try:
    record = json.loads(path.read_text())
  except ValueError as e:
    raise RunFormatError(f"{path} is not JSON: {_one_line(e)}") from None
  if not isinstance(record, dict) or record.get("format") != RUN_FORMAT:
    raise RunFormatError(f"{path} is not an energynets run description (format "
                         f"{RUN_FORMAT!r})")
  if record.get("version") != RUN_VERSION:
    raise RunFormatError(f"{path} has format version {record.get('version')!r}; this "
                         f"energynets reads version {RUN_VERSION}: load it with the "
                         "version that wrote it, or retrain")
  return record


class Predictor:
  """A trained run, restored: soft predictions and decoded labels for new inputs.

  It runs the objective's `predict` on rows as the model saw them in training; a task
  that evaluates other rows than a split's (segmentation's test-time crops) predicts
  whole splits through `experiments.predict.soft_predictions`.

  Attributes:
    objective: the run's `Objective`.
    state: the restored training state on `mesh`: replicated, or on a `('data',
      'model')` mesh with its label axes split (`step.label_axis_shardings`).
    mesh: the device mesh predictions run on (`load_run`).
    threshold: the decision threshold of `'threshold'` decoding.
    decoding: `'threshold'`, `'argmax'` or `'identity'` (`DECODINGS`).
    metadata: the whole run description (run.json).
  """

  def __init__(self, objective: Objective, state: Any, mesh: jax.sharding.Mesh,
               record: Mapping[str, Any]):
    self.objective, self.state, self.mesh = objective, state, mesh
    self.metadata = dict(record)
    self.threshold = float(record["threshold"])
    self.decoding = record["decoding"]
    self._x_spec = record["arrays"]["x"]
    self._batch_size = int(record["predict_batch_size"])
    self._predict = step_lib.build_predict(objective, mesh)

  def predict_soft(self, x: Any, batch_size: int | None = None) -> np.ndarray:
    """Relaxed outputs `[N, ...]` of inputs `x [N, ...]` (e.g. `[N, L]` in [0, 1]).

    Args:
      x: rows shaped like the run's training inputs (the run's per-example shape; a
        packed sequence may have another length T).
      batch_size: rows per device batch call (default: the run's prediction batch),
        rounded up to a multiple of the number of devices.

    Returns:
      float numpy outputs, one row per row of `x`.
    """
    # loop.py imports this module (fit writes run.json), so the loop is imported here.
    from energynets.train import process_rows  # pylint: disable=g-import-not-at-top
    x = np.asarray(x, dtype=self._x_spec["dtype"])
    want = tuple(self._x_spec["shape"])
    if x.ndim != len(want) + 1 or (want and x.shape[-1] != want[-1]):
      raise ValueError(f"x has per-example shape {tuple(x.shape[1:])}; the run was trained "
                       f"on {want}")
    if len(x) == 0:
      raise ValueError("x has no rows")
    # A multiple of the (global) device count, no larger than x needs.
    size = min(batch_size or self._batch_size, len(x))
    size = -(-size // self.mesh.size) * self.mesh.size
    return process_rows.predict_in_batches(self._predict, self.state, x, size, self.mesh)

  def predict(self, x: Any, batch_size: int | None = None) -> np.ndarray:
    """Decoded labels of `x [N, ...]`: `'threshold'`: int32 0/1 of `y_soft >= threshold`;
    `'argmax'`: int32 class indices of the last axis (`[N, T]` per token);
    `'identity'`: the soft outputs themselves."""
    return decode(self.predict_soft(x, batch_size), self.decoding, self.threshold)


def decode(y_soft: np.ndarray, decoding: str, threshold: float = 0.5) -> np.ndarray:
  """Labels of soft outputs by `decoding` (see `Predictor.predict`)."""
  if decoding == "threshold":
    return (y_soft >= threshold).astype(np.int32)
  if decoding == "argmax":
    return np.argmax(y_soft, axis=-1).astype(np.int32)
  return y_soft


def load_run(workdir: str | epath.PathLike, objective: Objective | None = None,
             num_devices: int | None = None,
             model_parallelism: int | None = None) -> Predictor:
  """Restores the run in `workdir` (written by `fit` or `experiments.main`) as a predictor.

  The checkpoint restores onto any mesh: a run trained with its label dimension split
  over M devices (`make_mesh(model_parallelism=M)`) loads on however many devices are
  here, split the same way where they allow it.

  Args:
    workdir: the run's directory, holding run.json and its checkpoints.
    objective: the run's objective; default: rebuilt by calling the builder run.json
      records (`fit(builder=...)`; every `experiments.main` run records one).
    num_devices: devices to predict on (default: all); any count gives the same
      outputs, to float32 rounding.
    model_parallelism: how many of those devices split the state's label axes (a
      `('data', 'model')` mesh, as in training); default: the largest that divides the
      run's training M, the device count and each host's device count (1, a
      replicated state, for a run trained without a split).

  Returns:
    A `Predictor` holding the state the run reports results from.

  Raises:
    RunNotFoundError: no run.json in `workdir`, or its checkpoint is missing.
    RunFormatError: run.json of another format version.
    BuilderError: no builder recorded and no `objective` given, or the recorded
      builder does not import.
  """
  record = read_run(workdir)
  checkpoint = record["checkpoint"]
  directory = storage.workdir_path(workdir) / checkpoint["directory"]
  step = int(checkpoint["step"])
  if not (directory / str(step)).exists():
    raise RunNotFoundError(f"run in {workdir}: checkpoint step {step} is missing from "
                           f"{directory}")
  if objective is None:
    builder = record.get("builder")
    if not builder:
      raise BuilderError(f"the run in {workdir} records no builder: pass "
                         "load_run(workdir, objective=...) or train with "
                         "fit(..., builder='package.module:function')")
    build = import_path(builder["path"])
    objective = build(**builder.get("kwargs", {}))
  metadata = record.get("metadata") or {}
  if model_parallelism is None:
    devices = len(jax.devices()) if num_devices is None else num_devices
    model_parallelism = math.gcd(int(metadata.get("model_parallelism", 1)), devices,
                                 jax.local_device_count())
  mesh = step_lib.make_mesh(num_devices, model_parallelism)
  batch = {name: jax.ShapeDtypeStruct((int(record["init_batch_size"]), *spec["shape"]),
                                      np.dtype(spec["dtype"]))
           for name, spec in record["arrays"].items()}
  abstract = jax.eval_shape(objective.init, jax.random.PRNGKey(0), batch)
  if step_lib.model_parallelism(mesh) > 1:
    # fit's default: the labels are the last axis of y.
    label_dim = metadata.get("label_dim") or (record["arrays"].get("y", {}).get("shape")
                                              or [None])[-1]
    if not label_dim:
      raise ValueError(f"the run in {workdir} records no label dimension to split over "
                       f"model_parallelism={model_parallelism}: pass model_parallelism=1")
    shardings = step_lib.label_axis_shardings(abstract, mesh, int(label_dim))
  else:
    shardings = jax.tree.map(lambda _: step_lib.replicated(mesh), abstract)
  abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                          abstract, shardings)
  checkpointer = Checkpointer(str(directory))
  try:
    state, _ = checkpointer.restore(step, abstract)
  finally:
    checkpointer.close()
  return Predictor(objective, state, mesh, record)


def _one_line(error: BaseException) -> str:
  return " ".join(str(error).split()) or type(error).__name__


def _json_default(value):
  if isinstance(value, (np.integer, np.floating, np.bool_)):
    return value.item()
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, (tuple, set)):
    return list(value)
  return str(value)

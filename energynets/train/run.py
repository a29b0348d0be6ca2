"""A run is a value on disk: `run.json` beside the orbax checkpoint.

`fit` and `experiments.main` write `<workdir>/run.json`; `load_run(workdir)`
(`energynets.train.predictor`) reads it in any process and returns a `Predictor`. The
file holds what rebuilding the predictor needs and nothing that must be re-derived from
the training data:

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

from collections.abc import Callable
from collections.abc import Mapping
import importlib
import inspect
import json
from typing import Any

from etils import epath
import jax
import numpy as np

from energynets.objectives.base import Objective
from energynets.train import step as step_lib
from energynets.train import storage

__all__ = [
  "abstract_state",
  "array_specs",
  "build_objective",
  "builder_record",
  "BuilderError",
  "check_rebuilds",
  "checkpoint_record",
  "DECODINGS",
  "import_path",
  "infer_decoding",
  "is_import_path",
  "mesh_record",
  "read_run",
  "RUN_FILE",
  "RUN_FORMAT",
  "RUN_VERSION",
  "RunFormatError",
  "RunNotFoundError",
  "write_run",
]

RUN_FILE = "run.json"
"""The name of a run's description file in its workdir."""

RUN_FORMAT = "energynets.run"
"""The `format` field of every run.json."""

RUN_VERSION = 1
"""The run.json format version this library writes and reads."""

DECODINGS = ("threshold", "argmax", "identity")
"""The values of run.json's `decoding` field (a file format's names, read back by
`Predictor`): how `Predictor.labels` turns soft outputs into labels: Box outputs at the
threshold, per-position Simplex outputs by argmax, real outputs unchanged."""

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
    raise BuilderError(f"{what} {path!r} is not an import path: expected 'package.module:function'")
  try:
    target = importlib.import_module(module_name)
  except Exception as e:  # any failure while importing user code: name it in one line
    raise BuilderError(
      f"{what} {path!r} does not import: {type(e).__name__}: {_one_line(e)}"
    ) from None
  for name in attribute.split("."):
    try:
      target = getattr(target, name)
    except AttributeError:
      raise BuilderError(
        f"{what} {path!r} does not import: module {module_name!r} has no attribute {attribute!r}"
      ) from None
  if not callable(target):
    raise BuilderError(f"{what} {path!r} names a {type(target).__name__}, not a function")
  return target


def builder_record(builder: str | tuple[str, Mapping[str, Any]] | None) -> dict[str, Any] | None:
  """The `builder` entry of run.json for `fit(builder=...)`, checked now.

  Args:
    builder: an import path `"package.module:function"`, a pair `(path, kwargs)` with
      JSON-serializable kwargs, or None.

  Returns:
    `{"path": path, "kwargs": kwargs}`, or None.

  Raises:
    BuilderError: the path does not import, names a function of `__main__` (which a
      later process cannot import), or the function does not take the kwargs; or the
      kwargs are not JSON data.
  """
  if builder is None:
    return None
  kwargs: Mapping[str, Any]
  if isinstance(builder, str):
    path, kwargs = builder, {}
  elif isinstance(builder, (tuple, list)) and len(builder) == 2:
    path, kwargs = builder
  else:
    raise BuilderError(
      f"builder must be 'package.module:function' or (path, kwargs), got {builder!r}"
    )
  main = (
    f"builder {path!r} is defined in __main__, which a later process cannot import: "
    "move it to an importable module"
  )
  if str(path).partition(":")[0] == "__main__":
    raise BuilderError(main)
  build = import_path(path)
  if getattr(build, "__module__", None) == "__main__":
    raise BuilderError(main)
  try:
    kwargs = json.loads(json.dumps(dict(kwargs)))
  except (TypeError, ValueError) as e:
    raise BuilderError(
      f"the kwargs of builder {path!r} are not JSON data: {_one_line(e)}"
    ) from None
  try:
    signature = inspect.signature(build)
  except (TypeError, ValueError):  # no signature to read (a builtin): the call will tell
    signature = None
  if signature is not None:
    try:
      signature.bind(**kwargs)
    except TypeError as e:
      raise BuilderError(
        f"builder {path!r} cannot be called with the kwargs {sorted(kwargs)}: {_one_line(e)}"
      ) from None
  return {"path": path, "kwargs": kwargs}


def build_objective(builder: Mapping[str, Any]) -> Objective:
  """The objective a `builder_record` rebuilds: `function(**kwargs)`."""
  return import_path(builder["path"])(**builder.get("kwargs", {}))


def abstract_state(
  objective: Objective, arrays: Mapping[str, Mapping[str, Any]], init_batch_size: int
) -> Any:
  """`jax.eval_shape` of `objective.init` on a batch of `init_batch_size` rows shaped as
  `arrays` (`array_specs`): the state `load_run` restores a run's checkpoint onto."""
  batch = {
    name: jax.ShapeDtypeStruct((int(init_batch_size), *spec["shape"]), np.dtype(spec["dtype"]))
    for name, spec in arrays.items()
  }
  return jax.eval_shape(objective.init, jax.random.PRNGKey(0), batch)


def check_rebuilds(
  builder: Mapping[str, Any],
  state: Any,
  arrays: Mapping[str, Mapping[str, Any]],
  init_batch_size: int,
) -> None:
  """Checks that `builder` rebuilds an objective whose state is laid out as `state`.

  Args:
    builder: `builder_record(...)`.
    state: the state being trained.
    arrays: `array_specs` of the training batch; `init_batch_size`: its rows.

  Raises:
    BuilderError: the rebuilt objective's `init` gives another structure, shape or
      dtype; the message names the first path that differs.
  """
  rebuilt = abstract_state(build_objective(builder), arrays, init_batch_size)
  want = jax.tree_util.tree_flatten_with_path(state)[0]
  got = jax.tree_util.tree_flatten_with_path(rebuilt)[0]
  prefix = f"builder {builder['path']!r} rebuilds another state than the one trained"
  for (path, trained), (rebuilt_path, leaf) in zip(want, got):
    if path != rebuilt_path:
      raise BuilderError(
        f"{prefix}: the trained state has {_path_name(path)} where the "
        f"rebuilt one has {_path_name(rebuilt_path)}"
      )
    trained_spec = (tuple(np.shape(trained)), np.dtype(getattr(trained, "dtype", np.float32)))
    rebuilt_spec = (tuple(leaf.shape), np.dtype(leaf.dtype))
    if trained_spec != rebuilt_spec:
      raise BuilderError(
        f"{prefix}: {_path_name(path)} is {_spec_name(rebuilt_spec)}, "
        f"trained {_spec_name(trained_spec)}"
      )
  if len(want) != len(got):
    longer, which = (want, "trained") if len(want) > len(got) else (got, "rebuilt")
    raise BuilderError(
      f"{prefix}: only the {which} state has {_path_name(longer[min(len(want), len(got))][0])}"
    )


def _path_name(path: tuple) -> str:
  return "state" + jax.tree_util.keystr(path)


def _spec_name(spec: tuple) -> str:
  shape, dtype = spec
  return f"{dtype.name}{list(shape)}"


def array_specs(arrays: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
  """`{name: {"shape": per-example shape, "dtype": name}}` of `{name: [N, ...]}` arrays."""
  return {
    name: {
      "shape": [int(d) for d in np.shape(a)[1:]],
      "dtype": np.dtype(getattr(a, "dtype", np.float32)).name,
    }
    for name, a in arrays.items()
  }


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


def checkpoint_record(
  selected_value: float | None, selected_step: int, prefix: str = ""
) -> dict[str, Any]:
  """The `checkpoint` entry of run.json for a `fit` result: the state `fit` returned.

  Args:
    selected_value: `FitResult.selected_value` (None: no state was selected on
      validation, so the latest checkpoint is the returned state).
    selected_step: `FitResult.selected_step`.
    prefix: the directory of that `fit` call relative to the run's workdir ('' when
      they are the same; `stages/<name>` for a stage of `experiments.main`).
  """
  directory = "best" if selected_value is not None else "checkpoints"
  return {"directory": f"{prefix}/{directory}" if prefix else directory, "step": int(selected_step)}


def write_run(
  workdir: str | epath.PathLike,
  *,
  arrays: Mapping[str, Mapping[str, Any]],
  checkpoint: Mapping[str, Any],
  init_batch_size: int,
  predict_batch_size: int,
  decoding: str,
  decoding_source: str,
  threshold: float,
  threshold_source: str,
  builder: Mapping[str, Any] | None,
  metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
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
    "format": RUN_FORMAT,
    "version": RUN_VERSION,
    "checkpoint": dict(checkpoint),
    "arrays": {k: dict(v) for k, v in arrays.items()},
    "init_batch_size": int(init_batch_size),
    "predict_batch_size": int(predict_batch_size),
    "domain": _DOMAIN_OF[decoding],
    "decoding": decoding,
    "decoding_source": decoding_source,
    "threshold": float(threshold),
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
    raise RunNotFoundError(
      f"no run in {workdir}: expected {RUN_FILE} written by energynets.fit or experiments.main"
    )
  try:
    record = json.loads(path.read_text())
  except ValueError as e:
    raise RunFormatError(f"{path} is not JSON: {_one_line(e)}") from None
  if not isinstance(record, dict) or record.get("format") != RUN_FORMAT:
    raise RunFormatError(f"{path} is not an energynets run description (format {RUN_FORMAT!r})")
  if record.get("version") != RUN_VERSION:
    raise RunFormatError(
      f"{path} has format version {record.get('version')!r}; this "
      f"energynets reads version {RUN_VERSION}: load it with the "
      "version that wrote it, or retrain"
    )
  return record


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

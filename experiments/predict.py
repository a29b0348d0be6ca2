r"""Predicts new inputs with a finished run (`energynets.load_run`): soft outputs and labels.

  python -m experiments.predict --workdir=/tmp/mlp --input=new_rows.npz --output=pred.npz
  python -m experiments.predict --workdir=/tmp/br --input=DATA/yeast \
      --output=/tmp/yeast_pred.npz

--input is an `.npz` holding an array `x` (rows shaped like the run's training inputs),
or a MULAN folder (`<name>-train.arff`, `<name>-test.arff`, `<name>.xml`), of which the
test split is predicted, loaded as `energynets.load_dataset` loads it for training
(real features standardized by that folder's train statistics; a folder with a single
`<name>.arff` has a seeded 20% test split). --output is an `.npz` with `y_soft` (the
relaxed outputs) and `y_pred` (labels: the run's tuned threshold, or argmax per token),
written whole or not at all. Rows of an `experiments.main` run are predicted as the run
evaluates its splits (segmentation: its test-time crops averaged back per pixel).
--workdir, --input and --output may each be a local path, a `file://` URL or an
object-store URL (`gs://bucket/run`, with `pip install 'energynets[gcs]'`); a MULAN
folder in an object store is copied to a local temporary folder to be read, and removed
afterwards. A user error (no run in --workdir, an unreadable --input, a `gs://` path
without gcsfs) exits with status 2 and one line on stderr.

  python -m experiments.predict --workdir=gs://bucket/br --input=gs://bucket/new.npz \
      --output=gs://bucket/pred.npz
"""

import io
import os
import shutil
import tempfile

from absl import app
from absl import flags
import ml_collections
import numpy as np

import energynets as en
from energynets.train import predictor as predictor_lib
from energynets.train import quiet_library_logs
from energynets.train import run as run_lib
from energynets.train import storage
from experiments import cli
from experiments import configuration
from experiments import console
from experiments import runs
from experiments import tasks

_WORKDIR = flags.DEFINE_string("workdir", None, "the run's directory (holding run.json)")
_INPUT = flags.DEFINE_string("input", None, "an .npz with an array x, or a MULAN folder")
_OUTPUT = flags.DEFINE_string("output", None, "the .npz to write (y_soft, y_pred)")
_NUM_DEVICES = flags.DEFINE_integer("num_devices", 0, "devices to predict on (0: all)")
_MODEL_PARALLELISM = flags.DEFINE_integer(
  "model_parallelism",
  0,
  "devices that split the label dimension (0: as the run was "
  "trained, where the devices allow; energynets.load_run)",
)
flags.mark_flags_as_required(["workdir", "input", "output"])


def read_inputs(path: str) -> np.ndarray:
  """The rows to predict: `x` of an .npz, or the test split of a MULAN folder.

  Args:
    path: the .npz or the folder: a local path, a `file://` URL or an object-store URL.

  Returns:
    The rows.

  Raises:
    FileNotFoundError: `path` does not exist.
    ValueError: an .npz without `x`; `storage.StorageUnavailableError` for a URL this
      installation cannot read.
  """
  source = storage.path(path)
  if not source.exists():
    raise FileNotFoundError(f"--input={path} does not exist")
  if source.suffix == ".npz":
    with np.load(io.BytesIO(source.read_bytes())) as arrays:
      if "x" not in arrays:
        raise ValueError(f"--input={path} has no array 'x' (it has {sorted(arrays)})")
      return arrays["x"]
  if storage.is_local(path):
    return en.load_dataset(os.fspath(source)).test.x
  # The MULAN readers take local files: a copy of the folder, under its own name (the
  # name of the files in it).
  local = tempfile.mkdtemp(prefix="energynets_predict_")
  try:
    copy = os.path.join(local, source.name)
    storage.copy_tree(source, copy)
    return en.load_dataset(copy).test.x
  finally:
    shutil.rmtree(local, ignore_errors=True)


def soft_predictions(predictor: en.Predictor, x: np.ndarray) -> np.ndarray:
  """`predictor.predict(x)`; for a run of `experiments.main`, through its task's split
  prediction, so the outputs are those its results were computed from."""
  builder = predictor.metadata.get("builder") or {}
  if builder.get("path") != runs.RUN_BUILDER:
    return predictor.predict(x)
  config = ml_collections.ConfigDict(configuration.json_to_config(builder["kwargs"]["config"]))
  return tasks.task_for(config).predict(config, predictor.predict, x)


def write_outputs(path: str, **arrays: np.ndarray) -> None:
  """`np.savez` to `path`, whole or not at all.

  A local `path` is written through a temporary file renamed over it; an object-store
  URL as one object, uploaded once the archive is complete (an object appears whole).

  Args:
    path: the .npz: a local path, a `file://` URL or an object-store URL.
    **arrays: the arrays to save.

  Raises:
    FileNotFoundError: the folder of a local `path` does not exist.
  """
  target = storage.path(path)
  if not storage.is_local(path):
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=True, **arrays)
    target.write_bytes(buffer.getvalue())
    return
  if not target.parent.is_dir():
    raise FileNotFoundError(f"--output={path}: directory {target.parent} does not exist")
  handle, partial = tempfile.mkstemp(dir=target.parent, suffix=".partial")
  try:
    with os.fdopen(handle, "wb") as f:
      np.savez(f, allow_pickle=True, **arrays)
    os.replace(partial, target)
  except BaseException:
    os.unlink(partial)
    raise


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  console.quiet_platform_logs()
  try:
    # Every path is checked before anything loads: a gs:// one without gcsfs is named.
    for path in (_WORKDIR.value, _INPUT.value, _OUTPUT.value):
      storage.check_available(path)
    run_lib.read_run(_WORKDIR.value)  # a missing or foreign run fails before any loading
    x = read_inputs(_INPUT.value)
    predictor = en.load_run(
      _WORKDIR.value,
      num_devices=_NUM_DEVICES.value or None,
      model_parallelism=_MODEL_PARALLELISM.value or None,
    )
    y_soft = soft_predictions(predictor, x)
    y_pred = predictor_lib.decode(y_soft, predictor.decoding, predictor.threshold)
    write_outputs(_OUTPUT.value, y_soft=y_soft, y_pred=y_pred)
  except (ValueError, OSError) as e:  # no run, a bad input or output path: the user's mistake
    raise cli.UserError(e) from None
  print(
    f"{_OUTPUT.value}: {len(y_soft)} rows, decoding {predictor.decoding} "
    f"(threshold {predictor.threshold:g})"
  )


if __name__ == "__main__":
  cli.run(main)

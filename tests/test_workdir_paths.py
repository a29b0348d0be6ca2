"""Workdirs on any storage `etils.epath` reaches, and the check that a run's processes share one.

1. `energynets.testing.fake_gcs` serves `gs://` from a local folder through epath,
   fsspec and orbax, and restores everything on exit.
2. An experiment with `workdir="gs://bucket/run"` under the fake writes every file of
   the run into the bucket, resumes from it and `load_run` predicts from it, while no
   local file API ever sees a `gs://` path.
3. Two processes given different local workdirs both stop at the start, with the same
   one-line error and exit status 2, instead of hanging at the first checkpoint.
"""

import builtins
import json
import os
import pathlib
import struct
import subprocess
import sys
import time

from multiprocess import REPO_ROOT
from multiprocess import _free_port
from multiprocess import _subprocess_env
import numpy as np
import pytest

TINY_RUN = (
  "data.num_train=64",
  "train.steps=6",
  "train.batch_size=16",
  "train.eval_batch_size=200",
  "train.eval_every=3",
  "train.log_every=3",
  "train.checkpoint_every=3",
)
RUN_FILES = ("config.json", "metrics.jsonl", "results.json", "run.json", "test_predictions.npz")


# ------------------------------------------------------------------------- 1. the fake


def test_fake_gcs_serves_gs_urls_from_its_root_and_restores_on_exit(tmp_path):
  from etils import epath
  import fsspec
  import jax.numpy as jnp
  from orbax.checkpoint._src.path import gcs_utils
  from orbax.checkpoint._src.serialization import tensorstore_utils

  from energynets import testing
  from energynets import train as train_lib
  from experiments import plots

  before = (
    fsspec.registry.get("gs"),
    fsspec.registry.get("gcs"),
    tensorstore_utils._normalize_path,
    gcs_utils.is_hierarchical_namespace_enabled,
  )
  with testing.fake_gcs(tmp_path / "gcs") as root:
    note = epath.Path("gs://bucket/notes/a.txt")
    note.parent.mkdir(parents=True)
    note.write_text("hello")
    assert (root / "bucket" / "notes" / "a.txt").read_text() == "hello"
    assert [p.name for p in epath.Path("gs://bucket/notes").iterdir()] == ["a.txt"]
    with pytest.raises(NotImplementedError, match="cannot be appended"):
      note.open("a")
    # An orbax checkpoint through orbax's GCS code path; the second save deletes the
    # first (max_to_keep=1) by its GCS deletion.
    state = {"w": jnp.arange(4.0), "b": jnp.ones((2, 3))}
    checkpointer = train_lib.Checkpointer("gs://bucket/ckpt")
    checkpointer.save(1, state, {"step": 1})
    checkpointer.save(2, jax_tree_scale(state, 2.0), {"step": 2})
    restored, meta = checkpointer.restore(2, state)
    checkpointer.close()
    assert sorted(p.name for p in (root / "bucket" / "ckpt").iterdir()) == ["2"]
    assert meta == {"step": 2}
    np.testing.assert_array_equal(restored["w"], 2.0 * np.arange(4.0))
    np.testing.assert_array_equal(restored["b"], 2.0 * np.ones((2, 3)))
    plots.plot_measurement_matrix(np.eye(3), "gs://bucket/figures/c1.png")
    assert (root / "bucket" / "figures" / "c1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert (
    fsspec.registry.get("gs"),
    fsspec.registry.get("gcs"),
    tensorstore_utils._normalize_path,
    gcs_utils.is_hierarchical_namespace_enabled,
  ) == before


def jax_tree_scale(tree, factor):
  import jax

  return jax.tree.map(lambda a: a * factor, tree)


# -------------------------------------------------------- 2. an experiment on gs://


_LOCAL_FILE_APIS = {
  builtins: ("open",),
  os: ("makedirs", "mkdir", "replace", "listdir"),
  os.path: ("abspath", "exists", "isdir", "join"),
}
# String operations that epath itself applies to URLs (`posixpath.join('gs://', ...)`):
# a `gs://` path is a mistake there only in the code under test.
_OUR_CODE_ONLY = ("join",)
_OUR_PACKAGES = ("energynets", "experiments")


@pytest.fixture
def no_gs_paths_in_local_file_apis(monkeypatch):
  """Fails the test if a local file API is called with a `gs://` path (every call is
  recorded too, in case the code under test catches the error)."""
  calls = []

  def guarded(module, name):
    original = getattr(module, name)

    def call(*args, **kwargs):
      caller = sys._getframe(1).f_globals.get("__name__", "")  # pylint: disable=protected-access
      if name not in _OUR_CODE_ONLY or caller.split(".")[0] in _OUR_PACKAGES:
        for arg in [*args, *kwargs.values()]:
          if isinstance(arg, (str, os.PathLike)) and "gs:/" in os.fspath(arg):
            calls.append(f"{caller}: {name}({arg!r})")
            raise AssertionError(f"{caller} called {module.__name__}.{name} with {arg!r}")
      return original(*args, **kwargs)

    return call

  for module, names in _LOCAL_FILE_APIS.items():
    for name in names:
      monkeypatch.setattr(module, name, guarded(module, name))
  yield calls
  monkeypatch.undo()
  assert not calls, calls


def _tensorboard_scalars(path: pathlib.Path) -> dict[tuple[str, int], float]:
  """`{(tag, step): value}` of an event file, read as TFRecords (length, CRC, data, CRC)."""
  from tensorboardX.proto import event_pb2

  data, offset, scalars = path.read_bytes(), 0, {}
  while offset < len(data):
    (length,) = struct.unpack("<Q", data[offset : offset + 8])
    event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
    offset += 12 + length + 4
    for value in event.summary.value:
      scalars[(value.tag, event.step)] = value.simple_value
  return scalars


def test_experiment_in_a_gs_workdir_writes_resumes_and_loads_from_the_bucket(
  tmp_path, monkeypatch, no_gs_paths_in_local_file_apis
):
  import energynets as en
  from energynets import testing
  from experiments import configuration
  from experiments import train

  cwd = tmp_path / "cwd"
  cwd.mkdir()
  monkeypatch.chdir(cwd)
  config = configuration.get_config("mlp", "synthetic", list(TINY_RUN))
  with testing.fake_gcs(tmp_path / "gcs") as root:
    results = train.train_and_evaluate(config, "gs://bucket/run")
    run = root / "bucket" / "run"
    for name in RUN_FILES:
      assert (run / name).is_file(), name
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["6"]
    assert (run / "best" / str(results["meta"]["selected_step"])).is_dir()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [3, 3, 6, 6]
    # TensorBoard, written locally and copied into the bucket, holds the same numbers.
    (events,) = (run / "tensorboard").iterdir()
    scalars = _tensorboard_scalars(events)
    for record in records:
      for name, value in record.items():
        if name != "step":
          assert scalars[(name.replace("@", "_at_"), record["step"])] == pytest.approx(
            value, rel=1e-6
          ), name
    recorded = json.loads((run / "results.json").read_text())
    assert recorded["test/example_f1"] == results["test/example_f1"]
    assert json.loads((run / "config.json").read_text())["train"]["steps"] == 6
    with np.load(run / "test_predictions.npz") as saved:
      test_outputs = saved["test"]

    # Resuming the finished run trains nothing and evaluates the checkpoint again.
    again = train.train_and_evaluate(config, "gs://bucket/run")
    assert {k: v for k, v in again.items() if k != "meta"} == {
      k: v for k, v in results.items() if k != "meta"
    }
    assert [
      json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
    ] == [3, 3, 6, 6]

    predictor = en.load_run("gs://bucket/run")
    from experiments import builders

    test_x = builders.load_data(config).test.x
    np.testing.assert_allclose(predictor.predict(test_x), test_outputs, atol=1e-6)
  assert not (cwd / "gs:").exists() and not list(cwd.iterdir())


@pytest.mark.slow
def test_experiments_main_trains_in_a_gs_workdir(tmp_path):
  # The command line as a user runs it, inside the fake.
  program = (
    "import runpy, sys; from energynets.testing import fake_gcs\n"
    "with fake_gcs(sys.argv.pop(1)):\n"
    "  runpy.run_module('experiments.main', run_name='__main__', alter_sys=True)"
  )
  flags = [f"--config.{flag}" for flag in TINY_RUN]
  proc = subprocess.run(
    [
      sys.executable,
      "-c",
      program,
      str(tmp_path / "gcs"),
      f"--config={REPO_ROOT / 'experiments/configs/mlp.py'}:synthetic",
      *flags,
      "--workdir=gs://bucket/run",
    ],
    cwd=tmp_path,
    env=_subprocess_env(1),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-5000:]
  run = tmp_path / "gcs" / "bucket" / "run"
  for name in RUN_FILES:
    assert (run / name).is_file(), name
  assert not (tmp_path / "gs:").exists()


# ------------------------------------------------- 3. the shared-workdir handshake

HANDSHAKE_TIMEOUT_S = 180
MAIN_FLAGS = (
  "--config=experiments/configs/mlp.py:synthetic",
  *(f"--config.{flag}" for flag in TINY_RUN),
  "--config.train.tensorboard=False",
)


def _start_processes(
  workdirs: list[pathlib.Path], log_dir: pathlib.Path, program: list[str] | None = None
) -> list[tuple[int, str, float]]:
  """Runs `experiments.main` as process i of len(workdirs) with `--workdir=workdirs[i]`;
  returns `(exit status, stderr, seconds)` of each once all have ended."""
  coordinator = f"127.0.0.1:{_free_port()}"
  procs, logs = [], []
  started = time.monotonic()
  for i, workdir in enumerate(workdirs):
    logs.append(log_dir / f"process_{i}.log")
    with open(logs[-1], "w") as log:
      procs.append(
        subprocess.Popen(
          [
            sys.executable,
            *(program or ["-m", "experiments.main"]),
            *MAIN_FLAGS,
            f"--workdir={workdir}",
            f"--coordinator_address={coordinator}",
            f"--num_processes={len(workdirs)}",
            f"--process_id={i}",
          ],
          cwd=REPO_ROOT,
          env=_subprocess_env(1),
          stdout=subprocess.DEVNULL,
          stderr=log,
        )
      )
  ended = [None] * len(procs)
  try:
    while None in ended and time.monotonic() - started < HANDSHAKE_TIMEOUT_S:
      for i, p in enumerate(procs):
        if ended[i] is None and p.poll() is not None:
          ended[i] = time.monotonic() - started
      time.sleep(0.1)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
      p.wait()
  return [(p.returncode, log.read_text(), seconds) for p, log, seconds in zip(procs, logs, ended)]


def _error_lines(stderr: str) -> list[str]:
  return [line for line in stderr.splitlines() if line.startswith("experiments.main: error:")]


def test_processes_with_different_workdirs_stop_at_once_with_one_message(tmp_path):
  workdirs = [tmp_path / "disk_of_process_0", tmp_path / "disk_of_process_1"]
  outcomes = _start_processes(workdirs, tmp_path)
  expected = (
    f"experiments.main: error: workdir {workdirs[0]} is not shared by the 2 "
    f"processes: process 1 (its workdir: {workdirs[1]}) cannot see the token "
    "process 0 wrote; give a workdir on storage every process can read and write: "
    "a gs:// bucket or a shared (NFS) mount"
  )
  for i, (status, stderr, seconds) in enumerate(outcomes):
    assert seconds is not None, f"process {i} still ran after {HANDSHAKE_TIMEOUT_S} s:\n{stderr}"
    assert status == 2, f"process {i} exited {status}:\n{stderr[-5000:]}"
    assert _error_lines(stderr) == [expected], stderr[-5000:]
    assert "Traceback" not in stderr
  # Stopped before anything was written, and the failed run removed the workdir process 0
  # created for the check: no checkpoint, no config, no token left.
  assert not workdirs[0].exists()
  assert not workdirs[1].exists()


@pytest.mark.slow
def test_a_process_that_fails_before_the_handshake_stops_the_others(tmp_path):
  # Process 0 fails (an exception in its own code) just before the check; process 1,
  # already waiting for process 0's token, stops too instead of waiting it out, with
  # process 0's status and reason (experiments.cli.stop_for_peer).
  program = [
    "-c",
    "import runpy, jax\n"
    "from energynets.train import storage\n"
    "check = storage.check_shared_workdir\n"
    "def failing(workdir):\n"
    "  if jax.process_index() == 0:\n"
    "    raise RuntimeError('process 0 failed on purpose')\n"
    "  check(workdir)\n"
    "storage.check_shared_workdir = failing\n"
    "runpy.run_module('experiments.main', run_name='__main__', alter_sys=True)",
  ]
  workdir = tmp_path / "shared"
  (status_0, stderr_0, _), (status_1, stderr_1, seconds_1) = _start_processes(
    [workdir, workdir], tmp_path, program
  )
  assert "RuntimeError: process 0 failed on purpose" in stderr_0 and status_0 == 1
  assert seconds_1 is not None and status_1 == 1, stderr_1[-5000:]
  assert _error_lines(stderr_1) == [
    "experiments.main: error: process 0 failed: RuntimeError: process 0 failed on purpose"
  ]

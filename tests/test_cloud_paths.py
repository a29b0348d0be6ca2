"""Cloud and `file://` paths in every binary (`energynets.train.storage.path`).

1. Under `energynets.testing.fake_gcs`, `experiments.main` tuned by path,
   `experiments.tune`, `experiments.predict` and `experiments.compare` given `gs://`
   paths write every file into the bucket and nothing on local disk: each runs with its
   working directory, HOME and TMPDIR in an empty sandbox that must stay empty. A
   pod looks for the tuner's chosen.json in the bucket; TensorBoard's local copy of a
   `gs://` run is removed even when the run raised.
2. Without gcsfs a `gs://` path stops a binary at once with one line naming the
   `gcs` extra (no traceback), and the library raises `StorageUnavailableError`.
3. `file:///x` is the local path `/x` for `experiments.main` and `experiments.predict`.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

from multiprocess import REPO_ROOT
from multiprocess import _subprocess_env
import numpy as np
import pytest

TINY_MULAN = REPO_ROOT / "tests" / "testdata" / "tiny_mulan"
BR_CONFIG = REPO_ROOT / "experiments" / "configs" / "br.py"
MISSING_GCSFS = "gs:// paths need gcsfs, which is not installed: pip install 'energynets[gcs]'"
# br by path on tiny_mulan (9 training rows): one setting (the config's own), 2 folds, 4 steps.
TUNED_MAIN = (
  "--config.train.steps=4",
  "--config.train.eval_every=2",
  "--config.train.batch_size=8",
  "--config.tune.folds=2",
  "--config.tune.trials=1",
  f"--config.data.path={TINY_MULAN}",
)
# The binaries' programs: inside the fake bucket (`fake_gcs(root)`), or with gcsfs
# unimportable (what an installation without the gcs extra has).
_IN_FAKE_GCS = (
  "import runpy, sys; from energynets.testing import fake_gcs\n"
  "with fake_gcs(sys.argv.pop(1)):\n"
  "  runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"
)
_WITHOUT_GCSFS = (
  "import runpy, sys; sys.modules['gcsfs'] = None\n"
  "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"
)


@pytest.fixture
def sandbox(tmp_path):
  """An empty working directory, HOME and TMPDIR for the binaries; after the test, every
  file left in them fails it."""
  folders = {name: tmp_path / "local" / name for name in ("cwd", "home", "tmp")}
  for folder in folders.values():
    folder.mkdir(parents=True)
  yield folders
  left = sorted(
    str(p.relative_to(tmp_path / "local"))
    for p in (tmp_path / "local").rglob("*")
    if p not in folders.values()
  )
  assert not left, f"written to local disk outside the bucket: {left}"


def _tiny_br_config(folder: pathlib.Path) -> str:
  """A br config file whose search space is two values of `loss.l2_c` (br's own space
  fixes 1500 steps); returns `--config=FILE:mulan`."""
  folder.mkdir(parents=True, exist_ok=True)
  path = folder / "tiny_br.py"
  path.write_text(
    "from experiments.configs import br\n\n\n"
    "def get_config(dataset='mulan'):\n  return br.get_config(dataset)\n\n\n"
    "def get_search_space(dataset='mulan'):\n  return {'loss.l2_c': (0.1, 10.0)}\n"
  )
  return f"--config={path}:mulan"


def _run(
  module: str,
  *args: str,
  sandbox: dict,
  gcs_root: pathlib.Path | None = None,
  without_gcsfs: bool = False,
) -> subprocess.CompletedProcess:
  """`python -m module args` in the sandbox: inside `fake_gcs(gcs_root)` if given."""
  if gcs_root is not None:
    program = ["-c", _IN_FAKE_GCS, str(gcs_root), module]
  elif without_gcsfs:
    program = ["-c", _WITHOUT_GCSFS, module]
  else:
    program = ["-m", module]
  env = dict(_subprocess_env(1), HOME=str(sandbox["home"]), TMPDIR=str(sandbox["tmp"]))
  # Without the suite's shared compilation cache (tests/conftest.py), as a user runs them:
  # where the binaries keep compiled programs is part of what these tests check.
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  return subprocess.run(
    [sys.executable, *program, *args],
    cwd=sandbox["cwd"],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
  assert proc.returncode == 0, proc.stderr[-5000:]
  return proc


def _error_line(proc: subprocess.CompletedProcess, program: str) -> str:
  assert proc.returncode == 2, proc.stderr[-5000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-5000:]
  lines = [line for line in proc.stderr.splitlines() if line.startswith(f"{program}: error:")]
  assert len(lines) == 1, proc.stderr[-5000:]
  return lines[0]


# ------------------------------------------------------- 1. the binaries on gs://


def test_main_tuned_by_path_then_predict_in_a_gs_bucket(tmp_path, sandbox):
  gcs = tmp_path / "gcs"
  config = _tiny_br_config(tmp_path / "configs")
  _ok(
    _run(
      "experiments.main",
      config,
      *TUNED_MAIN,
      "--workdir=gs://bucket/run",
      sandbox=sandbox,
      gcs_root=gcs,
    )
  )
  run = gcs / "bucket" / "run"
  for name in (
    "chosen.json",
    "trials.jsonl",
    "results.json",
    "run.json",
    "config.json",
    "metrics.jsonl",
    "test_predictions.npz",
  ):
    assert (run / name).is_file(), name
  # The INFO log, written locally (the sandbox checks it is removed) and copied.
  assert "trial 1/1: " in (run / "logs" / "main.log").read_text()
  chosen = json.loads((run / "chosen.json").read_text())
  assert chosen["num_trials"] == 1 and chosen["folds"] == 2
  assert len((run / "trials.jsonl").read_text().splitlines()) == 1
  results = json.loads((run / "results.json").read_text())
  assert results["meta"]["tuning"]["overrides"] == chosen["overrides"]
  assert list((run / "tensorboard").iterdir())  # written locally, copied into the bucket
  assert not (run / "xla_cache").exists()  # the compilation cache stays local only

  # The rows of a MULAN folder in the bucket, predicted into the bucket: the test split
  # the run evaluated, so its saved test outputs.
  shutil.copytree(TINY_MULAN, gcs / "bucket" / "data" / "tiny")
  proc = _ok(
    _run(
      "experiments.predict",
      "--workdir=gs://bucket/run",
      "--input=gs://bucket/data/tiny",
      "--output=gs://bucket/out/pred.npz",
      sandbox=sandbox,
      gcs_root=gcs,
    )
  )
  assert proc.stdout.startswith("gs://bucket/out/pred.npz: 3 rows")
  with (
    np.load(gcs / "bucket" / "out" / "pred.npz") as predicted,
    np.load(run / "test_predictions.npz") as saved,
  ):
    np.testing.assert_allclose(predicted["y_soft"], saved["test"], rtol=1e-5, atol=1e-6)
    assert predicted["y_pred"].shape == saved["test"].shape

  # The same rows as an .npz in the bucket.
  np.savez(gcs / "bucket" / "data" / "rows.npz", x=_tiny_test_rows())
  _ok(
    _run(
      "experiments.predict",
      "--workdir=gs://bucket/run",
      "--input=gs://bucket/data/rows.npz",
      "--output=gs://bucket/out/rows.npz",
      sandbox=sandbox,
      gcs_root=gcs,
    )
  )
  with (
    np.load(gcs / "bucket" / "out" / "rows.npz") as predicted,
    np.load(run / "test_predictions.npz") as saved,
  ):
    np.testing.assert_allclose(predicted["y_soft"], saved["test"], rtol=1e-5, atol=1e-6)


def _tiny_test_rows() -> np.ndarray:
  """tiny_mulan's test rows as `experiments.predict` reads the folder."""
  from energynets import data  # pylint: disable=g-import-not-at-top

  return data.load_dataset(TINY_MULAN).test.x


def test_tune_writes_trials_choice_and_refit_into_a_gs_bucket(tmp_path, sandbox):
  gcs = tmp_path / "gcs"
  proc = _ok(
    _run(
      "experiments.tune",
      f"--config={BR_CONFIG}:mulan",
      f"--config.data.path={TINY_MULAN}",
      "--config.train.eval_every=2",
      "--config.train.batch_size=8",
      # The config's own setting, trial 0, is the grid's first point.
      "--config.loss.l2_c=0.1",
      "--config.train.steps=4",
      "--only_search_flags",
      "--search=loss.l2_c=0.1,10",
      "--search=train.steps=4",
      "--folds=2",
      "--workdir=gs://bucket/tune",
      sandbox=sandbox,
      gcs_root=gcs,
    )
  )
  # stdout: a line per trial, the choice (`chosen: k=v ... (...)`), the test metrics.
  lines = proc.stdout.splitlines()
  (chosen_line,) = [l for l in lines if l.startswith("chosen: ")]
  printed_chosen = dict(kv.split("=", 1) for kv in chosen_line[8:].split(" (")[0].split())
  (f1_line,) = [l for l in lines if l.startswith("test/example_f1 ")]
  tuned = gcs / "bucket" / "tune"
  trials = [json.loads(line) for line in (tuned / "trials.jsonl").read_text().splitlines()]
  assert [t["params"]["loss.l2_c"] for t in trials] == [0.1, 10.0]
  chosen = json.loads((tuned / "chosen.json").read_text())
  assert printed_chosen == {k: str(v) for k, v in chosen["overrides"].items()}
  assert chosen["num_trials"] == 2
  for results_file in (tuned / "results.json", tuned / "refit" / "results.json"):
    results = json.loads(results_file.read_text())
    assert results["meta"]["tuning"]["overrides"] == chosen["overrides"], results_file
    assert results["test/example_f1"] == pytest.approx(float(f1_line.split()[1]), abs=5e-5)
  assert (tuned / "refit" / "run.json").is_file()
  assert not (tuned / "xla_cache").exists()


def test_compare_trains_into_and_writes_its_table_to_a_gs_bucket(tmp_path, sandbox):
  gcs = tmp_path / "gcs"
  proc = _ok(
    _run(
      "experiments.compare",
      "--methods=br",
      "--datasets=synthetic",
      "--set=data.num_train=64",
      "--set=train.steps=4",
      "--set=train.eval_every=2",
      "--set=train.batch_size=16",
      "--set=train.eval_batch_size=200",
      "--workdir=gs://bucket/compare",
      "--out=gs://bucket/tables/table.md",
      sandbox=sandbox,
      gcs_root=gcs,
    )
  )
  run = gcs / "bucket" / "compare" / "synthetic" / "br"
  results = json.loads((run / "results.json").read_text())
  table = (gcs / "bucket" / "tables" / "table.md").read_text()
  assert table.startswith("Generated by `python -m experiments.compare")
  assert "| synthetic | br |" in table and "| synthetic | br |" in proc.stdout
  (summary,) = json.loads((gcs / "bucket" / "tables" / "table.json").read_text())
  assert (summary["dataset"], summary["method"]) == ("synthetic", "br")
  assert summary["runs"][0]["test/example_f1"] == results["test/example_f1"]


def test_a_pod_finds_the_chosen_json_in_the_bucket(tmp_path, monkeypatch):
  # A multi-process run may not search: it needs the workdir's chosen.json, which it
  # must look for in the bucket, not in a local folder named like the URL.
  from energynets import testing
  from experiments import cli
  from experiments import configuration
  from experiments import tune

  monkeypatch.chdir(tmp_path)
  config = configuration.get_config("br", "mulan", [f"data.path={TINY_MULAN}"])
  monkeypatch.setattr(tune.jax, "process_count", lambda: 2)
  reran = []

  def rerun_chosen(config, workdir, **kwargs):
    del config
    reran.append((os.fspath(workdir), kwargs["resume"]))
    return tune.TuneResult(
      chosen={}, value=0.0, metric="", folds=1, trials=[], results={"rerun": True}, seconds=0.0
    )

  monkeypatch.setattr(tune, "tune", rerun_chosen)
  with testing.fake_gcs(tmp_path / "gcs") as root:
    with pytest.raises(cli.UserError, match="tune first on one host"):
      tune.run_experiment(config, "gs://bucket/run", config_file=str(BR_CONFIG))
    (root / "bucket" / "run").mkdir(parents=True)
    (root / "bucket" / "run" / tune.CHOSEN_FILE).write_text("{}")
    results = tune.run_experiment(config, "gs://bucket/run", config_file=str(BR_CONFIG))
  assert results == {"rerun": True} and reran == [("gs://bucket/run", True)]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["gcs"]


def test_tensorboard_of_a_gs_run_that_raised_leaves_no_local_folder(tmp_path, monkeypatch):
  # A run that raises before `close` (a diverged loss) drops its writer unclosed.
  import gc
  import tempfile

  from energynets import testing
  from energynets.train import writers

  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
  (tmp_path / "tmp").mkdir()
  with testing.fake_gcs(tmp_path / "gcs"):
    writer = writers.MetricWriter("gs://bucket/run", sync_every_s=0.0)
    writer.write(1, {"train/loss": 0.5})
    assert len(list((tmp_path / "tmp").iterdir())) == 1
    assert list((tmp_path / "gcs" / "bucket" / "run" / "tensorboard").iterdir())
    del writer
    gc.collect()
  assert not list((tmp_path / "tmp").iterdir())


# ------------------------------------------------------------- 2. without gcsfs


def test_binaries_without_gcsfs_stop_in_one_line_naming_the_extra(tmp_path, sandbox):
  config = _tiny_br_config(tmp_path / "configs")
  main = _run(
    "experiments.main",
    config,
    *TUNED_MAIN,
    "--workdir=gs://bucket/run",
    sandbox=sandbox,
    without_gcsfs=True,
  )
  assert _error_line(main, "experiments.main") == (
    f"experiments.main: error: gs://bucket/run: {MISSING_GCSFS}"
  )
  predict = _run(
    "experiments.predict",
    f"--workdir={tmp_path}",
    f"--input={TINY_MULAN}",
    "--output=gs://bucket/pred.npz",
    sandbox=sandbox,
    without_gcsfs=True,
  )
  assert _error_line(predict, "experiments.predict") == (
    f"experiments.predict: error: gs://bucket/pred.npz: {MISSING_GCSFS}"
  )


@pytest.fixture
def without_gcsfs(monkeypatch):
  """gcsfs unimportable, and no `gs` file system registered (as without the gcs extra)."""
  import fsspec

  registry = sys.modules["fsspec.registry"]._registry  # pylint: disable=protected-access
  for name in ("gs", "gcs"):
    if name in registry:
      monkeypatch.delitem(registry, name)
  monkeypatch.setitem(sys.modules, "gcsfs", None)
  with pytest.raises(ImportError):
    fsspec.get_filesystem_class("gcs")


@pytest.mark.usefixtures("without_gcsfs")
def test_library_refuses_gs_paths_without_gcsfs_before_any_work(tmp_path, monkeypatch):
  import energynets as en
  from energynets.train import storage
  from experiments import compare
  from experiments import configuration
  from experiments import plots
  from experiments import tune

  monkeypatch.chdir(tmp_path)
  config = configuration.get_config("br", "mulan", [f"data.path={TINY_MULAN}"])
  calls = {
    "workdir_path": lambda: storage.workdir_path("gs://bucket/run"),
    "load_run": lambda: en.load_run("gs://bucket/run"),
    "tune": lambda: tune.tune(config, "gs://bucket/tune", space={"loss.l2_c": (1.0,)}),
    "save_figure": lambda: plots.save_figure(plots.pyplot().figure(), "gs://bucket/f.png"),
    "compare --out": lambda: compare.write_outputs(
      storage.path("gs://bucket/table.md"), "", "", []
    ),
  }
  for name, call in calls.items():
    with pytest.raises(storage.StorageUnavailableError) as raised:
      call()
    assert str(raised.value).endswith(MISSING_GCSFS), name
  assert not list(tmp_path.iterdir())  # nothing written, no `gs:` folder


def test_storage_paths_and_urls():
  from energynets.train import storage

  assert storage.normalize("file:///data/run") == "/data/run"
  assert storage.normalize("file://localhost/data/run") == "/data/run"
  assert storage.normalize("gs://b/run") == "gs://b/run"
  assert storage.is_local("file:///data/run") and storage.is_local("relative/run")
  assert not storage.is_local("gs://b/run")
  assert os.fspath(storage.workdir_path("file:///data/run")) == "/data/run"
  assert storage.workdir_path("file:///data/run") == storage.workdir_path("/data/run")
  for bad, message in (
    ("file://host/data", "names an absolute path on this machine"),
    ("file://data", "names an absolute path on this machine"),
    ("http://host/run", "unsupported URL scheme http://"),
  ):
    with pytest.raises(storage.StorageUnavailableError, match=message):
      storage.workdir_path(bad)


def test_fake_gcs_makes_gs_paths_available(tmp_path):
  from energynets import testing
  from energynets.train import storage

  with testing.fake_gcs(tmp_path):
    assert os.fspath(storage.workdir_path("gs://bucket/run")) == "gs://bucket/run"
    storage.check_available("gs://bucket/run")


# ------------------------------------------------------------------- 3. file://


def test_main_and_predict_take_file_urls(tmp_path, sandbox):
  config = _tiny_br_config(tmp_path / "configs")
  run = tmp_path / "run"
  _ok(_run("experiments.main", config, *TUNED_MAIN, f"--workdir=file://{run}", sandbox=sandbox))
  for name in ("chosen.json", "results.json", "run.json", "test_predictions.npz"):
    assert (run / name).is_file(), name
  assert (run / "xla_cache").is_dir()  # a local workdir: the compilation cache is kept
  (tmp_path / "out").mkdir()
  _ok(
    _run(
      "experiments.predict",
      f"--workdir=file://{run}",
      f"--input=file://{TINY_MULAN}",
      f"--output=file://{tmp_path / 'out' / 'pred.npz'}",
      sandbox=sandbox,
    )
  )
  with (
    np.load(tmp_path / "out" / "pred.npz") as predicted,
    np.load(run / "test_predictions.npz") as saved,
  ):
    np.testing.assert_allclose(predicted["y_soft"], saved["test"], rtol=1e-5, atol=1e-6)
  assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["pred.npz"]

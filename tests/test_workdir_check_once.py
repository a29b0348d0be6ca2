"""The shared-workdir handshake runs once per process and workdir.

`storage.check_shared_workdir` is a collective of every process; the experiment driver
calls it for the run's workdir and `fit` again for each stage's. Here the process count
is faked inside `storage` only (the rest of the run stays single-process) and the
exchange itself is replaced by a counter.
"""

import types

import pytest

from energynets import testing
from energynets.train import storage


@pytest.fixture
def handshakes(monkeypatch):
  """The workdirs the exchange ran for, as `storage` sees a 2-process run."""
  calls = []
  monkeypatch.setattr(
    storage, "jax", types.SimpleNamespace(process_count=lambda: 2, process_index=lambda: 0)
  )
  monkeypatch.setattr(storage, "_handshake", lambda workdir: calls.append(workdir) or True)
  monkeypatch.setattr(storage, "_checked", set())
  return calls


def test_a_workdir_and_the_folders_in_it_are_checked_once(tmp_path, handshakes):
  run = tmp_path / "run"
  storage.check_shared_workdir(run)
  storage.check_shared_workdir(str(run))
  storage.check_shared_workdir(run / "stages" / "pretrain")
  assert handshakes == [run]
  # A sibling whose name starts with the checked one's is another folder.
  storage.check_shared_workdir(tmp_path / "run_2")
  with testing.fake_gcs(tmp_path / "buckets"):  # gs:// paths need a file system
    storage.check_shared_workdir("gs://bucket/run")
    storage.check_shared_workdir("gs://bucket/run/stages/a")
  assert handshakes == [run, tmp_path / "run_2", "gs://bucket/run"]


def test_a_workdir_without_a_coordination_service_is_not_marked_checked(
  tmp_path, monkeypatch, handshakes
):
  calls = []
  monkeypatch.setattr(storage, "_handshake", lambda workdir: calls.append(workdir) and False)
  storage.check_shared_workdir(tmp_path)
  storage.check_shared_workdir(tmp_path)
  assert calls == [tmp_path, tmp_path]


def test_one_process_never_exchanges(tmp_path, monkeypatch, handshakes):
  monkeypatch.setattr(storage, "jax", types.SimpleNamespace(process_count=lambda: 1))
  storage.check_shared_workdir(tmp_path)
  assert not handshakes


@pytest.mark.slow
def test_an_experiment_run_checks_its_workdir_once(tmp_path, handshakes):
  from experiments import configuration
  from experiments import train

  config = configuration.get_config(
    "br", "synthetic", ["train.steps=2", "train.tensorboard=False", "train.eval_every=2"]
  )
  train.train_and_evaluate(config, str(tmp_path))
  assert (tmp_path / "results.json").exists()
  # train_and_evaluate checks the workdir; fit (the same folder) skips its check.
  assert handshakes == [str(tmp_path)]

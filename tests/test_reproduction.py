"""Reproduction targets of the issues as executable checks (minutes each: `--runslow`).

CI skips them; run `python -m pytest tests/test_reproduction.py --runslow` after a change
that could move the committed numbers in results/.
"""

import pytest

pytestmark = pytest.mark.slow


def _run(method, dataset, tmp_path, overrides=(), data_dir=None):
  from experiments import configuration
  from experiments import train

  overrides = ["train.tensorboard=False", *overrides]
  if data_dir is not None:
    overrides.append(f"data.data_dir={data_dir}")
  config = configuration.get_config(method, dataset, overrides)
  return train.train_and_evaluate(config, str(tmp_path / f"{method}_{dataset}"))


def test_mlp_bibtex_reaches_the_seal_cross_entropy_row(tmp_path, data_dir):
  results = _run("mlp", "bibtex", tmp_path, data_dir=data_dir)
  assert results["test/example_f1"] >= 0.447
  assert results["test/example_f1@0.5"] >= 0.424


def test_br_bibtex_agrees_with_scikit_learn(tmp_path, data_dir):
  from benchmarks import common
  from experiments import builders
  from experiments import configuration

  ours = _run("br", "bibtex", tmp_path, data_dir=data_dir)
  config = configuration.get_config("br", "bibtex", [f"data.data_dir={data_dir}"])
  dataset = builders.load_data(config)
  theirs = common.sklearn_br_results(dataset, 1.0)
  for key in ("test/example_f1", "test/example_f1@0.5"):
    assert abs(ours[key] - theirs[key]) <= 0.010, (key, ours[key], theirs[key])


def test_spen_beats_mlp_on_small_synthetic_data(tmp_path):
  spen = _run("spen_ssvm", "synthetic", tmp_path, ["data.num_train=1500"])
  mlp = _run("mlp", "synthetic", tmp_path, ["data.num_train=1500"])
  assert spen["test/example_f1"] > mlp["test/example_f1"] + 0.05

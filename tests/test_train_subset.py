"""`num_train` on real datasets: a seeded, nested subset of the training rows, scaled by
its own statistics (`registry.keep_train_rows`), through the loader and the config."""

import numpy as np
import pytest

from energynets import data
from experiments import configuration
from experiments import tasks


def _row_keys(x):
  return {row.tobytes() for row in x}


def test_subset_rows_come_from_train_and_held_out_splits_are_unchanged(data_dir):
  whole = data.load_dataset("yeast", data_dir=data_dir, feature_scaling="none")
  small = data.load_dataset("yeast", data_dir=data_dir, feature_scaling="none", num_train=250)
  assert small.train.num_examples == 250
  assert _row_keys(small.train.x) <= _row_keys(whole.train.x)
  np.testing.assert_array_equal(small.test.x, whole.test.x)
  np.testing.assert_array_equal(small.validation.y, whole.validation.y)
  assert small.meta["num_examples"]["train"] == 250
  assert small.meta["train_subset"]["of"] == whole.train.num_examples


def test_subsets_are_nested_and_seeded(data_dir):
  load = lambda n, seed=0: data.load_dataset(
    "genbase", data_dir=data_dir, num_train=n, split_seed=seed
  )
  a, b = load(100), load(300)
  assert _row_keys(a.train.x) <= _row_keys(b.train.x)
  np.testing.assert_array_equal(load(100).train.x, a.train.x)
  other = data.load_dataset("genbase", data_dir=data_dir, num_train=100, split_seed=1)
  assert _row_keys(other.train.x) != _row_keys(a.train.x)


@pytest.mark.parametrize("scaling", ["zscore", "maxabs"])
def test_scaling_statistics_come_from_the_kept_rows(data_dir, scaling):
  from sklearn import preprocessing  # pylint: disable=g-import-not-at-top

  raw = data.load_dataset("yeast", data_dir=data_dir, feature_scaling="none", num_train=200)
  scaled = data.load_dataset("yeast", data_dir=data_dir, feature_scaling=scaling, num_train=200)
  scaler = {"zscore": preprocessing.StandardScaler, "maxabs": preprocessing.MaxAbsScaler}[
    scaling
  ]().fit(raw.train.x)
  np.testing.assert_allclose(scaled.train.x, scaler.transform(raw.train.x), atol=1e-4)
  np.testing.assert_allclose(scaled.test.x, scaler.transform(raw.test.x), atol=1e-4)
  assert scaled.meta["preprocessing"]["feature_scaling"]["applied"] == scaling


def test_auto_scaling_keeps_each_datasets_rule(data_dir):
  # yeast's rule z-scores: the kept rows end with mean 0; bibtex's keeps 0/1 features.
  yeast = data.load_dataset("yeast", data_dir=data_dir, num_train=300)
  np.testing.assert_allclose(yeast.train.x.mean(0), 0, atol=1e-5)
  bibtex = data.load_dataset("bibtex", data_dir=data_dir, num_train=300)
  assert set(np.unique(bibtex.train.x)) <= {0.0, 1.0}


def test_hierarchical_dataset_subset_and_scaling(data_dir):
  ds = data.load_dataset("expr_fun", data_dir=data_dir, num_train=250)
  assert ds.train.num_examples == 250
  np.testing.assert_allclose(ds.train.x.mean(0), 0, atol=1e-4)
  raw = data.load_dataset("expr_fun", data_dir=data_dir, feature_scaling="none")
  assert raw.meta["preprocessing"]["feature_scaling"]["applied"] == "none"
  assert raw.train.x.std(0).max() > 2  # unscaled expression values


def test_too_many_rows_is_one_clear_error(data_dir):
  with pytest.raises(ValueError, match=r"num_train=99999: the training split has \d+ rows"):
    data.load_dataset("yeast", data_dir=data_dir, num_train=99999)


def test_config_key_reaches_the_loader(data_dir):
  config = configuration.get_config(
    "mlp", "genbase", [f"data.data_dir={data_dir}", "data.num_train=120"]
  )
  ds = tasks.task_for(config).load(config)
  assert ds.train.num_examples == 120
  assert ds.meta["train_subset"]["kept"] == 120

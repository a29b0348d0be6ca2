"""TFDS builders: built records equal `load_dataset` arrays, without TensorFlow."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

tfds = pytest.importorskip("tensorflow_datasets")

# pylint: disable=g-import-not-at-top,wrong-import-position
from energynets.data import REGISTRY  # noqa: E402
from energynets.data import load_dataset  # noqa: E402
from energynets.data import tfds_builders  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

# (registry name, load_dataset options): the default dataset (generated, no
# files), a cross-validation fold (a non-default config) and a nominal dataset.
CASES = [("synthetic", {}), ("yeast", {"fold": 3}), ("genbase", {})]


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory) -> pathlib.Path:
  tfds.disable_progress_bar()
  return tmp_path_factory.mktemp("tfds")


@pytest.fixture(scope="module")
def built(tfds_dir, data_dir):
  """name -> (data sources, load_dataset result), each built once per module."""
  out = {}
  for name, kwargs in CASES:
    sources = tfds_builders.data_source(name, data_dir=data_dir, tfds_dir=tfds_dir, **kwargs)
    out[name] = sources, load_dataset(name, data_dir=data_dir, **kwargs)
  return out


def _stack(source, key: str) -> np.ndarray:
  records = source.__getitems__(list(range(len(source))))
  return np.stack([r[key] for r in records])


@pytest.mark.parametrize("name", [name for name, _ in CASES])
def test_records_equal_load_dataset(built, name):
  sources, ds = built[name]
  assert set(sources) == set(tfds_builders.SPLITS)
  for split in tfds_builders.SPLITS:
    want = getattr(ds, split)
    source = sources[split]
    assert len(source) == want.num_examples, split
    for key, want_array in (("x", want.x), ("y", want.y)):
      got = _stack(source, key)
      assert got.dtype == np.float32 and got.shape == want_array.shape, (split, key)
      # Bit patterns, so -0.0 and NaN payloads count too: the same arrays, same order.
      np.testing.assert_array_equal(
        got.view(np.uint32), want_array.view(np.uint32), err_msg=f"{name}/{split}/{key}"
      )
    # Single-record access agrees with the batched read.
    last = source[len(source) - 1]
    np.testing.assert_array_equal(last["x"], want.x[-1])
    np.testing.assert_array_equal(last["y"], want.y[-1])


@pytest.mark.parametrize("name", [name for name, _ in CASES])
def test_metadata_is_saved(built, tfds_dir, name):
  _, ds = built[name]
  kwargs = dict(CASES)[name]
  b = tfds_builders.builder(name, tfds_dir=tfds_dir, **kwargs)
  assert b.is_prepared()
  assert b.name == "energynets_" + name
  assert b.info.file_format == tfds.core.FileFormat.ARRAY_RECORD
  assert b.info.features["x"].shape == (ds.num_features,)
  assert b.info.features["y"].shape == (ds.num_labels,)
  assert b.info.supervised_keys == ("x", "y")
  meta = b.info.metadata
  assert tuple(meta["label_names"]) == ds.label_names
  assert tuple(meta["feature_names"]) == ds.feature_names
  # load_dataset's whole provenance record, as JSON stores it.
  assert meta["meta"] == json.loads(json.dumps(ds.meta))
  assert meta["load_kwargs"] == b.builder_config.load_kwargs()


def test_reading_needs_no_raw_data(built, tfds_dir, monkeypatch):
  """A built dataset is read back without the data directory or a rebuild."""
  del built  # Only needed to build first.
  monkeypatch.delenv("ENERGYNETS_DATA_DIR", raising=False)

  def no_load(*args, **kwargs):
    raise AssertionError(f"rebuilt: load_dataset{args}{kwargs}")

  monkeypatch.setattr(tfds_builders, "load_dataset", no_load)
  sources = tfds_builders.data_source("yeast", tfds_dir=tfds_dir, fold=3)
  assert len(sources["test"]) == 242
  # The plain TFDS entry points find the same data by string name.
  by_name = tfds.data_source("energynets_yeast/seed0-fold3", data_dir=tfds_dir, download=False)
  np.testing.assert_array_equal(by_name["train"][7]["x"], sources["train"][7]["x"])
  reader = tfds.builder_from_directory(tfds_dir / "energynets_genbase" / "seed0" / "1.0.0")
  assert len(reader.as_data_source()["validation"]) == 46


def test_every_registered_dataset_has_a_builder():
  assert set(tfds_builders.BUILDERS) == set(REGISTRY)
  for name, cls in tfds_builders.BUILDERS.items():
    assert tfds.builder_cls("energynets_" + name) is cls
    assert getattr(tfds_builders, cls.__name__) is cls
    assert (cls.MANUAL_DOWNLOAD_INSTRUCTIONS is None) == (not REGISTRY[name].files)
    # TFDS's default config is the first one.
    default = cls.BUILDER_CONFIGS[0]
    assert default.load_kwargs() == {"split_seed": 0, "fold": 0, "resplit": False}


@pytest.mark.parametrize(
  "dataset, kwargs, name",
  [
    ("bibtex", {}, "seed0"),
    ("bibtex", {"split_seed": 3, "resplit": True}, "seed3-resplit"),
    ("yeast", {}, "seed0-fold0"),
    ("yeast", {"split_seed": 2, "fold": 9}, "seed2-fold9"),
    ("synthetic", {"num_train": 1500}, "seed0-num_train1500"),
    ("synthetic", {"block_size": 2, "num_blocks": 8}, "seed0-block_size2-num_blocks8"),
  ],
)
def test_config_names_round_trip(dataset, kwargs, name):
  config = tfds_builders.make_config(dataset, **kwargs)
  assert config.name == name
  parsed = tfds_builders.parse_config_name(dataset, name)
  assert parsed is not None and parsed.load_kwargs() == config.load_kwargs()
  # TFDS resolves the string to the same variant (predeclared or parsed).
  cls = tfds_builders.BUILDERS[dataset]
  assert cls.get_builder_config(name).load_kwargs() == config.load_kwargs()


@pytest.mark.parametrize(
  "dataset, name",
  [
    ("bibtex", "seed0-fold1"),  # Not cross-validated.
    ("yeast", "seed0"),  # Fold missing: not canonical.
    ("yeast", "seed0-fold10"),  # Out of range.
    ("yeast", "fold3-seed0"),  # Reordered alias.
    ("yeast", "seed00-fold3"),  # Zero-padded alias.
    ("genbase", "seed0-resplit"),  # No re-split offered.
    ("cal500", "seed0-num_train5"),  # Generator argument on real data.
    ("synthetic", "num_train5"),  # No seed.
  ],
)
def test_invalid_config_names(dataset, name):
  assert tfds_builders.parse_config_name(dataset, name) is None
  with pytest.raises(ValueError):
    tfds.builder(f"energynets_{dataset}/{name}")


def test_invalid_options_raise_before_building(tmp_path):
  with pytest.raises(ValueError, match="fold"):
    tfds_builders.data_source("bibtex", tfds_dir=tmp_path, fold=1)
  with pytest.raises(ValueError, match="resplit"):
    tfds_builders.data_source("yeast", tfds_dir=tmp_path, resplit=True)
  with pytest.raises(ValueError, match="registered"):
    tfds_builders.data_source("not_a_dataset", tfds_dir=tmp_path)
  assert not list(tmp_path.iterdir())


def test_synthetic_generator_arguments_set_shapes(tfds_dir):
  kwargs = {
    "num_train": 40,
    "num_validation": 5,
    "num_test": 6,
    "num_features": 10,
    "num_blocks": 3,
    "block_size": 2,
  }
  sources = tfds_builders.data_source("synthetic", tfds_dir=tfds_dir, split_seed=4, **kwargs)
  ds = load_dataset("synthetic", split_seed=4, **kwargs)
  for split in tfds_builders.SPLITS:
    np.testing.assert_array_equal(_stack(sources[split], "x"), getattr(ds, split).x)
    np.testing.assert_array_equal(_stack(sources[split], "y"), getattr(ds, split).y)
  assert sources["train"][0]["y"].shape == (6,)


def test_build_and_read_without_tensorflow(tmp_path):
  """Even where TensorFlow is installed, nothing here imports it."""
  script = textwrap.dedent(f"""
      import importlib.machinery
      import sys

      # TensorFlow becomes "not installed" (find_spec -> None, import fails). Not
      # `sys.modules["tensorflow"] = None`: TFDS reads that key as "already loaded".
      class PathFinder(importlib.machinery.PathFinder):
        @classmethod
        def find_spec(cls, name, path=None, target=None):
          if name == "tensorflow" or name.startswith("tensorflow."):
            return None
          return super().find_spec(name, path, target)

      sys.meta_path = [PathFinder if f is importlib.machinery.PathFinder else f
                       for f in sys.meta_path]
      import numpy as np
      import tensorflow_datasets as tfds
      tfds.disable_progress_bar()
      from energynets.data import load_dataset, tfds_builders
      kw = dict(num_train=30, num_validation=4, num_test=5)
      src = tfds_builders.data_source("synthetic", tfds_dir={str(tmp_path)!r}, **kw)
      want = load_dataset("synthetic", **kw)
      got = np.stack([r["x"] for r in src["train"]])
      assert np.array_equal(got, want.train.x), "records differ"
      try:
        tfds.load("energynets_synthetic/seed0-num_test5-num_train30-num_validation4",
                  data_dir={str(tmp_path)!r})
      except ImportError:
        print("tfds.load needs tensorflow")
      print("ok")
  """)
  env = dict(
    os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
  )
  result = subprocess.run(
    [sys.executable, "-c", script],
    capture_output=True,
    text=True,
    env=env,
    timeout=120,
    check=False,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.splitlines()[-2:] == ["tfds.load needs tensorflow", "ok"]

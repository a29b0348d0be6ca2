"""Tests for energynets.data.denoising: generated depth scenes and natural-image crops."""

import json
import math

import numpy as np
import pytest

from energynets import data
from energynets.data import denoising

SMALL = dict(num_train=6, num_validation=4, num_test=5, height=32, width=40)


def _load(**overrides):
  return denoising.load_denoising(**{**SMALL, **overrides})


def test_same_seed_same_data_and_other_seed_differs():
  a, b, c = _load(seed=3), _load(seed=3), _load(seed=4)
  for split in ("train", "validation", "test"):
    np.testing.assert_array_equal(getattr(a, split).x, getattr(b, split).x)
    np.testing.assert_array_equal(getattr(a, split).y, getattr(b, split).y)
    assert not np.array_equal(getattr(a, split).y, getattr(c, split).y)
  assert a.meta == b.meta
  json.dumps(a.meta)  # Results files embed it.


def test_depth_scene_is_a_function_of_the_rng_state():
  one = denoising.depth_scene(np.random.default_rng(7), 24, 16)
  two = denoising.depth_scene(np.random.default_rng(7), 24, 16)
  np.testing.assert_array_equal(one, two)
  assert one.shape == (24, 16) and one.dtype == np.float32


def test_held_out_splits_do_not_depend_on_other_split_sizes():
  small, large = _load(num_train=2), _load(num_train=9, num_test=8)
  for split in ("x", "y"):
    np.testing.assert_array_equal(
      getattr(small.validation, split), getattr(large.validation, split)
    )
    # A smaller split is a prefix of a larger one.
    np.testing.assert_array_equal(getattr(small.test, split), getattr(large.test, split)[:5])
    np.testing.assert_array_equal(getattr(small.train, split), getattr(large.train, split)[:2])
  assert not np.array_equal(large.train.y[0], large.validation.y[0])
  assert not np.array_equal(large.validation.y[0], large.test.y[0])


def test_shapes_dtypes_value_range_and_meta():
  ds = _load(noise_sigma=0.05, seed=1)
  assert ds.image_shape == (32, 40)
  assert ds.meta["counts"] == {"train": 6, "validation": 4, "test": 5}
  assert ds.noise_sigma == 0.05 and ds.meta["seed"] == 1
  for split in (ds.train, ds.validation, ds.test):
    assert split.x.dtype == np.float32 and split.y.dtype == np.float32
    assert split.y.min() >= 0.0 and split.y.max() <= 1.0
  # Scenes use the range: near objects and far walls.
  assert ds.train.y.min() < 0.5 < ds.train.y.max()


def test_defaults_are_the_documented_ones():
  assert (denoising.DEFAULT_HEIGHT, denoising.DEFAULT_WIDTH) == (64, 64)
  assert (
    denoising.DEFAULT_NUM_TRAIN,
    denoising.DEFAULT_NUM_VALIDATION,
    denoising.DEFAULT_NUM_TEST,
  ) == (1000, 100, 100)
  assert denoising.DEFAULT_NOISE_SIGMA == 0.07
  ds = denoising.load_denoising(num_train=0, num_validation=0)
  assert ds.test.x.shape == (100, 64, 64)


def test_noise_is_gaussian_with_std_sigma_and_not_clipped():
  sigma = 0.07
  ds = _load(num_train=40, height=64, width=64, noise_sigma=sigma)
  noise = ds.train.x.astype(np.float64) - ds.train.y
  assert abs(noise.std() - sigma) < 0.01 * sigma  # 164k samples: std error ~0.2%.
  assert abs(noise.mean()) < 0.01 * sigma
  # Fourth moment of a Gaussian: 3 sigma^4.
  assert abs(np.mean(noise**4) / noise.var() ** 2 - 3.0) < 0.1
  assert ds.train.x.min() < 0.0 or ds.train.x.max() > 1.0  # not clipped
  # Noise is independent across images (own stream per image).
  corr = np.corrcoef(noise[0].ravel(), noise[1].ravel())[0, 1]
  assert abs(corr) < 0.05


def test_scenes_are_piecewise_planar_with_occlusion_edges():
  y = _load(num_train=50, height=64, width=64).train.y.astype(np.float64)
  jump = np.maximum(np.abs(np.diff(y, axis=1))[:, :, :-1], np.abs(np.diff(y, axis=2))[:, :-1, :])
  edges = jump > 0.05  # A depth step of 5% of the range between neighbours.
  per_image = edges.mean(axis=(1, 2))
  assert (per_image > 0).mean() >= 0.9  # (almost) every scene has an occlusion edge
  assert 0.005 < edges.mean() < 0.15  # ... but edges are thin
  # Away from edges each surface is an exact ramp: second differences vanish.
  curvature = np.maximum(
    np.abs(np.diff(y, n=2, axis=1))[:, :, :-2], np.abs(np.diff(y, n=2, axis=2))[:, :-2, :]
  )
  assert (curvature < 1e-4).mean() > 0.75
  # And the ramps are not all flat (planes are tilted).
  slopes = np.abs(np.diff(y, axis=2))
  assert ((slopes > 1e-4) & (slopes < 0.01)).mean() > 0.3


def test_natural_images_are_a_test_set_beside_depth_scene_training_data():
  nat = denoising.load_denoising("natural_images", num_train=3, num_validation=2, noise_sigma=0.05)
  depth = denoising.load_denoising("depth_scenes", num_train=3, num_validation=2, noise_sigma=0.05)
  np.testing.assert_array_equal(nat.train.x, depth.train.x)
  np.testing.assert_array_equal(nat.validation.y, depth.validation.y)
  crops = nat.meta["test_crops"]
  n = len(denoising.NATURAL_IMAGES) * denoising.DEFAULT_CROPS_PER_IMAGE
  assert nat.test.y.shape == (n, 64, 64) == nat.test.x.shape and len(crops) == n
  assert nat.test.y.min() >= 0.0 and nat.test.y.max() <= 1.0
  assert {c["image"] for c in crops} == set(denoising.NATURAL_IMAGES)
  # Round-robin order: the first crops come from different images.
  first = [c["image"] for c in crops[: len(denoising.NATURAL_IMAGES)]]
  assert first == list(denoising.NATURAL_IMAGES)
  # Noise on the natural crops has the requested sigma too.
  assert abs((nat.test.x - nat.test.y).std() - 0.05) < 0.002
  # The crop records say where each crop was cut.
  from skimage import data as skdata

  c = next(r for r in crops if r["image"] == "camera" and r["row"] > 0)
  expected = skdata.camera()[c["row"] : c["row"] + 64, c["col"] : c["col"] + 64] / 255.0
  np.testing.assert_allclose(nat.test.y[crops.index(c)], expected, atol=1e-6)
  capped = denoising.load_denoising(
    "natural_images", num_train=0, num_validation=0, num_test=4, noise_sigma=0.05
  )
  np.testing.assert_array_equal(capped.test.x, nat.test.x[:4])


def test_natural_crops_skip_images_smaller_than_a_crop():
  clean, records = denoising.natural_image_crops(192, 192, crops_per_image=1)
  assert {"page", "text"}.isdisjoint(r["image"] for r in records)  # 191x384, 172x448
  assert clean.shape == (len(records), 192, 192)
  with pytest.raises(ValueError, match="no natural image"):
    denoising.natural_image_crops(2000, 2000)


@pytest.mark.parametrize(
  "kwargs, match",
  [
    (dict(name="7scenes"), "unknown denoising dataset"),
    (dict(num_train=-1), "num_train"),
    (dict(num_validation=-5), "num_validation"),
    (dict(num_test=-1), "num_test"),
    (dict(num_train=2.5), "num_train"),
    (dict(height=0), "height"),
    (dict(width=-64), "width"),
    (dict(height=4), "height"),
    (dict(width=15), "width"),
    (dict(noise_sigma=0.0), "noise_sigma"),
    (dict(noise_sigma=-0.1), "noise_sigma"),
    (dict(noise_sigma=math.nan), "noise_sigma"),
    (dict(noise_sigma=math.inf), "noise_sigma"),
    (dict(noise_sigma="loud"), "noise_sigma"),
    (dict(seed=-1), "seed"),
    (dict(name="natural_images", num_test=10_000), "only"),
    (dict(name="natural_images", crops_per_image=0), "crops_per_image"),
  ],
)
def test_bad_arguments_raise(kwargs, match):
  with pytest.raises(ValueError, match=match):
    _load(**kwargs)


def test_split_checks_shapes():
  with pytest.raises(ValueError, match="one shape"):
    denoising.DenoisingSplit(x=np.zeros((2, 8, 8), np.float32), y=np.zeros((2, 8, 9), np.float32))
  with pytest.raises(ValueError, match="one shape"):
    denoising.DenoisingSplit(x=np.zeros((8, 8), np.float32), y=np.zeros((8, 8), np.float32))


def test_exported_from_energynets_data():
  assert data.load_denoising is denoising.load_denoising
  assert data.DenoisingDataset is denoising.DenoisingDataset
  assert data.depth_scene is denoising.depth_scene

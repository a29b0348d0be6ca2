"""Tests for metrics.psnr (oracle: scikit-image) and the classical denoising baselines."""

import importlib.util
import math
import sys

import numpy as np
import pytest
from skimage.metrics import peak_signal_noise_ratio

from energynets import baselines
from energynets import metrics
from energynets.baselines import denoising as bl
from energynets.data import denoising

HAS_BM3D = importlib.util.find_spec("bm3d") is not None
needs_bm3d = pytest.mark.skipif(
  not HAS_BM3D, reason="the bm3d package is not installed (pip install bm3d)"
)


@pytest.fixture(scope="module")
def tiny():
  return denoising.load_denoising(
    num_train=0, num_validation=3, num_test=3, height=32, width=32, noise_sigma=0.07, seed=5
  )


# ----------------------------------------------------------------------------- psnr


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("peak", [1.0, 255.0, 0.5])
def test_psnr_is_the_mean_of_skimage_per_image_psnr(seed, peak):
  rng = np.random.default_rng(seed)
  clean = rng.uniform(0, peak, size=(5, 12, 9))
  # Different noise levels per image, so the mean of PSNRs != PSNR of the mean MSE.
  estimate = (
    clean
    + rng.normal(size=clean.shape) * peak * np.array([0.01, 0.05, 0.1, 0.2, 0.02])[:, None, None]
  )
  expected = np.mean(
    [peak_signal_noise_ratio(c, e, data_range=peak) for c, e in zip(clean, estimate)]
  )
  np.testing.assert_allclose(metrics.psnr(clean, estimate, peak=peak), expected, rtol=1e-12)
  pooled = 10 * np.log10(peak**2 / np.mean((clean - estimate) ** 2))
  assert abs(metrics.psnr(clean, estimate, peak=peak) - pooled) > 0.1


def test_psnr_of_one_image_and_float32_inputs():
  rng = np.random.default_rng(3)
  clean = rng.random((16, 16)).astype(np.float32)
  noisy = (clean + 0.1 * rng.standard_normal((16, 16))).astype(np.float32)
  expected = peak_signal_noise_ratio(
    clean.astype(np.float64), noisy.astype(np.float64), data_range=1.0
  )
  assert metrics.psnr(clean, noisy) == pytest.approx(expected, rel=1e-12)
  assert metrics.psnr(clean[None], noisy[None]) == pytest.approx(expected, rel=1e-12)
  assert metrics.psnr(clean, clean + 0.1) == pytest.approx(20.0)  # 10 log10(1 / 0.01)
  assert metrics.psnr(clean, clean) == math.inf


@pytest.mark.parametrize(
  "clean, estimate, peak, match",
  [
    (np.zeros((2, 4, 4)), np.zeros((2, 4, 5)), 1.0, "shape mismatch"),
    (np.zeros(4), np.zeros(4), 1.0, "images"),
    (np.zeros((2, 4, 4)), np.zeros((2, 4, 4)), 0.0, "peak"),
    (np.zeros((2, 4, 4)), np.full((2, 4, 4), np.nan), 1.0, "finite"),
  ],
)
def test_psnr_rejects_bad_inputs(clean, estimate, peak, match):
  with pytest.raises(ValueError, match=match):
    metrics.psnr(clean, estimate, peak=peak)


# ------------------------------------------------------------------------ baselines


def test_identity_is_the_noisy_input(tiny):
  out = bl.identity(tiny.test.x)
  np.testing.assert_array_equal(out, tiny.test.x)
  assert out is not tiny.test.x and out.dtype == np.float32


@pytest.mark.parametrize(
  "denoise, param, gain", [(bl.tv_denoise, 0.05, 6.0), (bl.median_denoise, 3, 2.0)]
)
def test_classical_filters_improve_psnr_and_keep_shapes(tiny, denoise, param, gain):
  x, y = tiny.test.x, tiny.test.y
  out = denoise(x, param)
  assert out.shape == x.shape and out.dtype == np.float32
  assert metrics.psnr(y, out) > metrics.psnr(y, x) + gain
  one = denoise(x[1], param)  # A single [H, W] image works and matches the stack.
  np.testing.assert_allclose(one, out[1], atol=1e-6)


def test_tv_denoises_each_image_on_its_own(tiny):
  # A stack is not one 3-D volume: image i's result does not depend on its neighbours.
  x = tiny.test.x
  np.testing.assert_allclose(
    bl.tv_denoise(x[:2], 0.05)[1], bl.tv_denoise(x[1:], 0.05)[0], atol=1e-6
  )


@needs_bm3d
def test_bm3d_improves_psnr_over_the_input(tiny):
  x, y = tiny.test.x[:1], tiny.test.y[:1]
  out = bl.bm3d_denoise(x, 0.07)
  assert out.shape == x.shape and out.dtype == np.float32
  assert metrics.psnr(y, out) > metrics.psnr(y, x) + 5.0
  with pytest.raises(ValueError, match="sigma"):
    bl.bm3d_denoise(x, 0.0)
  # Refused, not passed on: the bm3d binary segfaults on 8 x 8 images.
  with pytest.raises(ValueError, match="at least 16x16"):
    bl.bm3d_denoise(x[0, :8, :8], 0.07)


def test_bm3d_missing_gives_an_install_hint(monkeypatch, tiny):
  monkeypatch.setitem(sys.modules, "bm3d", None)  # `import bm3d` now raises ImportError.
  with pytest.raises(ImportError, match="pip install bm3d"):
    bl.bm3d_denoise(tiny.test.x[:1], 0.07)


@pytest.mark.parametrize(
  "call, match",
  [
    (lambda x: bl.tv_denoise(x, 0.0), "weight"),
    (lambda x: bl.median_denoise(x, 4), "odd"),
    (lambda x: bl.identity(x[0, 0]), "images"),
  ],
)
def test_baselines_reject_bad_arguments(tiny, call, match):
  with pytest.raises(ValueError, match=match):
    call(tiny.test.x)


def test_tuning_picks_the_best_grid_value():
  rng = np.random.default_rng(0)
  clean = rng.random((4, 8, 8))
  noisy = clean + 0.3  # A constant offset: the denoiser `x - p` is exact at p = 0.3.
  grid = [0.0, 0.1, 0.5, 0.3, 0.2]
  best, scores = bl.tune_on_validation(lambda x, p: x - p, grid, noisy, clean)
  assert best == 0.3
  assert [p for p, _ in scores] == grid
  finite = {p: s for p, s in scores if p != 0.3}
  assert max(finite, key=finite.get) == 0.2  # next closest offset scores next best
  assert all(s == metrics.psnr(clean, noisy - p) for p, s in scores)


def test_tuning_ties_go_to_the_earliest_grid_value():
  clean = np.zeros((2, 8, 8))
  best, _ = bl.tune_on_validation(lambda x, p: x, [3, 1, 2], clean + 0.1, clean)
  assert best == 3
  with pytest.raises(ValueError, match="empty"):
    bl.tune_on_validation(lambda x, p: x, [], clean, clean)


def test_evaluate_baselines_tunes_on_validation_only(tiny):
  methods = (bl.NOISY, bl.MEDIAN._replace(grid=(3, 5)), bl.TV._replace(grid=(0.01, 0.05, 0.2)))
  res = baselines.evaluate_baselines(tiny, methods=methods)
  assert set(res) == {"noisy", "median", "tv"}
  assert res["noisy"]["test/psnr"] == pytest.approx(metrics.psnr(tiny.test.y, tiny.test.x))
  grid_scores = {w: res["tv"][f"validation/psnr@{w:g}"] for w in (0.01, 0.05, 0.2)}
  assert res["tv"]["weight"] == max(grid_scores, key=grid_scores.get)
  assert res["tv"]["validation/psnr"] == pytest.approx(max(grid_scores.values()))
  assert res["tv"]["test/psnr"] == pytest.approx(
    metrics.psnr(tiny.test.y, bl.tv_denoise(tiny.test.x, res["tv"]["weight"]))
  )
  assert res["median"]["size"] in (3, 5)
  for method in ("median", "tv"):
    assert res[method]["test/psnr"] > res["noisy"]["test/psnr"]
  with pytest.raises(TypeError, match="Baseline"):
    baselines.evaluate_baselines(tiny, methods=("tv",))


def test_evaluate_baselines_gives_bm3d_the_true_sigma(tiny):
  seen = []

  def fake_bm3d(x, sigma):
    seen.append(sigma)
    return bl.tv_denoise(x, 0.05)

  bm3d = bl.BM3D._replace(denoise=fake_bm3d)
  res = baselines.evaluate_baselines(tiny, methods=(bm3d,))
  assert res["bm3d"]["sigma"] == 0.07 and seen == [0.07, 0.07]  # validation, test
  res = baselines.evaluate_baselines(tiny, methods=(bm3d,), noise_sigma=0.1)
  assert res["bm3d"]["sigma"] == 0.1 and seen[-1] == 0.1

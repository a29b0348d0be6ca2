"""Tests for energynets.metrics against scikit-learn and hand-built cases."""

import statistics

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn import metrics as skm

from energynets import metrics

SEEDS = [0, 1, 2, 3, 4]


def _random_case(seed: int, n: int = 60, num_labels: int = 12):
  """Random gold/probabilities with every edge case the conventions cover.

  Rows: empty gold & empty prediction, empty gold & non-empty prediction,
  non-empty gold & empty prediction. Columns: absent from gold and prediction
  (exercises macro zero_division), gold-only, prediction-only.
  """
  rng = np.random.default_rng(seed)
  y = (rng.random((n, num_labels)) < rng.uniform(0.1, 0.5)).astype(np.int64)
  probs = np.clip(0.6 * y + 0.7 * rng.random((n, num_labels)) - 0.15, 0.0, 1.0)
  y[:, 0], probs[:, 0] = 0, 0.1  # Label absent from gold and prediction.
  y[:, 1], probs[:, 1] = 1, 0.0  # Gold-only label.
  y[:, 2], probs[:, 2] = 0, 0.99  # Prediction-only label ...
  probs[:3, 2] = 0.0  # ... except rows 0-2 below.
  y[0], probs[0] = 0, 0.2  # Empty gold, empty prediction.
  y[1], probs[1] = 0, 0.2
  probs[1, 5] = 0.9  # Empty gold, non-empty prediction.
  y[2, :], probs[2] = 0, 0.0
  y[2, 4] = 1  # Non-empty gold, empty prediction.
  return y, probs


# ---------------------------------------------------------------- sklearn oracle


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.75])
def test_matches_sklearn(seed, threshold):
  y, probs = _random_case(seed)
  pred = metrics.binarize(probs, threshold)
  # The case construction must actually contain the edge cases it claims.
  assert not y[0].any() and not pred[0].any()
  assert not y[1].any() and pred[1].any()
  assert y[2].any() and not pred[2].any()
  assert not y[:, 0].any() and not pred[:, 0].any()

  np.testing.assert_allclose(
    metrics.example_f1(y, pred),
    skm.f1_score(y, pred, average="samples", zero_division=1.0),
    rtol=1e-12,
  )
  np.testing.assert_allclose(
    metrics.micro_f1(y, pred), skm.f1_score(y, pred, average="micro", zero_division=1.0), rtol=1e-12
  )
  np.testing.assert_allclose(
    metrics.macro_f1(y, pred), skm.f1_score(y, pred, average="macro", zero_division=1.0), rtol=1e-12
  )
  np.testing.assert_allclose(
    metrics.macro_f1(y, pred, zero_division=0.0),
    skm.f1_score(y, pred, average="macro", zero_division=0.0),
    rtol=1e-12,
  )
  np.testing.assert_allclose(metrics.hamming_loss(y, pred), skm.hamming_loss(y, pred), rtol=1e-12)

  report = metrics.multilabel_report(y, probs, threshold)
  assert set(report) == {"example_f1", "micro_f1", "macro_f1", "hamming"}
  assert report["example_f1"] == metrics.example_f1(y, pred)
  assert report["micro_f1"] == metrics.micro_f1(y, pred)
  assert report["macro_f1"] == metrics.macro_f1(y, pred)
  assert report["hamming"] == metrics.hamming_loss(y, pred)


def test_empty_conventions_by_hand():
  y = np.array([[0, 0, 0], [0, 0, 0], [1, 1, 0], [1, 0, 0]])
  p = np.array([[0, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 0]])
  # Per example: empty/empty 1, empty gold & non-empty pred 0, 2/3, 0.
  assert metrics.example_f1(y, p) == pytest.approx((1 + 0 + 2 / 3 + 0) / 4)
  # Labels: {tp1, fn1} 2/3; {tp0, fp1, fn1} 0; absent -> 1.
  assert metrics.macro_f1(y, p) == pytest.approx((2 / 3 + 0 + 1) / 3)
  assert metrics.macro_f1(y, p, zero_division=0.0) == pytest.approx((2 / 3) / 3)
  assert metrics.micro_f1(y, p) == pytest.approx(2 / (2 + 1 + 2))
  assert metrics.hamming_loss(y, p) == pytest.approx(3 / 12)
  zeros = np.zeros((2, 3), int)
  assert metrics.example_f1(zeros, zeros) == 1.0
  assert metrics.micro_f1(zeros, zeros) == 1.0
  assert metrics.macro_f1(zeros, zeros) == 1.0
  assert metrics.hamming_loss(zeros, zeros) == 0.0


def test_accepts_bool_float_and_jax_inputs():
  y, probs = _random_case(7)
  pred = probs >= 0.5
  ref = metrics.example_f1(y, pred)
  assert metrics.example_f1(y.astype(bool), pred.astype(np.float32)) == ref
  assert metrics.example_f1(jnp.asarray(y), jnp.asarray(pred)) == ref


def test_binarize_is_inclusive():
  probs = np.array([[0.5, 0.49999, 0.50001, 0.0, 1.0]])
  np.testing.assert_array_equal(metrics.binarize(probs, 0.5), [[True, False, True, False, True]])
  np.testing.assert_array_equal(metrics.binarize(probs, 0.0), np.ones((1, 5), bool))


# ---------------------------------------------------------------- thresholds


def test_threshold_grid():
  grid = metrics.THRESHOLD_GRID
  assert len(grid) == 19
  assert grid[0] == 0.05 and grid[1] == 0.1 and grid[5] == 0.3 and grid[-1] == 0.95
  assert 0.5 in grid
  for k, t in enumerate(grid, start=1):
    assert t == float(f"{0.05 * k:.2f}")  # Exact decimal, no float drift.


def test_tune_threshold_maximizes_validation_f1():
  y, probs = _random_case(3, n=200)
  best = metrics.tune_threshold(y, probs)
  scores = {t: metrics.example_f1(y, metrics.binarize(probs, t)) for t in metrics.THRESHOLD_GRID}
  assert best in metrics.THRESHOLD_GRID
  assert scores[best] == max(scores.values())


@pytest.mark.parametrize(
  "probs, expected",
  [
    # F1 is 1 for every t in (0.10 .. 0.30]: the first maximizer would be
    # 0.10, the tie rule picks 0.30 (closest to 0.5).
    ([[0.32, 0.07]], 0.30),
    # F1 is 1 for every t in (0.70 .. 0.95]: the last maximizer would be
    # 0.95, the tie rule picks 0.70.
    ([[0.97, 0.68]], 0.70),
    # The tie set contains 0.5 itself.
    ([[0.9, 0.1]], 0.5),
    # Probabilities exactly on grid values: tuning uses the same inclusive
    # rule as `binarize` (0.3 >= 0.3 is positive), so 0.30 is in the tie
    # set; an exclusive rule would pick 0.25.
    ([[0.3, 0.05]], 0.30),
  ],
)
def test_tune_threshold_ties_go_to_closest_to_half(probs, expected):
  y = np.array([[1, 0]])
  assert metrics.tune_threshold(y, np.array(probs)) == expected


def test_tune_threshold_equidistant_tie_takes_smaller():
  y = np.array([[1, 0]])
  probs = np.array([[0.9, 0.1]])
  assert metrics.tune_threshold(y, probs, grid=(0.55, 0.45)) == 0.45
  assert metrics.tune_threshold(y, probs, grid=(0.2, 0.8)) == 0.2


def _rows_gained_below_half(gained, n=46):
  # n rows with one label each; `gained` of them score 0.2 (right only at t <= 0.2),
  # the rest 0.9; no negatives: every threshold up to 0.9 gets the others right.
  y = np.ones((n, 1))
  probs = np.full((n, 1), 0.9)
  probs[:gained] = 0.2
  return y, probs


@pytest.mark.parametrize(
  "gained, standard_errors, expected",
  [
    # One row of 46 gained: the difference's mean is exactly one standard error.
    (1, 0.0, 0.2),
    (1, 0.9, 0.2),
    (1, 1.1, 0.5),
    # Three rows: a mean of 3/46 against a standard error of about sqrt(3)/46.
    (3, 1.0, 0.2),
    (3, 1.7, 0.2),
    (3, 1.8, 0.5),
  ],
)
def test_tune_threshold_standard_errors_keeps_half_within_the_noise(
  gained, standard_errors, expected
):
  y, probs = _rows_gained_below_half(gained)
  assert metrics.tune_threshold(y, probs, standard_errors=standard_errors) == expected


@pytest.mark.parametrize("seed", SEEDS[:3])
@pytest.mark.parametrize("standard_errors", [0.5, 1.0, 2.0])
def test_tune_threshold_standard_errors_against_a_direct_computation(seed, standard_errors):
  y, probs = _random_case(seed, n=60)
  scores = {}
  for t in metrics.THRESHOLD_GRID:
    pred = metrics.binarize(probs, t)
    scores[t] = [metrics.example_f1(y[i : i + 1], pred[i : i + 1]) for i in range(len(y))]
  best = max(scores, key=lambda t: statistics.fmean(scores[t]))
  tied = []
  for t, per_row in scores.items():
    differences = [b - a for a, b in zip(per_row, scores[best])]
    noise = standard_errors * statistics.stdev(differences) / len(y) ** 0.5
    if statistics.fmean(differences) <= noise + 1e-12:
      tied.append(t)
  expected = min(tied, key=lambda t: (round(abs(t - 0.5), 9), t))
  assert metrics.tune_threshold(y, probs, standard_errors=standard_errors) == expected


def test_tune_threshold_negative_standard_errors_is_an_error():
  y, probs = _random_case(0, n=10)
  with pytest.raises(ValueError, match="standard_errors must be >= 0; got -1"):
    metrics.tune_threshold(y, probs, standard_errors=-1)


def test_evaluate_multilabel_tunes_on_validation_only():
  # Validation: the positive label sits at 0.32, the negative at 0.07, so the
  # validation-best threshold is 0.30 (tie rule). Test: the negative sits at
  # 0.62 and the positive at 0.9, so the test-best threshold would be >= 0.65.
  y = np.array([[1, 0], [0, 1]])
  val_probs = np.array([[0.32, 0.07], [0.07, 0.32]])
  test_probs = np.array([[0.9, 0.62], [0.62, 0.9]])
  assert metrics.tune_threshold(y, val_probs) == 0.3
  assert metrics.tune_threshold(y, test_probs) == 0.65

  res = metrics.evaluate_multilabel(val=(y, val_probs), test=(y, test_probs))
  assert res["threshold"] == 0.3
  # Applied unchanged to test, where it is worse than the test optimum.
  assert res["test/example_f1"] == pytest.approx(2 / 3)
  assert res["test/example_f1"] < metrics.example_f1(y, test_probs >= 0.65)
  assert res["validation/example_f1"] == 1.0
  # Same validation data, different test data: same threshold.
  res2 = metrics.evaluate_multilabel(val=(y, val_probs), test=(y, val_probs))
  assert res2["threshold"] == 0.3
  with pytest.raises(TypeError):
    metrics.evaluate_multilabel((y, val_probs), (y, test_probs))  # pylint: disable=too-many-function-args


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_evaluate_multilabel_keys_and_values(seed):
  y_val, p_val = _random_case(seed, n=50)
  y_test, p_test = _random_case(seed + 100, n=70)
  res = metrics.evaluate_multilabel(val=(y_val, p_val), test=(y_test, p_test))
  names = ["example_f1", "micro_f1", "macro_f1", "hamming"]
  expected = {"threshold"} | {
    f"{s}/{m}{suffix}" for s in ("validation", "test") for m in names for suffix in ("", "@0.5")
  }
  assert set(res) == expected
  t = res["threshold"]
  assert t == metrics.tune_threshold(y_val, p_val)
  for split, (y, p) in (("validation", (y_val, p_val)), ("test", (y_test, p_test))):
    tuned = metrics.multilabel_report(y, p, t)
    half = metrics.multilabel_report(y, p, 0.5)
    for m in names:
      assert res[f"{split}/{m}"] == tuned[m]
      assert res[f"{split}/{m}@0.5"] == half[m]
  assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in res.values())
  assert res["validation/example_f1"] >= res["validation/example_f1@0.5"]


# ---------------------------------------------------------------- soft metrics


@pytest.mark.parametrize("seed", SEEDS)
def test_soft_f1_equals_example_f1_on_binary(seed):
  y, probs = _random_case(seed)
  pred = (probs >= 0.5).astype(np.float32)
  soft = np.asarray(metrics.soft_f1(pred, y, eps=1e-7))
  assert soft.shape == (y.shape[0],)
  exact = np.array([metrics.example_f1(y[i : i + 1], pred[i : i + 1]) for i in range(y.shape[0])])
  np.testing.assert_allclose(soft, exact, atol=1e-6)
  assert soft[0] == 1.0  # Empty/empty, exactly.
  assert soft[1] == pytest.approx(0.0, abs=1e-6)
  np.testing.assert_allclose(soft.mean(), metrics.example_f1(y, pred), atol=1e-6)


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_soft_iou_equals_jaccard_on_binary(seed):
  y, probs = _random_case(seed)
  pred = (probs >= 0.5).astype(np.int64)
  soft = np.asarray(metrics.soft_iou(y, pred))
  # sklearn's samples-Jaccard with zero_division=1 scores empty/empty as 1 too.
  per_example = [
    skm.jaccard_score(y[i : i + 1], pred[i : i + 1], average="samples", zero_division=1.0)
    for i in range(y.shape[0])
  ]
  np.testing.assert_allclose(soft, per_example, atol=1e-6)
  assert soft[0] == 1.0


def test_soft_metrics_jit_vmap_and_axis():
  rng = np.random.default_rng(0)
  y = (rng.random((8, 5)) < 0.4).astype(np.float32)
  s = rng.random((8, 5)).astype(np.float32)
  for fn in (lambda a, b, **kw: metrics.soft_f1(b, a, **{"eps": 1e-7, **kw}), metrics.soft_iou):
    ref = fn(y, s)
    np.testing.assert_allclose(jax.jit(fn)(y, s), ref, rtol=1e-6)
    np.testing.assert_allclose(jax.vmap(fn)(y, s), ref, rtol=1e-6)
    # Image-shaped inputs: reduce over (H, W) gives one score per image.
    img = fn(y.reshape(2, 4, 5), s.reshape(2, 4, 5), axis=(-2, -1))
    flat = fn(y.reshape(2, 20), s.reshape(2, 20))
    np.testing.assert_allclose(img, flat, rtol=1e-6)
  # The soft score at the gold itself is 1; at the complement it is ~0.
  np.testing.assert_allclose(metrics.soft_f1(y, y, eps=1e-7), 1.0, rtol=1e-6)
  assert metrics.soft_f1(1.0 - y, y, eps=1e-7).max() < 1e-5


@pytest.mark.parametrize("fn", [lambda y, s, eps: metrics.soft_f1(s, y, eps=eps), metrics.soft_iou])
def test_soft_metric_grad_matches_finite_differences(fn):
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    y = (rng.random((4, 6)) < 0.5).astype(np.float64)
    y[0] = 0.0  # Empty gold: the steep regime must still be differentiated right.
    s = rng.uniform(0.05, 0.95, (4, 6))
    w = rng.normal(size=4)

    def objective(soft):
      return jnp.sum(w * fn(y, soft, eps=1e-3))

    grad = np.asarray(jax.grad(objective)(jnp.asarray(s)))
    assert grad.dtype == np.float64
    h = 1e-6
    fd = np.zeros_like(s)
    for idx in np.ndindex(*s.shape):
      e = np.zeros_like(s)
      e[idx] = h
      fd[idx] = (objective(s + e) - objective(s - e)) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)
    assert np.abs(grad).min() > 0  # Every coordinate actually matters.


def test_soft_f1_gradient_pushes_towards_gold():
  y = jnp.array([[1.0, 0.0, 1.0, 0.0]])
  s = jnp.full((1, 4), 0.5)
  g = jax.grad(lambda s: metrics.soft_f1(s, y, eps=1e-7).sum())(s)
  assert (g[0, jnp.array([0, 2])] > 0).all() and (g[0, jnp.array([1, 3])] < 0).all()


# ---------------------------------------------------------------- errors


def test_errors():
  y = np.array([[1, 0, 1], [0, 0, 1]])
  probs = np.array([[0.9, 0.2, 0.6], [0.1, 0.3, 0.8]])
  with pytest.raises(ValueError, match="shape mismatch"):
    metrics.example_f1(y, y[:, :2])
  with pytest.raises(ValueError, match="shape mismatch"):
    metrics.multilabel_report(y, probs[:1], 0.5)
  nan_probs = probs.copy()
  nan_probs[1, 2] = np.nan
  with pytest.raises(ValueError, match=r"probs contains NaN .*\(1, 2\)"):
    metrics.multilabel_report(y, nan_probs, 0.5)
  with pytest.raises(ValueError, match="probs_val contains NaN"):
    metrics.tune_threshold(y, np.full((2, 3), np.nan))
  with pytest.raises(ValueError, match=r"y_true must be binary.*2"):
    metrics.example_f1(y * 2, y)
  with pytest.raises(ValueError, match="y_true must be binary"):
    metrics.multilabel_report(y - 0.5, probs, 0.5)
  with pytest.raises(ValueError, match="y_pred must be binary"):
    metrics.micro_f1(y, probs)
  with pytest.raises(ValueError, match="y_true contains NaN"):
    metrics.hamming_loss(np.where(y > 0, np.nan, 0.0), y)
  with pytest.raises(ValueError, match=r"in \[0, 1\]"):
    metrics.binarize(probs + 0.5, 0.5)
  with pytest.raises(ValueError, match="threshold must be in"):
    metrics.binarize(probs, 1.5)
  with pytest.raises(ValueError, match="2-D"):
    metrics.example_f1(y[0], y[0])
  with pytest.raises(ValueError, match="at least one example"):
    metrics.example_f1(np.zeros((0, 3)), np.zeros((0, 3)))
  with pytest.raises(ValueError, match="zero_division"):
    metrics.macro_f1(y, y, zero_division=2.0)
  with pytest.raises(ValueError, match="grid"):
    metrics.tune_threshold(y, probs, grid=())
  with pytest.raises(ValueError, match="number of labels"):
    metrics.evaluate_multilabel(val=(y, probs), test=(y[:, :2], probs[:, :2]))
  with pytest.raises(ValueError, match="test probs contains NaN"):
    metrics.evaluate_multilabel(val=(y, probs), test=(y, probs * np.nan))
  with pytest.raises(ValueError, match="shape mismatch"):
    metrics.soft_f1(jnp.ones((2, 3)), jnp.ones((2, 4)))
  with pytest.raises(ValueError, match="eps"):
    metrics.soft_iou(jnp.ones((2, 3)), jnp.ones((2, 3)), eps=-1.0)

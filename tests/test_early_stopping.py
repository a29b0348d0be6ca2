"""Early stopping on the validation metric (energynets/train/early_stopping.py, `fit`)."""

import json

import jax
import numpy as np
import optax
import pytest

from energynets import train as train_lib
from energynets.nets import MLP
from energynets.objectives import local_bce
from energynets.train import early_stopping
from experiments import choices


def _data(n, seed):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 12)).astype(np.float32)
  y = (x[:, :5] + 0.3 * rng.normal(size=(n, 5)) > 0).astype(np.float32)
  return {"x": x, "y": y}


def _objective():
  # 48 training rows and a wide net at a high rate: the held-out loss is lowest at the
  # first evaluation and rises from there.
  return local_bce(MLP((64,), 5), optax.adam(3e-2))


def _options(**kw):
  defaults = dict(
    steps=60,
    batch_size=16,
    seed=0,
    log_every=10,
    eval_every=10,
    checkpoint_every=60,
    select_metric="validation/loss",
    select_mode="min",
    tensorboard=False,
    early_stopping_patience=3,
  )
  return train_lib.LoopOptions(**{**defaults, **kw})


def _loss_evaluator(objective, data):
  mesh = train_lib.make_mesh()
  predict = train_lib.build_predict(objective, mesh)

  def evaluate(state):
    p = train_lib.predict_in_batches(predict, state, data["x"], 64, mesh)
    eps = 1e-6
    loss = -np.mean(data["y"] * np.log(p + eps) + (1 - data["y"]) * np.log(1 - p + eps))
    return {"validation/loss": float(loss)}

  return evaluate


def _scripted(values):
  """An evaluator returning `values` in turn, whatever the state."""
  calls = iter(values)
  return lambda state: {"validation/score": next(calls)}


def _leaves(state):
  return [np.asarray(v) for v in jax.tree_util.tree_leaves(state)]


def test_counts_evaluations_since_the_last_improvement():
  assert early_stopping.evals_without_improvement([]) == 0
  assert early_stopping.evals_without_improvement([0.1, 0.3, 0.2, 0.3]) == 2
  assert early_stopping.evals_without_improvement([0.1, 0.3, 0.2, 0.31]) == 0
  # Gains of at most min_delta do not count, nor move the best value.
  assert early_stopping.evals_without_improvement([0.1, 0.3, 0.35, 0.39, 0.41], min_delta=0.1) == 0
  assert early_stopping.evals_without_improvement([0.1, 0.3, 0.35, 0.39], min_delta=0.1) == 2
  assert early_stopping.evals_without_improvement([3.0, 2.0, 2.5], mode="min") == 1
  history = [{"step": 10 * (i + 1), "m": v} for i, v in enumerate([0.1, 0.5, 0.4, 0.5])]
  assert early_stopping.stop_reason(history[:3], "m", patience=2) is None
  reason = early_stopping.stop_reason(history, "m", patience=2)
  assert "patience 2" in reason and "at step 20" in reason


def test_scripted_metric_stops_at_the_eval_that_exhausts_the_patience(tmp_path):
  objective = _objective()
  # Best at the second evaluation (step 20); three without improvement end at step 50.
  # Step 40 equals it: not an improvement for the patience, but the later state selected.
  values = [0.5, 0.7, 0.6, 0.7, 0.65, 0.9, 0.9, 0.9, 0.9, 0.9]
  result = train_lib.fit(
    objective,
    _data(48, 0),
    _options(select_metric="validation/score", select_mode="max"),
    tmp_path,
    validation=train_lib.Validation(_scripted(values)),
  )
  assert result.final_step == 50 and result.selected_step == 40
  assert [r["step"] for r in result.history] == [10, 20, 30, 40, 50]
  assert "patience 3" in result.stop_reason and "at step 20" in result.stop_reason
  run = json.loads((tmp_path / "run.json").read_text())
  assert run["metadata"]["final_step"] == 50
  assert run["metadata"]["stop_reason"] == result.stop_reason


def test_disabled_runs_every_step_as_before(tmp_path):
  objective = _objective()
  values = [0.5, 0.7, 0.6, 0.6, 0.6, 0.6]
  off = train_lib.fit(
    objective,
    _data(48, 0),
    _options(select_metric="validation/score", select_mode="max", early_stopping=False),
    tmp_path / "off",
    validation=train_lib.Validation(_scripted(values)),
  )
  assert off.final_step == 60 and off.stop_reason is None and len(off.history) == 6
  # The same run with a patience it never reaches: the same state and records.
  never = train_lib.fit(
    objective,
    _data(48, 0),
    _options(select_metric="validation/score", select_mode="max", early_stopping_patience=100),
    tmp_path / "never",
    validation=train_lib.Validation(_scripted(values)),
  )
  assert never.final_step == 60 and never.selected_step == off.selected_step == 20
  assert off.history == never.history
  for a, b in zip(_leaves(off.state), _leaves(never.state)):
    np.testing.assert_array_equal(a, b)


def test_real_run_stops_early_returns_the_best_checkpoint_and_stays_stopped(tmp_path):
  objective = _objective()
  train, held_out = _data(48, 0), _data(128, 1)
  evaluate = _loss_evaluator(objective, held_out)
  full = train_lib.fit(
    objective,
    train,
    _options(early_stopping=False),
    tmp_path / "full",
    validation=train_lib.Validation(evaluate),
  )
  stopped = train_lib.fit(
    objective, train, _options(), tmp_path / "stopped", validation=train_lib.Validation(evaluate)
  )
  losses = [r["validation/loss"] for r in full.history]
  assert int(np.argmin(losses)) == 0  # the curve this test is about
  assert stopped.final_step == 40 < full.final_step == 60
  assert stopped.selected_step == full.selected_step == 10
  assert stopped.history == full.history[:4]
  # The returned state is the best checkpoint: the full run's state at the same step.
  for a, b in zip(_leaves(stopped.state), _leaves(full.state)):
    np.testing.assert_array_equal(a, b)

  metrics = (tmp_path / "stopped" / "metrics.jsonl").read_text()
  again = train_lib.fit(
    objective, train, _options(), tmp_path / "stopped", validation=train_lib.Validation(evaluate)
  )
  assert (tmp_path / "stopped" / "metrics.jsonl").read_text() == metrics  # nothing trained
  assert again.final_step == 40 and again.selected_step == 10
  assert again.stop_reason == stopped.stop_reason
  for a, b in zip(_leaves(again.state), _leaves(stopped.state)):
    np.testing.assert_array_equal(a, b)


def test_options_read_the_config_keys_and_check_the_patience():
  options = choices.loop_options(
    dict(
      steps=10,
      batch_size=2,
      early_stopping=False,
      early_stopping_patience=5,
      early_stopping_min_delta=0.01,
    )
  )
  assert (
    options.early_stopping,
    options.early_stopping_patience,
    options.early_stopping_min_delta,
  ) == (False, 5, 0.01)
  assert train_lib.LoopOptions(steps=1, batch_size=1).early_stopping


def test_zero_patience_is_an_error(tmp_path):
  with pytest.raises(ValueError, match="early_stopping_patience"):
    train_lib.fit(
      _objective(),
      _data(48, 0),
      _options(early_stopping_patience=0),
      tmp_path,
      validation=train_lib.Validation(_scripted([0.0])),
    )

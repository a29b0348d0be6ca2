"""A stage never ends below its start: a continuing stage's starting state is evaluation 0
of its selection, and a staged run (and a staged tuner trial) reports its best stage."""

import json
import os

import jax
import numpy as np
import optax
import pytest
from test_train import _options as train_options

import energynets as en
from energynets import train as train_lib
from energynets.nets import MLP
from energynets.objectives import local_bce
from experiments import builders
from experiments import configuration
from experiments import train
from experiments import trials


def _toy_data(n=256, d=12, labels=5, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)).astype(np.float32)
  y = (x[:, :labels] + 0.3 * rng.normal(size=(n, labels)) > 0).astype(np.float32)
  return {"x": x, "y": y}


def _objective(lr):
  return local_bce(MLP((16,), 5), optax.adam(lr))


def _options(**kw):
  return train_options(**{"early_stopping": False, **kw})


def _validation(objective, data, crash_at=None):
  mesh = train_lib.make_mesh()
  predict = train_lib.build_predict(objective, mesh)

  def evaluate(state):
    if crash_at is not None and int(state["net"].opt_state[0].count) >= crash_at:
      raise KeyboardInterrupt("simulated kill")
    p = train_lib.predict_in_batches(predict, state, data["x"], 64, mesh)
    eps = 1e-6
    loss = -np.mean(data["y"] * np.log(p + eps) + (1 - data["y"]) * np.log(1 - p + eps))
    return {"validation/loss": float(loss)}

  return train_lib.Validation(evaluate)


def _leaves(state):
  return [np.asarray(v) for v in jax.tree_util.tree_leaves(state)]


@pytest.fixture(scope="module")
def first_stage(tmp_path_factory):
  data = _toy_data()
  objective = _objective(0.05)
  result = train_lib.fit(
    objective,
    data,
    _options(),
    tmp_path_factory.mktemp("first"),
    validation=_validation(objective, data),
  )
  return data, result


def test_a_continuing_stage_that_only_gets_worse_returns_its_start(first_stage, tmp_path):
  data, first = first_stage
  ruinous = _objective(30.0)  # one step at this rate leaves the selected state far behind
  result = train_lib.fit(
    ruinous,
    data,
    _options(early_stopping=True, early_stopping_patience=2),
    tmp_path,
    validation=_validation(ruinous, data),
    previous_state=first.state,
  )
  assert result.history[0]["step"] == 0
  assert result.selected_step == 0
  assert result.selected_value == pytest.approx(first.selected_value)
  for a, b in zip(_leaves(first.state["net"].params), _leaves(result.state["net"].params)):
    np.testing.assert_array_equal(a, b)
  # Patience counts the start: evaluations 10 and 20 did not improve on step 0's.
  assert result.final_step == 20 and result.stop_reason.startswith("early stopping")
  assert [r["step"] for r in result.history] == [0, 10, 20]
  assert json.loads((tmp_path / "run.json").read_text())["checkpoint"] == {
    "directory": "best",
    "step": 0,
  }


@pytest.mark.parametrize("mode", ["max", "min"])
def test_of_evaluations_equal_on_the_metric_the_later_state_is_selected(mode, tmp_path):
  # A saturated validation set: the metric stops moving while training goes on.
  data = _toy_data()
  objective = _objective(0.05)
  values = iter([0.3, 0.9, 0.9, 0.9] if mode == "max" else [0.9, 0.3, 0.3, 0.3])
  result = train_lib.fit(
    objective,
    data,
    _options(select_metric="validation/score", select_mode=mode),
    tmp_path,
    validation=train_lib.Validation(lambda state: {"validation/score": next(values)}),
  )
  assert [r["step"] for r in result.history] == [10, 20, 30, 40]
  assert result.selected_step == 40 and result.final_step == 40
  assert json.loads((tmp_path / "run.json").read_text())["checkpoint"]["step"] == 40


def test_a_continuing_stage_leaves_its_start_only_for_a_better_state(first_stage, tmp_path):
  data, first = first_stage
  objective = _objective(1e-2)
  value = first.selected_value  # every evaluation equals the start's: none is better
  result = train_lib.fit(
    objective,
    data,
    _options(),
    tmp_path,
    validation=train_lib.Validation(lambda state: {"validation/loss": value}),
    previous_state=first.state,
  )
  assert [r["step"] for r in result.history] == [0, 10, 20, 30, 40]
  assert result.selected_step == 0
  for a, b in zip(_leaves(first.state["net"].params), _leaves(result.state["net"].params)):
    np.testing.assert_array_equal(a, b)


def test_the_selected_evaluation_of_a_curve():
  select = train_lib.selection.selected_index
  assert select([10, 20, 30], [0.5, 0.7, 0.7]) == 2
  assert select([0, 10, 20], [0.7, 0.7, 0.7]) == 0  # a continuing stage keeps its start
  assert select([0, 10, 20], [0.7, 0.8, 0.8]) == 2
  assert select([10, 20, 30], [0.5, 0.3, 0.3], mode="min") == 2
  assert select([10, 20, 30], [0.5, 0.7, 0.6]) == 1


def test_a_trial_selects_the_later_of_equal_held_out_means(monkeypatch):
  config = configuration.get_config("mlp", "synthetic", ["train.steps=30"])
  dataset = trials.selection_data(en.load_dataset("synthetic", num_train=64))
  metric = trials.selection_metric(config)
  curves = iter([[(10, 0.5), (20, 0.7), (30, 0.6)], [(10, 0.5), (20, 0.6), (30, 0.7)]])

  def fake_fit(config, dataset, workdir):
    curve = next(curves)
    history = [{"step": s, metric: v} for s, v in curve]
    step, value = max(curve, key=lambda point: point[1])
    return [("", train_lib.FitResult(None, 30, step, value, history))]

  monkeypatch.setattr(trials, "fit_held_out", fake_fit)
  record = trials.run_trial(config.to_dict(), dataset, [np.arange(32), np.arange(32, 64)], 0, {})
  # Mean curve 0.5, 0.65, 0.65: steps 20 and 30 tie. A fold's best is what its fit selected.
  assert record["selected_step"] == 30 and record["value"] == pytest.approx(0.65)
  assert [f["best_step"] for f in record["folds"]] == [20, 30]
  assert [f["best_value"] for f in record["folds"]] == pytest.approx([0.7, 0.7])


def test_a_resumed_continuing_stage_keeps_its_step_zero_record(first_stage, tmp_path):
  data, first = first_stage
  objective = _objective(1e-2)
  reference = train_lib.fit(
    objective,
    data,
    _options(),
    tmp_path / "reference",
    validation=_validation(objective, data),
    previous_state=first.state,
  )
  killed = tmp_path / "killed"
  with pytest.raises(KeyboardInterrupt):
    train_lib.fit(
      objective,
      data,
      _options(),
      killed,
      validation=_validation(objective, data, crash_at=30),
      previous_state=first.state,
    )
  resumed = train_lib.fit(
    objective,
    data,
    _options(),
    killed,
    validation=_validation(objective, data),
    previous_state=first.state,
  )
  assert resumed.history == reference.history
  assert [r["step"] for r in resumed.history] == [0, 10, 20, 30, 40]
  assert resumed.selected_step == reference.selected_step
  for a, b in zip(_leaves(reference.state), _leaves(resumed.state)):
    np.testing.assert_array_equal(a, b)


def test_a_first_stage_does_not_evaluate_its_initialization(tmp_path):
  data = _toy_data()
  objective = _objective(0.05)
  result = train_lib.fit(
    objective, data, _options(), tmp_path, validation=_validation(objective, data)
  )
  assert [r["step"] for r in result.history] == [10, 20, 30, 40]
  records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert min(r["step"] for r in records) == 10


def test_a_stage_that_selects_nothing_does_not_evaluate_its_start(first_stage, tmp_path):
  data, first = first_stage
  objective = _objective(1e-2)
  result = train_lib.fit(
    objective,
    data,
    _options(select_metric=None),
    tmp_path,
    validation=_validation(objective, data),
    previous_state=first.state,
  )
  assert [r["step"] for r in result.history] == [10, 20, 30, 40]
  assert result.selected_step == 40


def _fresh_energy_stage(build_objective):
  """`build_objective` whose SSVM stage starts from a fresh initialization, not from the
  previous stage: a stage that starts, and stays, below the pretrained network."""

  def build(config, dataset):
    objective = build_objective(config, dataset)
    if config.method != "ssvm":
      return objective
    return objective._replace(init_from=lambda previous, rng, batch: objective.init(rng, batch))

  return build


@pytest.fixture(scope="module")
def worse_second_stage(tmp_path_factory):
  """A two-stage SPEN run whose energy stage ends below its pretrained stage."""
  workdir = tmp_path_factory.mktemp("staged")
  config = configuration.get_config(
    "spen_ssvm",
    "synthetic",
    [
      "stage_order=pretrain,energy",
      "data.num_train=256",
      "train.batch_size=32",
      "train.eval_every=10",
      "train.log_every=10",
      "train.tensorboard=False",
    ],
  )
  config.stages.pretrain.train.steps = 60
  config.stages.pretrain.optimizer.learning_rate = 1e-2
  config.stages.energy.train.steps = 10
  config.stages.energy.optimizer.learning_rate = 1e-4
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(builders, "build_objective", _fresh_energy_stage(builders.build_objective))
    results = train.train_and_evaluate(config, str(workdir))
  return workdir, results


def test_a_staged_run_reports_its_best_stage(worse_second_stage):
  workdir, results = worse_second_stage
  meta = results["meta"]
  pretrain, energy = meta["stages"]
  assert energy["best_value"] < pretrain["best_value"]
  assert meta["selected_stage"] == "pretrain"
  assert meta["selected_step"] == pretrain["selected_step"]
  # The energy stage selects on example-F1 (its own select_metric); so does the run.
  history = [json.loads(line) for line in (workdir / "stages/pretrain/metrics.jsonl").open()]
  value = {r["step"]: r["validation/example_f1"] for r in history if "validation/example_f1" in r}
  assert pretrain["best_value"] == value[pretrain["selected_step"]]
  assert results["validation/example_f1"] == pytest.approx(pretrain["best_value"], abs=1e-6)
  assert "test/gbi_steps_mean" not in results  # the pretrained network runs no search


def test_a_run_whose_selected_stage_is_not_the_last_loads_and_predicts_it(worse_second_stage):
  workdir, results = worse_second_stage
  record = json.loads((workdir / "run.json").read_text())
  assert record["builder"]["kwargs"]["stage"] == "pretrain"
  assert record["checkpoint"] == {
    "directory": "stages/pretrain/best",
    "step": results["meta"]["selected_step"],
  }
  predictor = en.load_run(workdir)
  test_x = en.load_dataset("synthetic", num_train=256).test.x
  saved = np.load(os.path.join(workdir, train.PREDICTIONS_FILE))["test"]
  np.testing.assert_allclose(predictor.predict(test_x), saved, rtol=1e-5, atol=1e-6)


def _staged_trial(monkeypatch, curves):
  """The record of a dmf trial on two folds whose stages' curves are `curves`' items."""
  config = configuration.get_config("dmf", "synthetic", ["train.steps=20"])
  dataset = trials.selection_data(en.load_dataset("synthetic", num_train=64))
  metric = "validation/example_f1"
  assert trials.selection_metric(config) == metric
  curves = iter(curves)

  def fake_fit(config, dataset, workdir):
    fits = []
    for name, curve in next(curves).items():
      history = [{"step": s, metric: v} for s, v in curve]
      best = max(history, key=lambda r: r[metric])
      fits.append(
        (name, train_lib.FitResult(None, curve[-1][0], best["step"], best[metric], history))
      )
    return fits

  monkeypatch.setattr(trials, "fit_held_out", fake_fit)
  folds = [np.arange(0, 32), np.arange(32, 64)]
  return trials.run_trial(config.to_dict(), dataset, folds, 0, {})


def test_a_staged_trial_scores_its_best_stage(monkeypatch):
  record = _staged_trial(
    monkeypatch,
    [
      {"pretrain": [(10, 0.5), (20, 0.6)], "pairwise": [(0, 0.6), (10, 0.55)]},
      {"pretrain": [(10, 0.55), (20, 0.64)], "pairwise": [(0, 0.62), (10, 0.5)]},
    ],
  )
  # Per stage the mean curve over folds: pretrain 0.525, 0.62; pairwise 0.61, 0.525.
  assert [s["stage"] for s in record["stages"]] == ["pretrain", "pairwise"]
  assert [s["value"] for s in record["stages"]] == pytest.approx([0.62, 0.61])
  assert record["selected_stage"] == "pretrain" and record["selected_step"] == 20
  assert record["value"] == pytest.approx(0.62)
  assert record["folds"][1]["stages"][1]["steps"] == [0, 10]


def test_a_staged_trial_keeps_the_earlier_of_tied_stages(monkeypatch):
  record = _staged_trial(
    monkeypatch,
    [
      {"pretrain": [(10, 0.5), (20, 0.6)], "pairwise": [(10, 0.4), (20, 0.6)]},
      {"pretrain": [(10, 0.5), (20, 0.6)], "pairwise": [(10, 0.5), (20, 0.6)]},
    ],
  )
  # Both stages peak at 0.6 at step 20: the later stage is not better, so it is not chosen.
  assert [s["value"] for s in record["stages"]] == pytest.approx([0.6, 0.6])
  assert record["selected_stage"] == "pretrain" and record["selected_step"] == 20


def test_a_later_stage_replaces_an_earlier_one_only_when_better():
  select = train_lib.selection.selected_stage
  assert select([0.7, None, 0.7]) == 0  # a fresh task-net that ties the pretrained one
  assert select([0.7, None, 0.71]) == 2
  assert select([0.6, 0.7, 0.7]) == 1
  assert select([0.3, 0.3], mode="min") == 0
  assert select([0.3, 0.2], mode="min") == 1
  assert select([None, None]) is None


def test_a_staged_run_reports_the_earlier_of_tied_stages(tmp_path):
  """DMF's couplings start at zero, so with a learning rate of 0 its pairwise stage
  predicts as the MLP it starts from at every evaluation: a tie, which keeps the MLP."""
  config = configuration.get_config(
    "dmf",
    "synthetic",
    [
      "data.num_train=128",
      "train.batch_size=32",
      "train.eval_every=10",
      "train.log_every=10",
      "train.tensorboard=False",
    ],
  )
  config.stages.pretrain.train.steps = 20
  config.stages.pairwise.train.steps = 20
  config.stages.pairwise.optimizer.learning_rate = 0.0
  results = train.train_and_evaluate(config, str(tmp_path))
  pretrain, pairwise = results["meta"]["stages"]
  assert pairwise["best_value"] == pretrain["best_value"]
  assert results["meta"]["selected_stage"] == "pretrain"

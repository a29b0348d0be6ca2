"""benchmarks/small_data.py: the cells it runs, the linear baseline's selection, the
goals it checks, and a resumable smoke run on a small training subset."""

import json
import os
import types

import numpy as np
import pytest

from benchmarks import br_tuned_vs_sklearn
from benchmarks import small_data
from energynets import data
from energynets import metrics
from experiments import configuration


def _record(dataset, size, method, mode, f1):
  return {
    "dataset": dataset,
    "size": size,
    "method": method,
    "mode": mode,
    small_data.METRIC: f1,
    "num_train": size or 4000,
  }


def test_verdicts_compare_tuned_methods_with_the_linear_model_from_500_rows():
  records = [
    _record("d", 250, small_data.LINEAR, "tuned", 0.60),
    _record("d", 250, "mlp", "tuned", 0.50),  # below, but under 500 rows
    _record("d", 500, small_data.LINEAR, "tuned", 0.60),
    _record("d", 500, "mlp", "tuned", 0.58),  # below
    _record("d", 500, "mlp", "default", 0.10),  # defaults are not judged
    _record("d", 500, "dmf", "tuned", 0.62),
    _record("d", 0, small_data.LINEAR, "tuned", 0.70),
    _record("d", 0, "mlp", "tuned", 0.71),
    _record("d", 0, "dmf", "tuned", 0.69),
  ]
  lines = small_data.verdicts(records)
  assert lines[0] == (
    "Tuned deep methods below the tuned linear model (from 500 training "
    "rows): mlp on d n=500 (-2.00), dmf on d n=all (-1.00)."
  )
  # dmf − mlp over the two sizes both ran: (+4 − 2) / 2 = +1.
  assert "dmf tuned − mlp tuned, mean over 2 (dataset, size): +1.00 points." in lines
  # Defaults alone, or no linear model, measure nothing: the verdict says so.
  for alone in (
    [_record("d", 500, "mlp", "default", 0.5)],
    [_record("d", 500, "mlp", "tuned", 0.5)],
  ):
    assert small_data.verdicts(alone)[0].endswith(
      "rows): not measured (no tuned deep method and tuned linear model at the same size)."
    )


def test_table_has_a_row_per_dataset_and_size_and_marks_missing_cells():
  records = [
    _record("d", 250, small_data.LINEAR, "tuned", 0.6),
    _record("d", 250, "mlp", "tuned", 0.5),
    _record("d", 0, "mlp", "default", 0.7),
  ]
  lines = small_data.table(records).splitlines()
  assert lines[0] == "| dataset | train rows | LR (sklearn, tuned) | mlp default | mlp tuned |"
  assert lines[2] == "| d | 250 | 60.00 | — | 50.00 |"
  assert lines[3] == "| d | 4000 | — | 70.00 | — |"


def test_wall_times_keep_platforms_apart():
  cells = [
    {**_record("d", 500, "mlp", "tuned", 0.5), "seconds": s, "platform": p}
    for s, p in ((100.0, "cpu"), (300.0, "cpu"), (20.0, "gpu"), (40.0, "gpu"))
  ]
  # A record from before platforms were recorded counts as the CPU's.
  cells.append({**_record("d", 500, "mlp", "tuned", 0.5), "seconds": 200.0})
  assert small_data.durations(cells) == [
    "- mlp tuned: 3 cells, 100–300 s (median 200 s)",
    "- mlp tuned on gpu: 2 cells, 20–40 s (median 30 s)",
  ]


def test_merge_keeps_earlier_cells_that_were_not_run_again():
  earlier = [_record("d", 250, "mlp", "tuned", 0.5), _record("d", 500, "mlp", "tuned", 0.6)]
  again = [_record("d", 500, "mlp", "tuned", 0.7), _record("d", 500, "dmf", "tuned", 0.8)]
  merged = small_data.merge(again, earlier)
  assert [(r["size"], r["method"], r[small_data.METRIC]) for r in merged] == [
    (250, "mlp", 0.5),
    (500, "mlp", 0.7),
    (500, "dmf", 0.8),
  ]


def test_linear_model_on_the_validation_split_picks_the_best_validation_setting(data_dir, caplog):
  # From 2,000 training rows the selection is on the validation split: the oracle fits
  # every (C, scaling) directly and keeps the best validation example-F1.
  from sklearn import preprocessing  # pylint: disable=g-import-not-at-top
  from sklearn.linear_model import LogisticRegression  # pylint: disable=g-import-not-at-top

  ds = data.load_dataset("yeast", data_dir=data_dir, feature_scaling="none", num_train=150)
  keep = np.arange(5)  # five labels keep it quick
  ds = types.SimpleNamespace(
    **{
      name: data.Split(part.x, part.y[:, keep])
      for name, part in (("train", ds.train), ("validation", ds.validation), ("test", ds.test))
    }
  )
  space = {"loss.l2_c": (0.01, 1.0), "data.feature_scaling": ("none", "zscore")}
  with caplog.at_level("INFO"):
    result = br_tuned_vs_sklearn.sklearn_tuned_br(ds, None, space)
  # One progress line a setting, the last naming the whole grid.
  progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("linear model")]
  assert len(progress) == 4 and progress[-1].startswith("linear model 4/4: C=1, scaling zscore")
  scores = {}
  for c in space["loss.l2_c"]:
    for scaling in space["data.feature_scaling"]:
      scaler = (
        preprocessing.StandardScaler()
        if scaling == "zscore"
        else preprocessing.FunctionTransformer()
      ).fit(ds.train.x)
      probs = np.stack(
        [
          LogisticRegression(C=c, max_iter=5000)
          .fit(scaler.transform(ds.train.x), ds.train.y[:, j])
          .predict_proba(scaler.transform(ds.validation.x))[:, 1]
          for j in range(len(keep))
        ],
        1,
      )
      threshold = metrics.tune_threshold(ds.validation.y, probs)
      scores[(c, scaling)] = metrics.example_f1(ds.validation.y, probs >= threshold)
  best = max(scores, key=scores.get)
  assert (result["chosen"]["C"], result["chosen"]["scaling"]) == best
  assert result["value"] == pytest.approx(scores[best])
  # Labels fitted by two processes (two groups of labels): the same models.
  assert br_tuned_vs_sklearn.sklearn_tuned_br(ds, None, space, jobs=2) == result


def _example_f1_by_hand(y, predicted):
  """Mean over rows of 2|y ∧ ŷ| / (|y| + |ŷ|), an empty gold and prediction scoring 1."""
  both, sizes = (y * predicted).sum(1), y.sum(1) + predicted.sum(1)
  return float(np.mean([1.0 if n == 0 else 2 * b / n for b, n in zip(both, sizes)]))


def test_label_prior_is_the_training_frequencies_thresholded_on_validation(data_dir, tmp_path):
  from sklearn.dummy import DummyClassifier  # pylint: disable=g-import-not-at-top

  cell = small_data.Cell("yeast", 60, small_data.PRIOR, "tuned")
  record = small_data.run_cell(cell, str(tmp_path), str(data_dir))
  with open(tmp_path / cell.name / "results.json") as f:
    results = json.load(f)
  ds = data.load_dataset("yeast", data_dir=data_dir, feature_scaling="none", num_train=60)
  assert record["num_train"] == 60 and record["platform"] == "cpu"
  # scikit-learn's prior: each label's frequency in the 60 rows, whatever the features.
  dummy = DummyClassifier(strategy="prior").fit(ds.train.x, ds.train.y)
  prior = np.array(
    [
      dict(zip(classes, p[0])).get(1, 0.0)  # a label no kept row has: one class only
      for classes, p in zip(dummy.classes_, dummy.predict_proba(ds.test.x[:1]))
    ]
  )
  assert 0 < (prior == 0).sum() < len(prior)  # the rare labels no row of the 60 has
  # The threshold that is best on validation over the grid (ties: the one nearest 0.5),
  # the one label set it selects scored on every test row.
  grid = np.round(np.arange(0.05, 0.951, 0.05), 2)
  value = lambda y, t: _example_f1_by_hand(y, np.broadcast_to(prior >= t, y.shape))
  best = max(grid, key=lambda t: (round(value(ds.validation.y, t), 9), -abs(t - 0.5)))
  assert results["threshold"] == pytest.approx(best)
  assert record[small_data.METRIC] == pytest.approx(value(ds.test.y, best), abs=1e-6)
  assert record["validation/example_f1"] == pytest.approx(value(ds.validation.y, best), abs=1e-6)


def test_a_finished_cell_is_read_back_only_under_the_overrides_it_ran_with(data_dir, tmp_path):
  cell = small_data.Cell("yeast", 60, small_data.PRIOR, "tuned")
  directory = str(tmp_path / cell.name)
  small_data.run_cell(cell, str(tmp_path), str(data_dir), ("data.split_seed=3",))
  with open(os.path.join(directory, "results.json")) as f:
    results = json.load(f)
  assert results[small_data.OVERRIDES_KEY] == ["data.split_seed=3"]
  small_data.check_finished([(directory, ["data.split_seed=3"])])
  small_data.check_finished([(str(tmp_path / "unfinished"), ["data.split_seed=4"])])
  with pytest.raises(
    small_data.cli.UserError,
    match=r"n60/label_prior_tuned finished with overrides \['data.split_seed=3'\], not "
    r"\['data.split_seed=4'\]: use another --workdir",
  ):
    small_data.check_finished([(directory, ["data.split_seed=4"])])
  with pytest.raises(
    small_data.cli.UserError, match=r"with overrides \['data.split_seed=3'\], not \[\]"
  ):
    small_data.check_finished([(directory, [])])
  # A cell finished before the overrides were recorded is taken as it is.
  del results[small_data.OVERRIDES_KEY]
  with open(os.path.join(directory, "results.json"), "w") as f:
    json.dump(results, f)
  small_data.check_finished([(directory, ["data.split_seed=4"])])


def test_cell_config_is_the_committed_config_with_the_by_path_budget(data_dir):
  tuned = small_data.cell_config(
    small_data.Cell("yeast", 500, "mlp", "tuned"), str(data_dir), ["train.steps=7", "tune.trials=2"]
  )
  mulan = configuration.get_config("mlp", "mulan").tune
  assert tuned.data.name == "yeast" and tuned.data.num_train == 500
  assert tuned.train.steps == 7
  assert tuned.tune.enabled and tuned.tune.trials == 2 and tuned.tune.folds == mulan.folds
  default = small_data.cell_config(
    small_data.Cell("yeast", 0, "spen_ssvm", "default"), str(data_dir)
  )
  assert not default.tune.enabled and default.data.num_train == 0
  assert default.to_dict() | {"tune": None} == configuration.get_config(
    "spen_ssvm", "yeast", [f"data.data_dir={data_dir}"]
  ).to_dict() | {"tune": None}


@pytest.mark.parametrize(
  "modes", [("default",), pytest.param(("default", "tuned"), marks=pytest.mark.slow)]
)
def test_smoke_run_writes_every_cell_and_resumes(data_dir, tmp_path, modes):
  workdir = str(tmp_path / "runs")
  overrides = ("train.steps=4", "train.eval_every=2", "tune.trials=2", "tune.folds=2")
  all_cells = small_data.cells(["yeast"], [60, 100000], ["mlp"], modes)
  records = small_data.run(all_cells, workdir, str(data_dir), overrides=overrides)
  # The size yeast does not have is left out.
  assert [(r["size"], r["method"], r["mode"]) for r in records] == [
    (60, small_data.LINEAR, "tuned")
  ] + [(60, "mlp", mode) for mode in modes]
  assert all(r["num_train"] == 60 for r in records)
  assert {r["platform"] for r in records} == {"cpu"}
  if "tuned" in modes:
    with open(os.path.join(workdir, "yeast", "n60", "mlp_tuned", "results.json")) as f:
      tuned = json.load(f)
    assert tuned["meta"]["tuning"]["folds"] == 2
    assert tuned["meta"]["tuning"]["num_trials"] == 2
    assert tuned["meta"]["dataset_meta"]["train_subset"]["kept"] == 60
  linear = records[0]
  assert set(linear["chosen"]) == {"C", "scaling"}
  # A rerun reads every finished cell instead of training it again.
  stamps = {
    r["method"] + r["mode"]: os.path.getmtime(
      os.path.join(workdir, "yeast", "n60", f"{r['method']}_{r['mode']}", "results.json")
    )
    for r in records
  }
  again = small_data.run(all_cells, workdir, str(data_dir), overrides=overrides)
  assert [r[small_data.METRIC] for r in again] == [r[small_data.METRIC] for r in records]
  assert stamps == {
    r["method"] + r["mode"]: os.path.getmtime(
      os.path.join(workdir, "yeast", "n60", f"{r['method']}_{r['mode']}", "results.json")
    )
    for r in again
  }
  # A report of the finished cells trains nothing, not even the missing ones.
  only = small_data.run(
    all_cells + small_data.cells(["yeast"], [70], ["mlp"], ["default"]),
    workdir,
    str(data_dir),
    overrides=overrides,
    report_only=True,
  )
  assert only == again
  report = small_data.report(records)
  assert "| yeast | 60 |" in report
  small_data.plot(records, str(tmp_path / "small.png"))
  assert os.path.getsize(tmp_path / "small.png") > 1000

"""The tuner (experiments/tune.py) and the loaders' feature scaling."""

import json
import os
import pathlib

import jax
from jax.experimental.compilation_cache import compilation_cache as compilation_cache_lib
import numpy as np
import pytest
from sklearn import preprocessing

from energynets import data
from energynets.data import splits
from experiments import builders
from experiments import cli
from experiments import configuration
from experiments import search
from experiments import search_spaces
from experiments import stage_reuse
from experiments import tasks
from experiments import train
from experiments import trials
from experiments import tune
from experiments import workdirs
from experiments.configs import base

SHARED_YEAST = pathlib.Path(os.environ.get("ENERGYNETS_DATA_DIR", "")) / "yeast"


def _write_mulan(
  folder: pathlib.Path, num_train: int = 90, num_test: int = 30, seed: int = 0
) -> pathlib.Path:
  """A dense MULAN folder: 6 features on very different scales, 3 labels that are
  noisy linear functions of them."""
  rng = np.random.default_rng(seed)
  n = num_train + num_test
  x = rng.normal(size=(n, 6)) * np.array([1.0, 10.0, 0.1, 100.0, 1.0, 5.0]) + 3.0
  z = (x - x.mean(0)) / x.std(0)
  logits = z @ rng.normal(size=(6, 3)) * 2
  y = (logits + rng.normal(size=logits.shape) > 0).astype(int)
  return write_mulan_arrays(folder, x, y, num_train)


def write_mulan_arrays(folder: pathlib.Path, x, y, num_train: int) -> pathlib.Path:
  """A MULAN folder (toy-train.arff, toy-test.arff, toy.xml) of numeric features `x` and
  0/1 labels `y`, the first `num_train` rows for training."""
  n = len(x)
  folder.mkdir(parents=True, exist_ok=True)
  header = "@relation toy\n" + "".join(f"@attribute f{i} numeric\n" for i in range(x.shape[1]))
  header += "".join(f"@attribute l{j} {{0,1}}\n" for j in range(y.shape[1])) + "@data\n"
  for name, rows in (("train", range(num_train)), ("test", range(num_train, n))):
    lines = [",".join([*(f"{v:.6g}" for v in x[i]), *(str(b) for b in y[i])]) for i in rows]
    (folder / f"toy-{name}.arff").write_text(header + "\n".join(lines) + "\n")
  (folder / "toy.xml").write_text(
    '<?xml version="1.0" encoding="utf-8"?>\n<labels xmlns="http://mulan.sourceforge.net/'
    'labels">' + "".join(f'<label name="l{j}"></label>' for j in range(y.shape[1])) + "</labels>\n"
  )
  return folder


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
  return _write_mulan(tmp_path_factory.mktemp("toy"))


@pytest.mark.parametrize(
  "scaling, oracle",
  [
    ("zscore", preprocessing.StandardScaler),
    ("maxabs", preprocessing.MaxAbsScaler),
    ("none", None),
  ],
)
def test_feature_scaling_matches_sklearn_fit_on_train(toy, scaling, oracle):
  raw = data.load_dataset(toy, feature_scaling="none")
  scaled = data.load_dataset(toy, feature_scaling=scaling)
  assert scaled.meta["preprocessing"]["feature_scaling"]["applied"] == scaling
  for name in ("train", "validation", "test"):
    expected = getattr(raw, name).x
    if oracle is not None:
      expected = oracle().fit(raw.train.x.astype(np.float64)).transform(expected)
    np.testing.assert_allclose(getattr(scaled, name).x, expected, rtol=1e-5, atol=1e-5)
  # The statistics come from the train split alone: a scaler fit on all rows differs.
  if oracle is not None:
    everything = np.concatenate([raw.train.x, raw.validation.x, raw.test.x])
    assert not np.allclose(oracle().fit(everything).transform(raw.test.x), scaled.test.x, atol=1e-4)


def test_auto_scaling_is_the_loaders_previous_rule(toy):
  auto = data.load_dataset(toy)
  assert auto.meta["preprocessing"]["feature_scaling"]["applied"] == "zscore"
  assert auto.meta["preprocessing"]["standardize"]["applied"]
  zscore = data.load_dataset(toy, feature_scaling="zscore")
  np.testing.assert_array_equal(auto.train.x, zscore.train.x)
  with pytest.raises(ValueError, match="feature_scaling"):
    data.load_dataset(toy, feature_scaling="minmax")


def test_training_folds_partition_the_training_rows():
  folds = tune.fold_indices(103, 5, seed=3)
  assert len(folds) == 5 and {len(f) for f in folds} == {20, 21}
  np.testing.assert_array_equal(np.sort(np.concatenate(folds)), np.arange(103))
  np.testing.assert_array_equal(
    np.concatenate(folds), np.concatenate(tune.fold_indices(103, 5, seed=3))
  )  # seeded
  with pytest.raises(ValueError):
    splits.training_folds(3, 5, seed=0)


def test_search_spaces_grid_and_draws():
  space = {"a": (1, 2, 3), "b": ("x", "y")}
  assert len(search_spaces.grid(space)) == search_spaces.grid_size(space) == 6
  assert search_spaces.parse(["loss.l2_c=0.1,1", "data.feature_scaling=none,maxabs"]) == {
    "loss.l2_c": (0.1, 1),
    "data.feature_scaling": ("none", "maxabs"),
  }
  assert "loss.l2_c" in search_spaces.for_config("br", "mulan")
  assert search_spaces.for_config("experiments/configs/br.py:mulan", "mulan") == (
    search_spaces.for_config("br", "mulan")
  )
  assert search_spaces.for_config("crf", "bibtex") == search_spaces.DEFAULT


def test_unknown_search_key_is_a_user_error(toy):
  config = configuration.get_config("br", "mulan", [f"data.path={toy}"])
  with pytest.raises(cli.ConfigKeyError, match="loss.l2_cc"):
    tune.tune(config, "/nonexistent", space={"loss.l2_cc": (1.0,)})


def test_tuner_selects_on_held_out_training_rows_only(toy, tmp_path, monkeypatch):
  raw = data.load_dataset(toy, feature_scaling="none")
  train_rows = {r.tobytes() for r in raw.train.x}
  events = []
  fit_held_out = tune.fit_held_out

  def spy_fit(config, dataset, workdir):
    # Every trial sees no test row, and trains and scores on disjoint training rows
    # (unscaled here: the space's scaling is 'none').
    assert dataset.test.num_examples == 0
    for split in (dataset.train, dataset.validation):
      assert {r.tobytes() for r in split.x} <= train_rows
    assert not {r.tobytes() for r in dataset.validation.x} & {r.tobytes() for r in dataset.train.x}
    events.append("trial")
    return fit_held_out(config, dataset, workdir)

  multilabel_results = tasks.MULTILABEL.results

  def spy_results(dataset, predictions):
    events.append("test")
    assert dataset.test.num_examples == raw.test.num_examples
    return multilabel_results(dataset, predictions)

  monkeypatch.setattr(trials, "fit_held_out", spy_fit)
  # The only test evaluation of a multi-label run is its task's `results`.
  monkeypatch.setattr(tasks, "MULTILABEL", tasks.MULTILABEL._replace(results=spy_results))
  config = configuration.get_config(
    "br",
    "mulan",
    [
      f"data.path={toy}",
      "train.steps=40",
      "train.eval_every=20",
      "train.batch_size=32",
      "loss.l2_c=0.01",  # the config's own setting, trial 0, is the grid's first point
      "data.feature_scaling=none",
    ],
  )
  space = {"loss.l2_c": (0.01, 10.0), "data.feature_scaling": ("none",)}
  result = tune.tune(config, tmp_path, space=space, folds=2, prune=False)
  # 2 settings × 2 folds, then the refit's one test evaluation.
  assert events == ["trial"] * 4 + ["test"]
  records = [json.loads(line) for line in (tmp_path / "trials.jsonl").read_text().splitlines()]
  assert len(records) == 2 and all(len(r["folds"]) == 2 for r in records)
  for r in records:  # a trial's value: the best step of the mean held-out curve
    curve = np.mean([f["values"] for f in r["folds"]], axis=0)
    assert r["value"] == pytest.approx(curve.max())
    assert r["selected_step"] == r["folds"][0]["steps"][int(np.argmax(curve))]
  best = max(records, key=lambda r: r["value"])
  chosen = json.loads((tmp_path / "chosen.json").read_text())
  assert chosen["trial"] == best["trial"] == max(range(2), key=lambda i: (records[i]["value"], -i))
  # The final run trains the config's 40 steps and selects its own step on validation.
  assert chosen["overrides"] == best["params"]
  results = json.loads((tmp_path / "results.json").read_text())
  assert results["meta"]["config"]["train"]["steps"] == 40
  assert results["meta"]["config"]["train"]["eval_every"] == 20
  assert results["meta"]["config"]["train"]["select_metric"] == search.REPORTED_METRIC
  assert results["meta"]["config"]["loss"]["l2_c"] == best["params"]["loss.l2_c"]
  assert results["meta"]["tuning"]["trial"] == best["trial"]
  assert 0 <= results["test/example_f1"] <= 1 and result.chosen == chosen["overrides"]


def test_schedule_steps_stops_a_run_partway_through_a_longer_schedule(toy):
  """5 steps with `train.schedule_steps=50` are the first 5 steps of a 50-step run;
  5 steps of a 5-step cosine schedule are not."""

  def state_after_5_steps(*overrides):
    config = configuration.get_config(
      "mlp",
      "mulan",
      [f"data.path={toy}", "optimizer.learning_rate=0.01", "model.hidden=(8,)", *overrides],
    )
    dataset = tasks.task_for(config).load(config)
    objective = builders.build_objective(config, dataset)
    batch = {"x": dataset.train.x[:16], "y": dataset.train.y[:16]}
    state = objective.init(jax.random.key(0), batch)
    for i in range(5):
      state, _ = objective.update(state, batch, jax.random.key(i))
    return jax.tree_util.tree_leaves(state)

  fifty = state_after_5_steps("train.steps=50")
  stopped = state_after_5_steps("train.steps=5", "train.schedule_steps=50")
  compressed = state_after_5_steps("train.steps=5")
  for a, b in zip(fifty, stopped, strict=True):
    np.testing.assert_array_equal(a, b)
  assert not all(np.array_equal(a, b) for a, b in zip(fifty, compressed, strict=True))


def test_a_run_recorded_before_schedule_steps_resumes_on_its_own_schedule_only():
  recorded = {"train": {"steps": 10}}
  now = lambda span: {"train": {"steps": 10, "schedule_steps": span}}
  assert workdirs.config_changes(recorded, now(0)) == []
  assert workdirs.config_changes(recorded, now(50)) == ["train.schedule_steps (0 -> 50)"]


def test_validation_split_selection_reruns_the_chosen_setting(toy, tmp_path):
  config = configuration.get_config(
    "br",
    "mulan",
    [
      f"data.path={toy}",
      "train.steps=20",
      "train.eval_every=20",
      "train.batch_size=32",
      "data.feature_scaling=maxabs",
    ],
  )
  space = {"data.feature_scaling": ("maxabs", "zscore")}
  result = tune.tune(config, tmp_path, space=space, folds=1)
  validation = data.load_dataset(toy).validation.num_examples
  assert [t["params"] for t in result.trials] == [
    {"data.feature_scaling": s} for s in space["data.feature_scaling"]
  ]
  assert {t["folds"][0]["num_held_out"] for t in result.trials} == {validation}
  assert result.folds == 1
  chosen = result.chosen["data.feature_scaling"]
  meta = result.results["meta"]
  assert meta["dataset_meta"]["preprocessing"]["feature_scaling"]["applied"] == chosen
  assert meta["config"]["train"]["steps"] == 20


def test_a_space_of_one_setting_trains_no_trial(toy, tmp_path, monkeypatch):
  from experiments import train  # pylint: disable=g-import-not-at-top

  config = configuration.get_config(
    "br",
    "mulan",
    [
      f"data.path={toy}",
      "train.steps=20",
      "train.eval_every=10",
      "train.batch_size=32",
      "train.tensorboard=False",
      "data.feature_scaling=maxabs",
    ],
  )

  def no_trials(*args, **kwargs):
    raise AssertionError("a trial trained for a space of one setting")

  monkeypatch.setattr(search, "run_trials", no_trials)
  result = tune.tune(config, tmp_path / "tuned", space={"data.feature_scaling": ("maxabs",)})
  assert result.trials == [] and result.value is None
  assert result.chosen == {"data.feature_scaling": "maxabs"}
  chosen = json.loads((tmp_path / "tuned" / "chosen.json").read_text())
  assert chosen["num_trials"] == 0 and chosen["trial"] is None
  assert chosen["selection"].startswith("the space's one setting, without trials")
  # The final run is the config's own run, selecting its step on validation as every
  # tuned run does.
  alone = train.train_and_evaluate(
    configuration.with_overrides(config, search.selection_overrides(config)), tmp_path / "alone"
  )
  assert result.results["test/example_f1"] == alone["test/example_f1"]
  assert result.results["meta"]["selected_step"] == alone["meta"]["selected_step"]


def test_trial_overrides_apply_to_the_trials_not_to_the_final_run(toy, tmp_path):
  config = configuration.get_config(
    "br",
    "mulan",
    [
      f"data.path={toy}",
      "train.steps=6",
      "train.eval_every=6",
      "train.batch_size=32",
      "data.feature_scaling=none",
    ],
  )
  overrides = tune.trial_overrides(2, 7)
  assert overrides == {"train.eval_every": 2, "train.early_stopping_patience": 7}
  result = tune.tune(
    config,
    tmp_path,
    space={"data.feature_scaling": ("none", "maxabs")},
    folds=1,
    trial_overrides=overrides,
  )
  assert [trial["folds"][0]["steps"] for trial in result.trials] == [[2, 4, 6]] * 2
  meta = result.results["meta"]
  # The final run evaluates as often as the trials did (it may select any step they
  # could), its own patience kept in steps (20 evaluations 6 steps apart), not theirs.
  assert meta["config"]["train"]["eval_every"] == 2
  assert meta["config"]["train"]["early_stopping_patience"] == 60
  assert meta["tuning"]["budget"]["trial_overrides"] == overrides
  assert tune.trial_overrides(0, 0) == {}


def test_the_final_run_evaluates_as_often_as_the_trials_did(toy):
  config = configuration.get_config(
    "mlp", "mulan", [f"data.path={toy}", "train.eval_every=250", "train.steps=3000"]
  )
  selecting = {"train.select_metric": search.REPORTED_METRIC}
  assert search.final_run_overrides(config, tune.trial_overrides(50, 5)) == {
    **selecting,
    "train.eval_every": 50,
    "train.early_stopping_patience": 100,  # 20 evaluations 250 steps apart
  }
  assert search.final_run_overrides(config, tune.trial_overrides(300, 5)) == selecting
  assert search.final_run_overrides(config) == selecting
  tuned = configuration.with_overrides(
    config, search.final_run_overrides(config, {"train.eval_every": 70})
  )
  assert (tuned.train.eval_every, tuned.train.early_stopping_patience) == (70, 72)  # ≥ 5,000 steps


@pytest.mark.slow
def test_tuner_with_two_jobs_records_what_one_job_does(toy, tmp_path):
  config = configuration.get_config(
    "br",
    "mulan",
    [f"data.path={toy}", "train.steps=40", "train.eval_every=20", "train.batch_size=32"],
  )
  space = {"loss.l2_c": (0.1, 10.0), "data.feature_scaling": ("zscore", "maxabs")}
  one = tune.tune(config, tmp_path / "one", space=space, folds=3, jobs=1)
  two = tune.tune(config, tmp_path / "two", space=space, folds=3, jobs=2)
  strip = lambda records: [{k: v for k, v in r.items() if k != "seconds"} for r in records]
  assert json.loads(json.dumps(strip(one.trials))) == json.loads(json.dumps(strip(two.trials)))
  assert one.chosen == two.chosen


def test_pool_processes_run_host_linear_algebra_on_one_thread(monkeypatch):
  threadpoolctl = pytest.importorskip("threadpoolctl")
  monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
  monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
  with trials.single_threaded_processes(1, initializer=__import__, initargs=("numpy",)) as pool:
    libraries = pool.submit(threadpoolctl.threadpool_info).result()
  # numpy's BLAS is loaded in the worker, and every thread pool there has one thread.
  assert any(library["user_api"] == "blas" for library in libraries), libraries
  assert {library["num_threads"] for library in libraries} == {1}, libraries
  assert os.environ["OPENBLAS_NUM_THREADS"] == "4"
  assert "OMP_NUM_THREADS" not in os.environ


def test_pool_processes_share_an_accelerator(monkeypatch):
  monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
  with trials.single_threaded_processes(1) as pool:
    seen = pool.submit(os.getenv, "XLA_PYTHON_CLIENT_PREALLOCATE").result()
  # Each process takes device memory as it needs it, so several fit on one GPU.
  assert seen == "false"
  assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_YEAST.is_dir(), reason="needs shared/data/yeast")
def test_tuned_br_matches_tuned_sklearn_logistic_regression(tmp_path):
  from benchmarks import br_tuned_vs_sklearn  # pylint: disable=g-import-not-at-top

  ours, theirs, _ = br_tuned_vs_sklearn.compare(str(SHARED_YEAST), str(tmp_path), folds=5, jobs=2)
  assert abs(ours["test/example_f1"] - theirs["test/example_f1"]) <= 0.005


@pytest.mark.slow
def test_command_line_tunes_and_reports_user_errors_in_one_line(toy, tmp_path):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top

  base = [
    sys.executable,
    "-m",
    "experiments.tune",
    "--config=experiments/configs/br.py:mulan",
    f"--config.data.path={toy}",
    "--config.train.eval_every=20",
    "--folds=2",
  ]
  root = pathlib.Path(__file__).resolve().parents[1]
  done = subprocess.run(
    [
      *base,
      f"--workdir={tmp_path / 'ok'}",
      "--search=train.steps=40",
      "--search=loss.l2_c=0.1,1",
      "--search=data.feature_scaling=maxabs",
      "--trial_eval_every=10",
    ],
    cwd=root,
    capture_output=True,
    text=True,
    check=True,
  )
  chosen = json.loads((tmp_path / "ok" / "chosen.json").read_text())
  trial = [json.loads(line) for line in (tmp_path / "ok" / "trials.jsonl").open()][chosen["trial"]]
  assert chosen["overrides"] == trial["params"]
  assert set(trial["params"]) == {"loss.l2_c", "data.feature_scaling", "train.steps"}
  # The final run trains the chosen trial's step cap (6000: the config's own, or 40).
  results = json.loads((tmp_path / "ok" / "results.json").read_text())
  assert results["meta"]["config"]["train"]["steps"] == trial["params"]["train.steps"]
  assert chosen["budget"]["trial_overrides"] == {"train.eval_every": 10}
  # The config's own setting (l2_c 1, 6000 steps, 'auto' scaling) and the 2 grid points.
  assert chosen["num_trials"] == 3 and "\ntest/example_f1 " in done.stdout
  bad = subprocess.run(
    [*base, f"--workdir={tmp_path / 'bad'}", "--search=loss.l2cc=1"],
    cwd=root,
    capture_output=True,
    text=True,
  )
  assert bad.returncode == 2
  assert bad.stderr.strip().splitlines()[-1] == (
    "experiments.tune: error: search space: unknown config key loss.l2cc; did you mean loss.l2_c?"
  )


# Multi-label configs with a search space of their own beyond br and mlp.
NETWORK_SPACES = (
  "dvn",
  "seal_ranking",
  "dmf",
  "infnet",
  "implicit",
  "seal_dynamic",
  "seal_static",
  "spen_ssvm",
  "spen_gbi",
  "e2e",
)


def _tiny_config(name, toy, *extra):
  """`name`'s by-path config on the toy folder, every stage 2 steps, evaluated each."""
  config = configuration.get_config(name, "mulan", [f"data.path={toy}", *extra])
  stages = configuration.name_list(config.get("stage_order", "")) or ()
  return configuration.get_config(
    name,
    "mulan",
    [
      f"data.path={toy}",
      "train.steps=2",
      "train.eval_every=1",
      "train.batch_size=16",
      # A stage without its own step count trains the top level's.
      *(f"stages.{s}.train.steps=2" for s in stages if "steps" in config.stages[s].train),
      *extra,
    ],
  )


@pytest.mark.parametrize("name", NETWORK_SPACES)
def test_search_space_settings_apply_and_build(name, toy):
  from experiments import builders  # pylint: disable=g-import-not-at-top

  config = _tiny_config(name, toy)
  space = search_spaces.for_run(f"experiments/configs/{name}.py:mulan", config)
  assert space == search_spaces.for_run(name, config) != search_spaces.DEFAULT
  tune.check_tunable(config, space)
  points = search_spaces.grid(space)
  for params in (points[0], points[len(points) // 2], points[-1]):
    overrides = search_spaces.overrides(params)
    flat = configuration.flatten_dict(configuration.with_overrides(config, overrides).to_dict())
    assert all(flat[key] == value for key, value in overrides.items())
  # Each learning rate searched is the one its stage trains with.
  last = configuration.with_overrides(config, search_spaces.overrides(points[-1]))
  stages = dict(configuration.stage_configs(last))
  for key in (k for k in space if k.endswith("optimizer.learning_rate")):
    if key.startswith("stages."):
      trains_it = [key.split(".")[1]]
    else:
      trains_it = [s for s in stages if s not in configuration.stages_setting(last, key)]
    assert trains_it and all(
      stages[s].optimizer.learning_rate == points[-1][key] for s in trains_it
    ), key
  dataset = tasks.task_for(config).load(config)
  for _, stage_config in stages.items():
    builders.build_objective(stage_config, dataset)


# The config key that sizes the hidden layers a dropout key acts on.
_HIDDEN_OF_DROPOUT = {"model.dropout": "model.hidden", "energy.dropout": "energy.feature_hidden"}


@pytest.mark.parametrize("name", NETWORK_SPACES)
def test_searched_dropout_comes_with_the_networks_capacity(name):
  # Dropout acts on hidden layers only: a space that searches it searches the network's
  # hidden layers too, from none (a linear head) to several.
  for dataset in base.DATASETS:
    space = search_spaces.for_config(name, dataset)
    values = {k: v for key, v in space.items() for k in search_spaces.config_keys(key)}
    for key in (k for k in values if k.endswith(".dropout")):
      hidden = values[_HIDDEN_OF_DROPOUT[key]]
      assert () in hidden and max(len(h) for h in hidden) >= 2, (name, dataset, key)


def test_a_declared_space_leaves_out_the_stages_a_run_does_not_train(toy, monkeypatch):
  # dvn's space names the pretrain stage's learning rate; run in one stage, that key
  # would spend trials on a setting nothing trains with.
  staged = _tiny_config("dvn", toy)
  single = _tiny_config("dvn", toy, "stage_order=")
  assert "stages.pretrain.optimizer.learning_rate" in search_spaces.for_run("dvn", staged)
  space = search_spaces.for_run("dvn", single)
  declared = search_spaces.for_config("dvn", "mulan")
  assert space == {k: v for k, v in declared.items() if not k.startswith("stages.")}
  assert len(space) == len(declared) - 1
  tune.check_tunable(single, space)
  # A tie keeps the config keys of the stages the run trains.
  tied = {
    "optimizer.learning_rate|stages.pretrain.optimizer.learning_rate": (1e-3,),
    "stages.dvn.train.steps": (2,),
  }
  monkeypatch.setattr(search_spaces, "for_config", lambda name, dataset: tied)
  assert search_spaces.for_run("dvn", single) == {"optimizer.learning_rate": (1e-3,)}
  assert search_spaces.for_run("dvn", staged) == tied


def test_a_declared_space_leaves_out_a_key_every_trained_stage_sets_itself(toy, monkeypatch):
  # seal_dynamic's staged form trains both stages at their own learning rates: the
  # top-level rate, which its single stage trains with, would change nothing there.
  rate, pretrain_rate = "optimizer.learning_rate", "stages.pretrain.optimizer.learning_rate"
  single = _tiny_config("seal_dynamic", toy)
  staged = _tiny_config("seal_dynamic", toy, "stage_order=pretrain,seal")
  for config, kept, left_out in ((single, rate, pretrain_rate), (staged, pretrain_rate, rate)):
    space = search_spaces.for_run("seal_dynamic", config)
    assert kept in space and left_out not in space
    tune.check_tunable(config, space)
  # Without a stage key standing in for it, the top-level key stays (the stagewise search
  # takes it for the first stage).
  monkeypatch.setattr(search_spaces, "for_config", lambda name, dataset: {rate: (1e-3,)})
  assert search_spaces.for_run("seal_dynamic", staged) == {rate: (1e-3,)}


def test_searching_a_stage_the_run_does_not_train_is_a_user_error(toy):
  config = _tiny_config("dvn", toy, "stage_order=")
  with pytest.raises(cli.UserError, match="stage 'pretrain', which this run does not train"):
    tune.check_tunable(config, {"stages.pretrain.optimizer.learning_rate": (1e-3,)})


def test_searching_a_key_every_stage_sets_is_a_user_error(toy):
  config = _tiny_config("spen_ssvm", toy)
  with pytest.raises(cli.UserError, match="stages.<stage>.optimizer.learning_rate"):
    tune.check_tunable(config, {"optimizer.learning_rate": (1e-3,)})


def test_a_key_is_set_by_every_stage_only_when_each_trained_stage_sets_it(toy):
  rate = "optimizer.learning_rate"
  staged = _tiny_config("seal_dynamic", toy, "stage_order=pretrain,seal")
  assert configuration.set_by_every_stage(staged, rate)
  assert not configuration.set_by_every_stage(staged, "model.hidden")
  # One stage trained: its own block does not make the top-level key idle.
  assert not configuration.set_by_every_stage(_tiny_config("seal_dynamic", toy), rate)
  # dvn's later stage trains with the top-level rate.
  dvn = _tiny_config("dvn", toy)
  assert configuration.stages_setting(dvn, rate) and not configuration.set_by_every_stage(dvn, rate)


@pytest.mark.slow
@pytest.mark.parametrize("name", NETWORK_SPACES)
def test_search_space_trial_trains_every_stage(name, toy):
  config = _tiny_config(name, toy)
  space = search_spaces.for_run(name, config)
  dataset = trials.selection_data(
    tasks.task_for(config).load(
      configuration.with_overrides(config, {"data.feature_scaling": "none"})
    )
  )
  last = search_spaces.overrides(search_spaces.grid(space)[-1])
  record = tune.run_trial(config.to_dict(), dataset, None, 0, last)
  stages = configuration.name_list(config.get("stage_order", "")) or ("",)
  assert [s["stage"] for s in record["folds"][0]["stages"]] == list(stages)
  assert all(s["final_step"] == 2 for s in record["folds"][0]["stages"])
  # A continuing stage's step 0 is its starting state, which it may select.
  assert 0 <= record["value"] <= 1 and record["selected_step"] in (0, 1, 2)


@pytest.mark.slow
def test_staged_config_tunes_on_folds_and_reruns_the_chosen_setting(toy, tmp_path):
  config = _tiny_config("dmf", toy, "data.feature_scaling=maxabs")
  space = {
    "stages.pairwise.optimizer.learning_rate": (1e-3, 1e-2),
    "data.feature_scaling": ("maxabs",),
  }
  result = tune.tune(config, tmp_path, space=space, folds=2)
  assert len(result.trials) == 2 and result.folds == 2
  assert "train.steps" not in result.chosen  # every final run selects its own step
  assert result.metric == "validation/example_f1"  # the pairwise stage's
  stages = result.results["meta"]["stages"]
  assert [s["stage"] for s in stages] == ["pretrain", "pairwise"]
  assert (
    result.results["meta"]["config"]["stages"]["pairwise"]["optimizer"]["learning_rate"]
    == result.chosen["stages.pairwise.optimizer.learning_rate"]
  )
  assert 0 <= result.results["test/example_f1"] <= 1


def test_early_stopped_fold_ends_the_trial_curve(toy, monkeypatch):
  config = configuration.get_config(
    "br",
    "mulan",
    [f"data.path={toy}", "train.steps=6", "train.eval_every=1", "train.batch_size=16"],
  )
  dataset = trials.selection_data(data.load_dataset(toy))
  from energynets import train as train_lib  # pylint: disable=g-import-not-at-top
  from energynets.train import early_stopping  # pylint: disable=g-import-not-at-top

  curves = iter([[0.5, 0.6, 0.7, 0.8, 0.9, 0.95], [0.5, 0.6, 0.55, 0.55, 0.55, 0.55]])

  def fake_fit(config, dataset, workdir):
    values = next(curves)
    history = [{"step": i + 1, "validation/example_f1": v} for i, v in enumerate(values)]
    reason = early_stopping.stop_reason(history[:5], "validation/example_f1", patience=3)
    stop = 5 if reason else 6
    return [("", train_lib.FitResult(None, stop, 2, 0.6, history[:stop], reason))]

  monkeypatch.setattr(trials, "fit_held_out", fake_fit)
  record = tune.run_trial(config.to_dict(), dataset, [np.arange(0, 30), np.arange(30, 60)], 0, {})
  assert [f["final_step"] for f in record["folds"]] == [6, 5]
  assert record["folds"][1]["stop_reason"].startswith("early stopping")
  # The mean curve ends where the fold that stopped did: (0.9 + 0.55) / 2 at step 5.
  assert record["selected_step"] == 5 and record["value"] == pytest.approx(0.725)


TINY_MULAN = pathlib.Path(__file__).parent / "testdata" / "tiny_mulan"


def _tiny_by_path(tmp_path):
  """br by path on tests/testdata/tiny_mulan (9 training rows), a 2-point grid on 2
  folds, 4 steps: `(config, config file)`, the file declaring the grid."""
  config_file = tmp_path / "tiny_br.py"
  config_file.write_text(
    "from experiments.configs import br\n\n\n"
    "def get_config(dataset='mulan'):\n  return br.get_config(dataset)\n\n\n"
    "def get_search_space(dataset='mulan'):\n"
    "  return {'loss.l2_c': (0.1, 10.0), 'data.feature_scaling': ('none',)}\n"
  )
  config = configuration.get_config(
    "br",
    "mulan",
    [
      f"data.path={TINY_MULAN}",
      "train.steps=4",
      "train.eval_every=2",
      "train.tensorboard=False",
      "tune.folds=2",
      # The config's own setting, trial 0, is the grid's first point.
      "loss.l2_c=0.1",
      "data.feature_scaling=none",
    ],
  )
  return config, str(config_file)


@pytest.fixture
def compilation_cache(tmp_path):
  """JAX's persistent compilation cache in `tmp_path`, as experiments.main keeps it while
  it tunes (the folds and trials share compiled programs); JAX's setting is restored."""
  keys = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
  )
  saved = {key: getattr(jax.config, key) for key in keys}
  jax.config.update("jax_compilation_cache_dir", None)
  compilation_cache_lib.reset_cache()
  tune.use_compilation_cache(tmp_path / "xla_cache")
  yield
  for key, value in saved.items():
    jax.config.update(key, value)
  compilation_cache_lib.reset_cache()


@pytest.mark.usefixtures("compilation_cache")
def test_main_by_path_tunes_writes_a_loadable_run_and_resumes(tmp_path, monkeypatch):
  import energynets as en  # pylint: disable=g-import-not-at-top

  config, config_file = _tiny_by_path(tmp_path)
  assert config.tune.enabled  # the by-path default
  workdir = tmp_path / "run"
  results = tune.run_experiment(config, workdir, config_file=config_file)
  trial_lines = (workdir / "trials.jsonl").read_text()
  chosen = json.loads((workdir / "chosen.json").read_text())
  assert len(trial_lines.splitlines()) == 2 and chosen["folds"] == 2
  tuning = results["meta"]["tuning"]
  assert tuning["overrides"] == chosen["overrides"] and tuning["num_trials"] == 2
  assert tuning["budget"]["grid_size"] == 2 and tuning["seconds"] > 0
  on_disk = json.loads((workdir / "results.json").read_text())
  assert on_disk["meta"]["tuning"]["overrides"] == chosen["overrides"]
  assert on_disk["meta"]["config"]["loss"]["l2_c"] == chosen["overrides"]["loss.l2_c"]
  # The chosen run is at the workdir's root, as a plain run's.
  predictor = en.load_run(workdir)
  soft = predictor.predict(data.load_dataset(TINY_MULAN, feature_scaling="none").test.x)
  saved = np.load(workdir / "test_predictions.npz")["test"]
  np.testing.assert_allclose(soft, saved, rtol=1e-5, atol=1e-6)

  def no_trial(*args, **kwargs):
    raise AssertionError("a rerun searched again")

  monkeypatch.setattr(trials, "run_trial", no_trial)
  again = tune.run_experiment(config, workdir, config_file=config_file)
  assert (workdir / "trials.jsonl").read_text() == trial_lines
  assert again["test/example_f1"] == results["test/example_f1"]
  assert again["meta"]["tuning"]["overrides"] == chosen["overrides"]


def test_multi_process_run_refuses_the_search(tmp_path, monkeypatch):
  config, config_file = _tiny_by_path(tmp_path)
  monkeypatch.setattr(tune.jax, "process_count", lambda: 2)
  with pytest.raises(cli.UserError, match="--config.tune.enabled=False"):
    tune.run_experiment(config, tmp_path / "run", config_file=config_file)
  assert not (tmp_path / "run").exists()


def _tuned_run(directory: pathlib.Path, overrides: dict, config) -> pathlib.Path:
  """A finished tuned run's files in `directory`: chosen.json with `overrides`, and
  results.json recording `config` with them as the run's config."""
  directory.mkdir(parents=True, exist_ok=True)
  (directory / tune.CHOSEN_FILE).write_text(json.dumps({"overrides": overrides}))
  run = configuration.with_overrides(config, configuration.json_to_config(overrides))
  meta = {"config": json.loads(json.dumps(run.to_dict(), default=str))}
  (directory / "results.json").write_text(json.dumps({"meta": meta}))
  return directory


def test_a_search_from_a_tuned_run_pins_its_setting_in_the_first_stage(toy, tmp_path):
  config = _tiny_config("infnet", toy)
  space = search_spaces.for_config("infnet", "mulan")
  chosen = {
    "model.hidden": [8],
    "optimizer.learning_rate": 0.003,
    "loss.l2": 0.01,
    "data.feature_scaling": "maxabs",
  }
  source = _tuned_run(tmp_path / "mlp", chosen, _tiny_config("mlp", toy))
  started, pinned = stage_reuse.start_from_tuned(config, space, source)
  # The first stage sets its own learning rate: the chosen rate goes there, not to the
  # top level the later stage inherits; tied copies (the energy's feature network, the
  # inference network's L2) take the value with the key.
  assert started.stages.pretrain.optimizer.learning_rate == 0.003
  assert started.optimizer.learning_rate == config.optimizer.learning_rate
  assert started.model.hidden == started.energy.feature_hidden == (8,)
  assert started.loss.l2 == started.infnet.net_l2 == 0.01
  assert started.data.feature_scaling == "maxabs"
  assert pinned["model.hidden|energy.feature_hidden"] == ((8,),)
  assert pinned["stages.pretrain.optimizer.learning_rate"] == (0.003,)
  assert pinned["loss.l2|infnet.net_l2"] == (0.01,)
  assert pinned["data.feature_scaling"] == ("maxabs",)
  # What the source did not choose is searched as before: the later stage's rate, the
  # dropouts the source left at their defaults.
  for key in ("stages.infnet.optimizer.learning_rate", "model.dropout|energy.dropout"):
    assert pinned[key] == space[key]
  default = search_spaces.default_setting(started, pinned)
  assert default["model.hidden|energy.feature_hidden"] == (8,)


@pytest.mark.parametrize(
  "name,extra", [("infnet", ()), ("implicit", ()), ("dvn", ("stage_order=pretrain,dvn",))]
)
def test_a_start_from_a_tuned_mlp_sizes_the_energy_that_carries_it(toy, tmp_path, name, extra):
  # These configs' second stage carries the MLP into the energy as its local term, so a
  # tuned MLP's network must size the energy's feature network too; else the carry fails
  # at the final run, after the whole search.
  config = _tiny_config(name, toy, *extra)
  space = search_spaces.for_config(name, "mulan")
  chosen = {"model.hidden": [8], "model.dropout": 0.25, "optimizer.learning_rate": 0.003}
  chosen.update({"loss.l2": 0.01, "data.feature_scaling": "maxabs"})
  source = _tuned_run(tmp_path / "mlp", chosen, _tiny_config("mlp", toy))
  started, pinned = stage_reuse.start_from_tuned(config, space, source)
  assert started.model.hidden == started.energy.feature_hidden == (8,)
  assert started.model.dropout == started.energy.dropout == 0.25
  # The first stage trains at the MLP's rate; the later stage's rate is left to search
  # (dvn's stage takes the top-level rate, which must not be pinned to the MLP's).
  assert started.stages.pretrain.optimizer.learning_rate == 0.003
  searched = [k for k, values in pinned.items() if len(values) > 1]
  assert [k for k in searched if k.endswith("learning_rate")], pinned
  search.check_tunable(started, pinned)
  stage_reuse.check_start(started, source)
  results = train.train_and_evaluate(started, tmp_path / "run")
  names = [stage["stage"] for stage in results["meta"]["stages"]]
  assert names == list(configuration.name_list(started.stage_order))


def test_a_single_stage_space_key_the_first_stage_sets_becomes_that_stage_s(toy, tmp_path):
  # seal_dynamic's space searches the top-level learning rate, which both stages of its
  # staged form set: the search refuses it, and a start from a tuned MLP moves it.
  config = _tiny_config("seal_dynamic", toy, "stage_order=pretrain,seal")
  space = search_spaces.for_config("seal_dynamic", "mulan")
  with pytest.raises(cli.UserError, match="every stage sets optimizer.learning_rate itself"):
    search.check_tunable(config, space)
  # A stagewise search takes it for the first stage alone.
  search.check_tunable(config, space, first_stage_takes_shared=True)
  first_space = stage_reuse.first_stage_space(config, space)
  assert first_space["optimizer.learning_rate"] == space["optimizer.learning_rate"]
  chosen = {"optimizer.learning_rate": 0.003, "model.hidden": [8]}
  source = _tuned_run(tmp_path / "mlp", chosen, _tiny_config("mlp", toy))
  started, pinned = stage_reuse.start_from_tuned(config, space, source)
  assert "optimizer.learning_rate" not in pinned
  assert pinned["stages.pretrain.optimizer.learning_rate"] == (0.003,)
  assert started.stages.pretrain.optimizer.learning_rate == 0.003
  assert started.stages.seal.optimizer.learning_rate == config.stages.seal.optimizer.learning_rate
  search.check_tunable(started, pinned)
  stage_reuse.check_start(started, source)


def test_a_search_from_a_tuned_run_refuses_what_cannot_continue_it(toy, tmp_path):
  mlp = _tiny_config("mlp", toy)
  source = _tuned_run(tmp_path / "mlp", {"optimizer.learning_rate": 0.003}, mlp)
  space = search_spaces.for_config("dmf", "mulan")
  with pytest.raises(cli.UserError, match="trains one stage; .* needs a staged config"):
    stage_reuse.start_from_tuned(mlp, search_spaces.for_config("mlp", "mulan"), source)
  with pytest.raises(cli.UserError, match="is not a finished tuned run .*chosen.json"):
    stage_reuse.start_from_tuned(_tiny_config("dmf", toy), space, tmp_path / "nothing")
  bad = _tuned_run(tmp_path / "bad", {}, mlp)
  (bad / tune.CHOSEN_FILE).write_text(json.dumps({"overrides": {"model.hiden": [8]}}))
  with pytest.raises(cli.UserError, match="unknown config key model.hiden; did you mean"):
    stage_reuse.start_from_tuned(_tiny_config("dmf", toy), space, bad)
  # The first stage must be the source's run: here the source trained 2 steps and the
  # stage would train 3.
  dmf = _tiny_config("dmf", toy, "stages.pretrain.train.steps=3")
  started, _ = stage_reuse.start_from_tuned(dmf, space, source)
  with pytest.raises(cli.UserError, match=r"would not be the run in .*train.steps \(3 vs 2\)"):
    stage_reuse.check_start(started, source)
  started, _ = stage_reuse.start_from_tuned(_tiny_config("dmf", toy), space, source)
  stage_reuse.check_start(started, source)


@pytest.mark.parametrize(
  "name,base",
  [("dmf", "mlp"), ("seal_static", "mlp"), ("seal_ranking", "mlp"), ("dmf_soft_f1", "mlp_soft_f1")],
)
def test_the_first_stage_of_an_energy_on_the_mlp_is_the_mlp_s_search(name, base):
  # What makes a stagewise search of these configs by path the verdict's
  # `<name>_on_<base>` cell: the first stage alone is the base's config and space.
  config = configuration.get_config(name, "mulan")
  mlp = configuration.get_config(base, "mulan")
  first = stage_reuse.first_stage_config(config)
  assert stage_reuse.stage_mismatch(first, mlp.to_dict()) == []
  space = stage_reuse.first_stage_space(config, search_spaces.for_run(name, config))
  assert list(space.items()) == list(search_spaces.for_run(base, mlp).items())


STAGED_BY_PATH = (
  "dmf_soft_f1",
  "dvn",
  "e2e",
  "implicit",
  "infnet",
  "seal_ranking",
  "seal_static",
  "spen_ssvm",
)


def test_a_stagewise_search_refuses_a_bad_key_before_the_first_stage_trains(toy, tmp_path):
  space = {"model.hidden": ((), (8,)), "stages.pairwise.optimizer.learning_rat": (1e-3, 1e-2)}
  with pytest.raises(cli.ConfigKeyError, match="did you mean"):
    search.tune(_tiny_config("dmf", toy), tmp_path / "w", space=space, folds=2, stagewise=True)
  assert not (tmp_path / "w").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", STAGED_BY_PATH)
def test_every_staged_config_searches_stagewise_by_path(name, toy, tmp_path):
  config = _tiny_config(name, toy)
  assert config.tune.stagewise  # the by-path default
  space = search_spaces.for_run(name, config)
  result = search.tune(config, tmp_path, space=space, trials=2, folds=2, stagewise=True)
  first = json.loads((tmp_path / stage_reuse.FIRST_STAGE_DIR / "results.json").read_text())
  stages = result.results["meta"]["stages"]
  assert [s["stage"] for s in stages] == list(configuration.name_list(config.stage_order))
  assert stages[0]["best_value"] == first["validation/example_f1"]


def test_the_first_stage_space_keeps_the_keys_that_set_that_stage():
  config = configuration.get_config("dvn", "mulan")
  space = {
    "model.hidden|energy.feature_hidden": ((), (8,)),
    "stages.pretrain.optimizer.learning_rate": (1e-3, 3e-3),
    # dvn's `dvn` stage trains at the top-level rate; the pretrain stage sets its own.
    "optimizer.learning_rate": (1e-4, 1e-3),
    "stages.dvn.train.steps": (10, 20),
    "loss.l2": (0.0, 0.1),
  }
  assert stage_reuse.first_stage_space(config, space) == {
    "model.hidden|energy.feature_hidden": ((), (8,)),
    "optimizer.learning_rate": (1e-3, 3e-3),
    "loss.l2": (0.0, 0.1),
  }
  # A key every stage sets itself (a single-stage space on the staged form) is the
  # first stage's, as a start from a tuned run takes it.
  seal = configuration.get_config("seal_dynamic", "mulan", ["stage_order=pretrain,seal"])
  assert stage_reuse.first_stage_space(seal, {"optimizer.learning_rate": (1e-3,)}) == {
    "optimizer.learning_rate": (1e-3,)
  }
  with pytest.raises(cli.UserError, match="trains one stage"):
    stage_reuse.first_stage_space(configuration.get_config("mlp", "mulan"), space)


def test_a_stagewise_search_tunes_the_first_stage_then_starts_from_it(toy, tmp_path, monkeypatch):
  config = _tiny_config("dmf", toy, "model.hidden=()")  # the config's own setting in the grid
  space = {
    "model.hidden": ((), (8,)),
    "stages.pretrain.optimizer.learning_rate": (1e-3, 3e-2),
    "stages.pairwise.optimizer.learning_rate": (1e-3, 1e-2),
  }
  workdir = tmp_path / "dmf"
  kwargs = dict(space=space, folds=2, refit_dir=workdir, resume=True, stagewise=True)
  result = search.tune(config, workdir, **kwargs)
  first_dir = workdir / stage_reuse.FIRST_STAGE_DIR
  read = lambda path: json.loads(path.read_text())
  first, chosen = read(first_dir / "chosen.json"), read(workdir / "chosen.json")
  # The first stage alone over its own keys: the network and its learning rate, all
  # four settings of that grid, and a run of its own.
  assert first["search_space"] == {
    "model.hidden": [[], [8]],
    "optimizer.learning_rate": [1e-3, 3e-2],
  }
  assert first["num_trials"] == 4
  first_results = read(first_dir / "results.json")
  assert [s["stage"] for s in first_results["meta"]["stages"]] == [""]  # one stage
  # Then the later stage's rate alone, from that run: the first stage's choice pinned.
  assert chosen["start_from"] == str(first_dir) and chosen["num_trials"] == 2
  pretrain_lr = first["overrides"]["optimizer.learning_rate"]
  assert chosen["overrides"]["stages.pretrain.optimizer.learning_rate"] == pretrain_lr
  assert chosen["overrides"]["model.hidden"] == first["overrides"]["model.hidden"]
  assert chosen["search_space"]["stages.pretrain.optimizer.learning_rate"] == [pretrain_lr]
  # The final run's first stage is that run's checkpoints: the result never ends below
  # it on validation.
  stages = result.results["meta"]["stages"]
  assert stages[0]["stage"] == "pretrain"
  assert stages[0]["best_value"] == first_results["validation/example_f1"]
  assert result.results["validation/example_f1"] >= first_results["validation/example_f1"]
  # A single-stage config has no first stage to search apart.
  mlp = _tiny_config("mlp", toy, "model.hidden=()")
  search.tune(mlp, tmp_path / "mlp", space={"model.hidden": ((), (8,))}, folds=2, stagewise=True)
  assert not (tmp_path / "mlp" / stage_reuse.FIRST_STAGE_DIR).exists()

  def no_trial(*args, **kwargs):
    raise AssertionError("a rerun searched again")

  monkeypatch.setattr(trials, "run_trial", no_trial)
  again = search.tune(config, workdir, **kwargs)
  assert again.results["test/example_f1"] == result.results["test/example_f1"]


def test_command_line_start_from_an_unfinished_run_is_a_one_line_error(toy, tmp_path):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top

  bad = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.tune",
      "--config=experiments/configs/dmf.py:mulan",
      f"--config.data.path={toy}",
      f"--workdir={tmp_path / 'dmf'}",
      f"--start_from={tmp_path / 'mlp'}",
    ],
    cwd=pathlib.Path(__file__).resolve().parents[1],
    capture_output=True,
    text=True,
  )
  assert bad.returncode == 2
  last = bad.stderr.strip().splitlines()[-1]
  assert last.startswith(f"experiments.tune: error: start_from: {tmp_path / 'mlp'} is not a")
  assert not (tmp_path / "dmf" / "trials.jsonl").exists()

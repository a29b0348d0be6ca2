"""The tuner's search (experiments/search.py): the config's own setting is trial 0, trials
and the final run select on the reported metric, capacity reaches the model, a bad
trial stops after its first fold, and a seed fixes the trials."""

import json
import pathlib

import jax
import numpy as np
import pytest
from test_tune import write_mulan_arrays

from experiments import builders
from experiments import configuration
from experiments import sampler
from experiments import search
from experiments import search_spaces
from experiments import tasks
from experiments import train
from experiments import trials
from experiments import tune


def _write_mulan(folder: pathlib.Path, n: int = 150, seed: int = 0) -> pathlib.Path:
  """A dense MULAN folder: 6 features, 3 labels, noisy linear functions of them."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 6))
  y = (x @ rng.normal(size=(6, 3)) * 2 + rng.normal(size=(n, 3)) > 0).astype(int)
  return write_mulan_arrays(folder, x, y, 120)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
  return _write_mulan(tmp_path_factory.mktemp("toy"))


def _config(name, toy, *extra):
  return configuration.get_config(
    name,
    "mulan",
    [
      f"data.path={toy}",
      "train.steps=200",
      "train.eval_every=50",
      "train.batch_size=32",
      "train.tensorboard=False",
      "data.feature_scaling=none",
      *extra,
    ],
  )


def test_the_default_is_trial_0_and_a_bad_trial_stops_after_one_fold(toy, tmp_path):
  # br's own learning rate (1e-2) is not among the candidates; lr=0 never learns.
  config = _config("br", toy)
  result = tune.tune(config, tmp_path, space={"optimizer.learning_rate": (0.0,)}, folds=3)
  default, crippled = result.trials
  assert default["trial"] == 0 and default["params"] == {"optimizer.learning_rate": 1e-2}
  assert crippled["value"] < default["value"]
  # Chosen: the config's own setting, never something its held-out score says is worse.
  assert result.chosen == {"optimizer.learning_rate": 1e-2}
  assert result.value == default["value"]
  # Successive halving: the bad setting stopped after its first fold (of 3).
  assert not default["pruned"] and default["folds_trained"] == 3
  assert crippled["pruned"] and crippled["folds_trained"] == 1
  assert 0 < crippled["steps_trained"] < default["steps_trained"]
  chosen = json.loads((tmp_path / "chosen.json").read_text())
  assert chosen["pruned"] == {"1": 1} and chosen["default"]["value"] == default["value"]
  assert chosen["budget"]["rungs"] == [1]
  # The default chosen, the tuned run is the untuned run selecting on the reported metric:
  # same steps, same checkpoint, same test score.
  untuned = train.train_and_evaluate(
    configuration.with_overrides(config, search.selection_overrides(config)), tmp_path / "untuned"
  )
  assert result.results["meta"]["selected_step"] == untuned["meta"]["selected_step"]
  assert result.results["test/example_f1"] == untuned["test/example_f1"]


def test_tuple_valued_hidden_layers_reach_the_model_and_selection_is_on_the_reported_metric(
  toy, tmp_path, monkeypatch
):
  built = []
  build_objective = builders.build_objective

  def spy(config, dataset):
    objective = build_objective(config, dataset)
    batch = {"x": dataset.train.x[:2], "y": dataset.train.y[:2]}
    state = objective.init(jax.random.key(0), batch)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(state)]
    kernels = [p for p in paths if "kernel" in p and "opt_state" not in p]
    built.append((tuple(config.model.hidden), len(kernels)))
    return objective

  monkeypatch.setattr(builders, "build_objective", spy)
  # mlp selects its checkpoints on example-F1 at 0.5 when it trains untuned.
  config = _config("mlp", toy, "model.hidden=(4,)", "train.steps=20", "train.eval_every=10")
  assert config.train.select_metric == "validation/example_f1@0.5"
  space = search_spaces.parse(["model.hidden=(),(8,)"])
  assert space == {"model.hidden": ((), (8,))}
  result = tune.tune(config, tmp_path, space=space, folds=2, prune=False)
  assert [r["params"]["model.hidden"] for r in result.trials] == [(4,), (), (8,)]
  # Each trial's network has its hidden layers: a linear head has one kernel.
  assert {(4,): 2, (): 1, (8,): 2} == dict(built)
  # Trials score, and the final run selects on, what results.json reports first.
  assert result.metric == search.REPORTED_METRIC == "validation/example_f1"
  assert all(r["metric"] == search.REPORTED_METRIC for r in result.trials)
  assert result.results["meta"]["config"]["train"]["select_metric"] == search.REPORTED_METRIC
  assert "test/example_f1" in result.results


def test_staged_selection_overrides_every_selecting_stage():
  config = configuration.get_config("seal_static", "mulan", ["data.path=x"])
  assert search.selection_overrides(config) == {
    "train.select_metric": search.REPORTED_METRIC,
    "stages.pretrain.train.select_metric": search.REPORTED_METRIC,
    "stages.task_net.train.select_metric": search.REPORTED_METRIC,
  }  # the loss_net stage selects nothing and keeps its final state


def _searched(seed, trials=8):
  space = {"a": (1, 2, 3), "b": ("x", "y", "z"), "c": ((), (4,), (4, 4))}
  found = sampler.Search(space, {"a": 1, "b": "w", "c": (4,)}, trials, seed)
  settings = []
  for i, setting in enumerate(found.settings()):
    record = {"trial": i, "value": setting["a"] / 3, "folds": [0], "pruned": False}
    found.keep_going(record)
    found.tell(record)
    settings.append(setting)
  return settings


def test_a_seed_fixes_the_trials_and_the_default_comes_first():
  settings = _searched(seed=0)
  assert settings == _searched(seed=0) and settings != _searched(seed=1)
  assert settings[0] == {"a": 1, "b": "w", "c": (4,)}  # not a grid point: one more trial
  assert len(settings) == 8 and len({repr(s) for s in settings}) == 8
  everything = _searched(seed=0, trials=0)  # the config's own setting, then the whole grid
  assert len(everything) == 1 + 27 and len({repr(s) for s in everything}) == 28


def test_capacity_is_in_every_network_space():
  spaces = {
    "mlp": "model.hidden",
    "dmf": "model.hidden",
    "infnet": "model.hidden|energy.feature_hidden",
    "implicit": "model.hidden|energy.feature_hidden",
    "seal_dynamic": "model.hidden",
    "seal_static": "model.hidden",
    "seal_ranking": "model.hidden",
    "spen_ssvm": "energy.feature_hidden",
    "spen_gbi": "energy.feature_hidden",
    "e2e": "energy.feature_hidden",
    "dvn": "model.hidden|energy.feature_hidden",
  }
  for name, hidden in spaces.items():
    space = search_spaces.for_config(name, "mulan")
    assert () in space[hidden] and (1024, 1024) in space[hidden], name
    group = hidden.split(".")[0]
    assert any(k.startswith(f"{group}.input_dropout") for k in space), name
    # L2 reaches what a linear model's folds choose at 250 rows (scikit-learn's C of
    # 0.01-0.04 on yeast and cal500; the loss's l2 is 1 / (C · rows)) and none.
    (l2_key,) = [k for k in space if "loss.l2" in search_spaces.config_keys(k)]
    assert 0.0 in space[l2_key] and max(space[l2_key]) >= 1 / (0.04 * 250), name
    # A staged method searches its first stage's learning rate: the MLP's own setting.
    config = configuration.get_config(name, "mulan", ["data.path=x"])
    if configuration.name_list(config.get("stage_order", "")):
      assert "stages.pretrain.optimizer.learning_rate" in space or (
        "optimizer.learning_rate" in space
      ), name


@pytest.mark.parametrize("name", ["infnet", "implicit"])
def test_a_searched_l2_reaches_the_nets_that_copy_it(name):
  # These configs copy `loss.l2` into the inference nets' L2 when built; a trial's L2
  # overrides the built config, so the copy must be searched with it.
  config = configuration.get_config(name, "mulan", ["data.path=x"])
  space = search_spaces.for_config(name, "mulan")
  (key,) = [k for k in space if "loss.l2" in search_spaces.config_keys(k)]
  for l2 in space[key]:
    trial = configuration.with_overrides(config, search_spaces.overrides({key: l2}))
    assert trial.loss.l2 == trial[name].net_l2 == l2, (name, l2)


@pytest.mark.slow
def test_folds_trained_apart_give_the_record_of_the_folds_trained_together(toy):
  config = configuration.get_config(
    "dmf",
    "mulan",
    [f"data.path={toy}", "train.steps=4", "train.eval_every=2", "train.batch_size=16"]
    + [f"stages.{s}.train.steps=4" for s in ("pretrain", "pairwise")],
  )
  dataset = trials.selection_data(tasks.task_for(config).load(config))
  folds = trials.fold_indices(dataset.train.num_examples, 2, seed=0)
  together = trials.run_trial(config.to_dict(), dataset, folds, 0, {})
  apart = trials.merge_folds(
    [trials.run_trial(config.to_dict(), dataset, [f], 0, {}) for f in folds]
  )
  strip = lambda record: {k: v for k, v in record.items() if k != "seconds"}
  assert strip(apart) == strip(together)

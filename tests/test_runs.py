"""Runs as values on disk: run.json, `load_run` in a fresh process, `experiments.predict`,
and builders named by import path from code outside the repository."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import optax
import pytest

import energynets as en
from energynets.train import run as run_lib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = "enx_outside"  # the outside package this file writes; no such name is installed

OUTSIDE_BUILDERS = '''
"""An energynets extension that lives outside the repository."""
import optax
import energynets as en


def tiny_bce(hidden, num_labels, learning_rate):
  return en.local_bce(en.MLP(tuple(hidden), num_labels), optax.adam(learning_rate))


def build(config, dataset, optimizer):
  return en.local_bce(en.MLP(tuple(config.model.hidden), dataset.num_labels), optimizer)


def make_energy(config, dataset):
  return en.SPENEnergy(num_labels=dataset.num_labels, feature_hidden=(), num_measurements=2)
'''

OUTSIDE_CONFIG = '''
"""An experiment config outside experiments/configs: the MLP config with an outside method."""
from experiments.configs import mlp


def get_config(dataset="synthetic"):
  config = mlp.get_config(dataset)
  config.method = "enx_outside.builders:build"
  config.model.hidden = (8,)
  return config
'''

# Small enough that every run here compiles and trains in seconds.
TINY = [
  "--config.data.num_train=256",
  "--config.train.steps=20",
  "--config.train.eval_every=10",
  "--config.train.log_every=10",
  "--config.train.tensorboard=False",
]


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> pathlib.Path:
  """A folder holding the package `enx_outside`, importable here while the tests run."""
  root = tmp_path_factory.mktemp("outside")
  (root / PACKAGE).mkdir()
  (root / PACKAGE / "__init__.py").write_text("")
  (root / PACKAGE / "builders.py").write_text(OUTSIDE_BUILDERS)
  (root / PACKAGE / "config.py").write_text(OUTSIDE_CONFIG)
  sys.path.insert(0, str(root))
  yield root
  sys.path.remove(str(root))
  for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
    del sys.modules[name]


def _env(outside_dir=None, **extra) -> dict:
  env = dict(os.environ, JAX_PLATFORMS="cpu", **extra)
  if outside_dir is not None:
    env["PYTHONPATH"] = os.pathsep.join(
      [str(outside_dir), str(REPO_ROOT), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
  return env


def _run(args, env, **kw) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, *args],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=600,
    env=env,
    **kw,
  )


def _error_line(proc: subprocess.CompletedProcess) -> str:
  """The last line of stderr, after checking it is the only line of the error."""
  assert proc.returncode != 0
  assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
  return proc.stderr.strip().splitlines()[-1]


# ---------------------------------------------------------------------------------------
# A run of `fit`.


@pytest.fixture(scope="module")
def fitted(outside, tmp_path_factory):
  """`fit` of a tiny BCE MLP on the synthetic task with a builder; its workdir, data and
  the in-process soft test predictions of the returned state."""
  import jax  # pylint: disable=g-import-not-at-top

  data = en.load_dataset("synthetic", num_train=256, num_validation=64, num_test=64)
  kwargs = {"hidden": [8], "num_labels": 16, "learning_rate": 1e-2}
  objective = en.train.run.import_path(f"{PACKAGE}.builders:tiny_bce")(**kwargs)
  mesh = en.make_mesh(1)
  predict = en.build_predict(objective, mesh)

  def evaluate(state):
    probs = en.predict_in_batches(predict, state, data.validation.x, 32, mesh)
    return {"validation/example_f1": en.example_f1(data.validation.y, probs >= 0.5)}

  workdir = tmp_path_factory.mktemp("fit") / "run"
  result = en.fit(
    objective,
    {"x": data.train.x, "y": data.train.y},
    en.LoopOptions(steps=30, batch_size=32, eval_every=10, log_every=10, tensorboard=False),
    str(workdir),
    validation=en.Validation(evaluate, data.validation.x, data.validation.y),
    mesh=mesh,
    builder=(f"{PACKAGE}.builders:tiny_bce", kwargs),
  )
  soft = np.asarray(jax.jit(objective.predict)(result.state, data.test.x))
  return workdir, data, result, soft


def test_fit_writes_run_json(fitted):
  workdir, data, result, _ = fitted
  record = json.loads((workdir / "run.json").read_text())
  assert record["format"] == run_lib.RUN_FORMAT and record["version"] == run_lib.RUN_VERSION
  assert record["arrays"]["x"] == {"shape": [64], "dtype": "float32"}
  assert record["arrays"]["y"] == {"shape": [16], "dtype": "float32"}
  assert record["checkpoint"] == {"directory": "best", "step": result.selected_step}
  assert (record["domain"], record["decoding"]) == ("box", "threshold")
  assert record["threshold_source"] == "validation"
  assert 0.05 <= record["threshold"] <= 0.95
  assert record["builder"]["path"] == f"{PACKAGE}.builders:tiny_bce"
  assert record["builder"]["kwargs"]["hidden"] == [8]


def test_fit_without_validation_records_the_default_threshold(outside, tmp_path):
  data = en.load_dataset("synthetic", num_train=64, num_validation=8, num_test=8)
  objective = en.train.run.import_path(f"{PACKAGE}.builders:tiny_bce")([], 16, 1e-2)
  en.fit(
    objective,
    {"x": data.train.x, "y": data.train.y},
    en.LoopOptions(steps=2, batch_size=16, select_metric=None, tensorboard=False),
    str(tmp_path),
  )
  record = run_lib.read_run(tmp_path)
  assert (record["threshold"], record["threshold_source"]) == (0.5, "default")
  assert record["builder"] is None and record["checkpoint"]["directory"] == "checkpoints"
  # Without a builder the objective is passed in.
  predictor = en.load_run(tmp_path, objective=objective)
  assert predictor.labels(data.test.x).shape == (8, 16)


@pytest.fixture(scope="module")
def fresh_process_predictions(fitted, outside):
  """`load_run` of the fit run in a new process with 2 CPU devices, on 1 and on 2."""
  workdir, data, _, _ = fitted
  inputs = workdir.parent / "inputs.npz"
  np.savez(inputs, x=data.test.x)
  out = workdir.parent / "fresh.npz"
  code = textwrap.dedent(f"""
      import jax, numpy as np, energynets as en
      assert jax.device_count() == 2
      x = np.load({str(inputs)!r})["x"]
      one, two = en.load_run({str(workdir)!r}, num_devices=1), en.load_run({str(workdir)!r})
      np.savez({str(out)!r}, one=one.predict(x), two=two.predict(x),
               labels=two.labels(x), threshold=two.threshold)
  """)
  proc = _run(
    ["-c", code],
    _env(
      outside,
      XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2",
    ),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  with np.load(out) as arrays:
    return dict(arrays)


def test_load_run_in_a_fresh_process_predicts_as_trained(fitted, fresh_process_predictions):
  _, _, _, soft = fitted
  got = fresh_process_predictions
  np.testing.assert_allclose(got["one"], soft, rtol=1e-5, atol=1e-6)
  threshold = float(got["threshold"])
  assert threshold == run_lib.read_run(fitted[0])["threshold"]
  np.testing.assert_array_equal(got["labels"], (got["two"] >= threshold).astype(np.int32))


def test_two_devices_predict_as_one(fresh_process_predictions):
  got = fresh_process_predictions
  np.testing.assert_allclose(got["two"], got["one"], rtol=1e-5, atol=1e-6)


def test_load_run_in_process_equals_the_returned_state(fitted):
  workdir, data, _, soft = fitted
  predictor = en.load_run(workdir)
  np.testing.assert_allclose(predictor.predict(data.test.x), soft, rtol=1e-5, atol=1e-6)
  assert predictor.metadata["builder"]["path"].endswith(":tiny_bce")
  with pytest.raises(ValueError, match=r"per-example shape \(3,\); the run was trained on"):
    predictor.predict(np.zeros((2, 3), np.float32))


def test_predict_cli_on_an_npz(fitted, outside):
  workdir, data, _, soft = fitted
  inputs, output = workdir.parent / "cli_inputs.npz", workdir.parent / "cli_out.npz"
  np.savez(inputs, x=data.test.x)
  proc = _run(
    [
      "-m",
      "experiments.predict",
      f"--workdir={workdir}",
      f"--input={inputs}",
      f"--output={output}",
    ],
    _env(outside),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  threshold = run_lib.read_run(workdir)["threshold"]
  with np.load(output) as arrays:
    np.testing.assert_allclose(arrays["y_soft"], soft, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(arrays["y_pred"], (arrays["y_soft"] >= threshold))


def test_predict_cli_on_a_mulan_folder(tmp_path, data_dir):
  """A MULAN folder as input: its test split, loaded as training loaded it."""
  proc = _run(
    [
      "-m",
      "experiments.main",
      "--config=experiments/configs/br.py:mulan",
      f"--config.data.path={data_dir / 'yeast'}",
      f"--workdir={tmp_path}",
      "--config.train.steps=20",
      "--config.train.eval_every=20",
      "--config.train.tensorboard=False",
      "--config.tune.enabled=False",
    ],
    _env(),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  proc = _run(
    [
      "-m",
      "experiments.predict",
      f"--workdir={tmp_path}",
      f"--input={data_dir / 'yeast'}",
      f"--output={tmp_path / 'out.npz'}",
    ],
    _env(),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  saved = np.load(tmp_path / "test_predictions.npz")["test"]
  with np.load(tmp_path / "out.npz") as arrays:
    assert arrays["y_soft"].shape == (917, 14)
    np.testing.assert_allclose(arrays["y_soft"], saved, rtol=1e-5, atol=1e-6)


def test_predict_cli_errors_are_one_line_and_write_nothing(fitted, outside, tmp_path):
  workdir, _, _, _ = fitted
  output = tmp_path / "out.npz"
  proc = _run(
    [
      "-m",
      "experiments.predict",
      f"--workdir={tmp_path / 'nothing'}",
      f"--input={tmp_path}",
      f"--output={output}",
    ],
    _env(outside),
  )
  assert _error_line(proc) == (
    f"experiments.predict: error: no run in {tmp_path / 'nothing'}: "
    "expected run.json written by energynets.fit or "
    "experiments.main"
  )
  np.savez(tmp_path / "bad.npz", features=np.zeros((2, 64), np.float32))
  proc = _run(
    [
      "-m",
      "experiments.predict",
      f"--workdir={workdir}",
      f"--input={tmp_path / 'bad.npz'}",
      f"--output={output}",
    ],
    _env(outside),
  )
  assert _error_line(proc) == (
    f"experiments.predict: error: --input={tmp_path / 'bad.npz'} "
    "has no array 'x' (it has ['features'])"
  )
  assert not output.exists() and not list(tmp_path.glob("*.partial"))


# ---------------------------------------------------------------------------------------
# load_run's errors: one line each, before any restoring.


def _one_line_error(excinfo) -> str:
  message = str(excinfo.value)
  assert "\n" not in message
  return message


def test_load_run_without_run_json(tmp_path):
  with pytest.raises(FileNotFoundError) as excinfo:
    en.load_run(tmp_path)
  assert _one_line_error(excinfo) == (
    f"no run in {tmp_path}: expected run.json written by energynets.fit or experiments.main"
  )


def test_load_run_of_another_format_version(fitted, tmp_path):
  record = json.loads((fitted[0] / "run.json").read_text())
  (tmp_path / "run.json").write_text(json.dumps(dict(record, version=0)))
  with pytest.raises(ValueError) as excinfo:
    en.load_run(tmp_path)
  assert isinstance(excinfo.value, en.train.RunFormatError)
  assert "has format version 0; this energynets reads version 1" in _one_line_error(excinfo)


def test_load_run_without_builder_or_objective(fitted, tmp_path):
  record = json.loads((fitted[0] / "run.json").read_text())
  (tmp_path / "run.json").write_text(json.dumps(dict(record, builder=None)))
  (tmp_path / "best" / str(record["checkpoint"]["step"])).mkdir(parents=True)
  with pytest.raises(ValueError) as excinfo:
    en.load_run(tmp_path)
  assert _one_line_error(excinfo) == (
    f"the run in {tmp_path} records no builder: pass load_run(workdir, objective=...) or "
    "train with fit(..., builder='package.module:function')"
  )


@pytest.mark.parametrize(
  "path,cause",
  [
    (
      "enx_missing.builders:build",
      "does not import: ModuleNotFoundError: No module named 'enx_missing'",
    ),
    (f"{PACKAGE}.builders:nope", f"module '{PACKAGE}.builders' has no attribute 'nope'"),
    ("no_colon", "is not an import path: expected 'package.module:function'"),
  ],
)
def test_load_run_with_a_builder_that_does_not_import(fitted, outside, tmp_path, path, cause):
  record = json.loads((fitted[0] / "run.json").read_text())
  record["builder"]["path"] = path
  (tmp_path / "run.json").write_text(json.dumps(record))
  (tmp_path / "best" / str(record["checkpoint"]["step"])).mkdir(parents=True)
  with pytest.raises(ValueError) as excinfo:
    en.load_run(tmp_path)
  assert _one_line_error(excinfo).startswith(f"builder {path!r}")
  assert cause in str(excinfo.value)


def test_fit_checks_its_builder_before_training(tmp_path):
  data = en.load_dataset("synthetic", num_train=64, num_validation=8, num_test=8)
  objective = en.local_bce(en.MLP((), 16), optax.sgd(0.1))
  with pytest.raises(en.train.BuilderError, match="'enx_missing.b:f' does not import"):
    en.fit(
      objective,
      {"x": data.train.x, "y": data.train.y},
      en.LoopOptions(steps=2, batch_size=16),
      str(tmp_path),
      builder="enx_missing.b:f",
    )
  assert not (tmp_path / "checkpoints").exists()


def _fit_with_builder(tmp_path, builder):
  """`fit` of the `tiny_bce(hidden=[8], num_labels=16)` objective with `builder`."""
  data = en.load_dataset("synthetic", num_train=64, num_validation=8, num_test=8)
  objective = en.train.run.import_path(f"{PACKAGE}.builders:tiny_bce")([8], 16, 1e-2)
  en.fit(
    objective,
    {"x": data.train.x, "y": data.train.y},
    en.LoopOptions(steps=2, batch_size=16, select_metric=None, tensorboard=False),
    str(tmp_path),
    builder=builder,
  )


def test_fit_refuses_a_builder_defined_in_main(outside, tmp_path):
  with pytest.raises(en.train.BuilderError) as excinfo:
    _fit_with_builder(tmp_path, "__main__:build")
  assert _one_line_error(excinfo) == (
    "builder '__main__:build' is defined in __main__, which a later process cannot "
    "import: move it to an importable module"
  )
  assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
  "kwargs,cause",
  [
    ({"hidden": [8], "num_labels": 16}, "missing a required argument: 'learning_rate'"),
    (
      {"hidden": [8], "num_labels": 16, "learning_rate": 0.01, "depth": 2},
      "got an unexpected keyword argument 'depth'",
    ),
  ],
)
def test_fit_refuses_kwargs_its_builder_does_not_take(outside, tmp_path, kwargs, cause):
  path = f"{PACKAGE}.builders:tiny_bce"
  with pytest.raises(en.train.BuilderError) as excinfo:
    _fit_with_builder(tmp_path, (path, kwargs))
  assert _one_line_error(excinfo) == (
    f"builder {path!r} cannot be called with the kwargs {sorted(kwargs)}: {cause}"
  )
  assert not (tmp_path / "checkpoints").exists()


def test_fit_refuses_a_builder_that_rebuilds_another_state(outside, tmp_path):
  path = f"{PACKAGE}.builders:tiny_bce"
  with pytest.raises(en.train.BuilderError) as excinfo:
    _fit_with_builder(tmp_path, (path, {"hidden": [4], "num_labels": 16, "learning_rate": 0.01}))
  assert _one_line_error(excinfo) == (
    f"builder {path!r} rebuilds another state than the one trained: "
    "state['net'].params['head']['kernel'] is float32[4, 16], trained float32[8, 16]"
  )
  assert not (tmp_path / "checkpoints").exists()


# ---------------------------------------------------------------------------------------
# Runs of experiments.main.


def test_experiments_main_run_loads_and_predicts(tmp_path):
  proc = _run(
    [
      "-m",
      "experiments.main",
      "--config=experiments/configs/mlp.py:synthetic",
      f"--workdir={tmp_path}",
      *TINY,
    ],
    _env(),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  record = run_lib.read_run(tmp_path)
  results = json.loads((tmp_path / "results.json").read_text())
  assert record["builder"]["path"] == "experiments.train:objective_from_run"
  assert record["threshold"] == results["threshold"]
  assert record["checkpoint"]["step"] == results["meta"]["selected_step"]
  # This process did not train the run: it restores the selected state from disk.
  predictor = en.load_run(tmp_path)
  test_x = en.load_dataset("synthetic", num_train=256).test.x
  saved = np.load(tmp_path / "test_predictions.npz")["test"]
  np.testing.assert_allclose(predictor.predict(test_x), saved, rtol=1e-5, atol=1e-6)


def test_objective_from_run_matches_the_trained_state_of_a_staged_run():
  """SEAL-static's last stage cannot `init` alone; the rebuilt objective's `init` goes
  through the stages, so it has the structure training ended with."""
  import jax  # pylint: disable=g-import-not-at-top

  from experiments import builders  # pylint: disable=g-import-not-at-top  # pylint: disable=g-import-not-at-top
  from experiments import configuration  # pylint: disable=g-import-not-at-top  # pylint: disable=g-import-not-at-top
  from experiments import runs  # pylint: disable=g-import-not-at-top  # pylint: disable=g-import-not-at-top
  from experiments import tasks  # pylint: disable=g-import-not-at-top  # pylint: disable=g-import-not-at-top

  config = configuration.get_config("seal_static", "synthetic", ["data.num_train=64"])
  task = tasks.task_for(config)
  dataset = task.load(config)
  batch = {
    "x": jax.ShapeDtypeStruct((4, 64), np.float32),
    "y": jax.ShapeDtypeStruct((4, 16), np.float32),
  }
  key, state = jax.random.PRNGKey(0), None
  for _, stage in configuration.stage_configs(config):
    objective = builders.build_objective(stage, dataset)
    state = (
      jax.eval_shape(objective.init, key, batch)
      if state is None
      else jax.eval_shape(objective.init_from, state, key, batch)
    )
  meta = json.loads(json.dumps(runs.run_dataset_metadata(task, dataset)))
  rebuilt = runs.objective_from_run(json.loads(json.dumps(config.to_dict())), meta)
  # Saved run.json files name it by the path RUN_BUILDER, which must keep resolving.
  assert run_lib.import_path(runs.RUN_BUILDER) is runs.objective_from_run
  again = jax.eval_shape(rebuilt.init, key, batch)
  assert jax.tree.structure(again) == jax.tree.structure(state)
  assert jax.tree.map(lambda a: a.shape, again) == jax.tree.map(lambda a: a.shape, state)


# ---------------------------------------------------------------------------------------
# Outside code through the CLI.


def test_outside_method_trains_through_main_and_predicts(outside, tmp_path):
  workdir = tmp_path / "run"
  proc = _run(
    [
      "-m",
      "experiments.main",
      "--config=experiments/configs/mlp.py:synthetic",
      f"--config.method={PACKAGE}.builders:build",
      "--config.model.hidden=(8,)",
      f"--workdir={workdir}",
      *TINY,
    ],
    _env(outside),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "test/example_f1" in json.loads((workdir / "results.json").read_text())
  record = run_lib.read_run(workdir)
  assert record["builder"]["kwargs"]["config"]["method"] == f"{PACKAGE}.builders:build"
  # The recorded builder rebuilds the outside objective in another process.
  x = en.load_dataset("synthetic", num_train=256).test.x
  np.savez(tmp_path / "x.npz", x=x)
  proc = _run(
    [
      "-m",
      "experiments.predict",
      f"--workdir={workdir}",
      f"--input={tmp_path / 'x.npz'}",
      f"--output={tmp_path / 'y.npz'}",
    ],
    _env(outside),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  saved = np.load(workdir / "test_predictions.npz")["test"]
  np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y_soft"], saved, rtol=1e-5, atol=1e-6)


def test_outside_energy_trains_through_main(outside, tmp_path):
  proc = _run(
    [
      "-m",
      "experiments.main",
      "--config=experiments/configs/spen_ssvm.py:synthetic",
      f"--config.energy.module={PACKAGE}.builders:make_energy",
      "--config.stage_order=joint",
      "--config.stages.joint.train.steps=10",
      "--config.gbi.num_steps=3",
      "--config.predict_gbi.max_steps=5",
      "--config.predict_gbi.entropy_anneal_steps=0",
      f"--workdir={tmp_path}",
      *TINY,
    ],
    _env(outside),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((tmp_path / "results.json").read_text())
  assert "test/example_f1" in results
  # The outside energy (2 measurements), not spen_ssvm's own (4), was trained.
  predictor = en.load_run(tmp_path)
  kernel = predictor.state["energy"].params["global"]["measurements"]["kernel"]
  assert kernel.shape == (16, 2)


def test_outside_config_and_method_through_compare(outside, tmp_path):
  proc = _run(
    [
      "-m",
      "experiments.compare",
      f"--methods={PACKAGE}.config,mlp:method={PACKAGE}.builders:build",
      f"--workdir={tmp_path}",
      "--set=data.num_train=256",
      "--set=train.steps=20",
      "--set=train.eval_every=10",
      "--set=train.tensorboard=False",
    ],
    _env(outside),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert f"| synthetic | {PACKAGE}.config |" in proc.stdout
  for run in (f"{PACKAGE}.config", f"mlp__method-{PACKAGE}.builders__build"):
    assert (tmp_path / "synthetic" / run / "results.json").is_file()
    assert run_lib.read_run(tmp_path / "synthetic" / run)["builder"] is not None


@pytest.mark.parametrize(
  "method,override,message",
  [
    (
      "mlp",
      "method=enx_missing.builders:build",
      "config.method 'enx_missing.builders:build' does not import: ModuleNotFoundError: "
      "No module named 'enx_missing'",
    ),
    (
      "mlp",
      f"method={PACKAGE}.builders:nope",
      f"config.method '{PACKAGE}.builders:nope' does not import: module "
      f"'{PACKAGE}.builders' has no attribute 'nope'",
    ),
    (
      "spen_ssvm",
      f"energy.module={PACKAGE}.builders:nope",
      f"config.energy.module '{PACKAGE}.builders:nope' does not import: module "
      f"'{PACKAGE}.builders' has no attribute 'nope'",
    ),
  ],
)
def test_a_builder_path_that_does_not_import_fails_before_training(
  outside, tmp_path, method, override, message
):
  from experiments import configuration  # pylint: disable=g-import-not-at-top
  from experiments import train  # pylint: disable=g-import-not-at-top

  config = configuration.get_config(method, "synthetic", [override])
  with pytest.raises(ValueError) as excinfo:
    train.train_and_evaluate(config, str(tmp_path))
  assert str(excinfo.value) == message
  assert not (tmp_path / "stages").exists() and not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
  "method,overrides",
  [("dvn", ["stage_order=pretrain,dvn", "model.hidden=(8,)"]), ("implicit", ["model.hidden=(8,)"])],
)
def test_an_energy_not_shaped_as_the_mlp_it_carries_fails_before_training(
  tmp_path, method, overrides
):
  from experiments import builders  # pylint: disable=g-import-not-at-top
  from experiments import configuration  # pylint: disable=g-import-not-at-top
  from experiments import train  # pylint: disable=g-import-not-at-top

  config = configuration.get_config(method, "synthetic", overrides)
  with pytest.raises(ValueError) as excinfo:
    train.train_and_evaluate(config, str(tmp_path))
  energy = tuple(config.energy.feature_hidden)
  assert str(excinfo.value) == (
    f"stage {method!r} carries the MLP of stage 'pretrain' into its energy as the local "
    f"term, so model.hidden (8,) must equal energy.feature_hidden {energy}: set both"
  )
  assert not (tmp_path / "stages").exists() and not (tmp_path / "checkpoints").exists()
  # With both set, the check passes.
  both = configuration.get_config(method, "synthetic", [*overrides, "energy.feature_hidden=(8,)"])
  builders.check_builders(both)


def test_an_outside_config_module_that_does_not_import(outside):
  from experiments import configuration  # pylint: disable=g-import-not-at-top

  with pytest.raises(
    ValueError, match="config module 'enx_missing.config' does not import: ModuleNotFoundError"
  ):
    configuration.get_config("enx_missing.config", "synthetic")

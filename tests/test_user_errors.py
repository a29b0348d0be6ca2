"""A user's mistake on the command line is one line on stderr and exit status 2; a bug
keeps its traceback; a diverging run stops early; a changed config does not resume."""

import ast
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# What every run here shares: generated data, a few examples, no TensorBoard files.
TINY = [
  "--config=experiments/configs/mlp.py:synthetic",
  "--config.data.num_train=64",
  "--config.train.tensorboard=False",
]
# A line absl's logging wrote (`I1201 19:31:41.934799 ...`), not the error.
_ABSL_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-m", *args],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})},
  )


def _error(proc: subprocess.CompletedProcess, program: str = "experiments.main") -> str:
  """The message of the command's one error line, after checking that it is one."""
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  lines = [l for l in proc.stderr.splitlines() if l.strip() and not _ABSL_LOG.match(l)]
  prefix = f"{program}: error: "
  assert len(lines) == 1 and lines[0].startswith(prefix), proc.stderr[-3000:]
  return lines[0][len(prefix) :]


def test_a_misspelled_config_key_names_the_key_and_the_closest_one(tmp_path):
  proc = _run("experiments.main", *TINY, f"--workdir={tmp_path}", "--config.train.stepz=3")
  assert _error(proc) == "unknown config key train.stepz; did you mean train.steps?"


def test_a_missing_config_file_lists_the_configs(tmp_path):
  proc = _run("experiments.main", "--config=experiments/configs/nope.py", f"--workdir={tmp_path}")
  message = _error(proc)
  assert message.startswith("--config: config file experiments/configs/nope.py does not exist")
  assert "mlp" in message and "spen_ssvm" in message


def test_a_value_of_the_wrong_type_names_the_flag(tmp_path):
  proc = _run(
    "experiments.main", *TINY, f"--workdir={tmp_path}", "--config.optimizer.learning_rate=fast"
  )
  assert _error(proc).startswith("flag --config.optimizer.learning_rate=fast: ")


def test_missing_data_names_the_flag_of_this_command(tmp_path):
  # No data directory set: the per-user default, here empty, with downloads off.
  env = {k: v for k, v in os.environ.items() if k != "ENERGYNETS_DATA_DIR"}
  env.update(JAX_PLATFORMS="cpu", XDG_CACHE_HOME=str(tmp_path / "cache"), ENERGYNETS_AUTO_FETCH="0")
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.main",
      "--config=experiments/configs/br.py:bibtex",
      f"--workdir={tmp_path / 'work'}",
      "--config.train.tensorboard=False",
    ],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=300,
    env=env,
  )
  message = _error(proc)
  folder = tmp_path / "cache" / "energynets" / "data" / "bibtex"
  assert message.startswith(f"{folder}: dataset folder of 'bibtex' not found")
  assert "`python -m energynets.data.fetch bibtex`" in message
  assert message.endswith(
    "or point --config.data.data_dir=DIR or $ENERGYNETS_DATA_DIR at a folder that holds them"
  )


def test_a_mulan_path_that_does_not_exist_is_one_line(tmp_path):
  missing = tmp_path / "no_such_folder"
  message = _error(
    _run(
      "experiments.main",
      "--config=experiments/configs/br.py:mulan",
      f"--config.data.path={missing}",
      f"--workdir={tmp_path / 'work'}",
    )
  )
  assert message.startswith(f"unknown dataset '{missing}': not a registered name")
  assert not (tmp_path / "work").exists()


def test_compare_names_an_unknown_method(tmp_path):
  proc = _run("experiments.compare", f"--workdir={tmp_path}", "--methods=mlp,mlpp")
  message = _error(proc, "experiments.compare")
  assert message.startswith("unknown config 'mlpp'; known: ") and "mlp" in message
  assert not list(tmp_path.iterdir())  # refused before anything trained


@pytest.mark.parametrize("program", ["benchmarks.verdict", "benchmarks.small_data"])
def test_the_verdict_binaries_name_a_missing_data_directory(tmp_path, program):
  missing = tmp_path / "no_data"
  proc = _run(
    program, f"--data_dir={missing}", f"--workdir={tmp_path / 'work'}", "--datasets=yeast"
  )
  message = _error(proc, program)
  assert message.startswith(f"{missing}: data directory (from --data_dir) does not exist")


@pytest.mark.parametrize("program", ["benchmarks.verdict", "benchmarks.small_data"])
@pytest.mark.parametrize(
  "flag, expected",
  [
    ("--methods=mlp,dmff", "unknown config 'dmff'; known: "),
    ("--datasets=yeast,yeastt", "config br:yeastt: unknown dataset variant 'yeastt'"),
  ],
)
def test_the_verdict_binaries_check_every_name_before_training(tmp_path, program, flag, expected):
  work = tmp_path / "work"
  proc = _run(program, f"--data_dir={tmp_path}", f"--workdir={work}", "--datasets=yeast", flag)
  assert _error(proc, program).startswith(expected)
  assert not work.exists()  # nothing trained, not even the label prior


def _calls_absl_run(path: pathlib.Path) -> bool:
  """Whether the module at `path` calls `app.run(...)` (absl's, not `cli.run`)."""
  tree = ast.parse(path.read_text())
  return any(
    isinstance(node, ast.Call)
    and isinstance(node.func, ast.Attribute)
    and node.func.attr == "run"
    and isinstance(node.func.value, ast.Name)
    and node.func.value.id == "app"
    for node in ast.walk(tree)
  )


def test_every_binary_runs_under_cli_run():
  binaries = sorted(REPO_ROOT.glob("benchmarks/*.py")) + sorted(REPO_ROOT.glob("experiments/*.py"))
  assert len(binaries) > 20
  # experiments/cli.py is the one place that wraps absl's app.run.
  direct = [
    str(p.relative_to(REPO_ROOT)) for p in binaries if p.name != "cli.py" and _calls_absl_run(p)
  ]
  assert not direct, f"these call absl's app.run, not experiments.cli.run: {direct}"


@pytest.mark.parametrize(
  "program", ["benchmarks.gpu_run", "benchmarks.faults", "benchmarks.scaling"]
)
def test_a_benchmark_binary_answers_an_unknown_flag_in_one_line(program):
  proc = _run(program, "--no_such_flag=1")
  assert _error(proc, program) == "Unknown command line flag 'no_such_flag'"


def test_predict_names_a_workdir_without_a_run(tmp_path):
  proc = _run(
    "experiments.predict",
    f"--workdir={tmp_path}",
    f"--input={tmp_path}",
    f"--output={tmp_path / 'out.npz'}",
  )
  assert _error(proc, "experiments.predict") == (
    f"no run in {tmp_path}: expected run.json written by energynets.fit or experiments.main"
  )


def test_a_workdir_another_run_holds_is_one_line(tmp_path, hold_workdir):
  hold_workdir(tmp_path)
  proc = _run("experiments.main", *TINY, f"--workdir={tmp_path}")
  assert _error(proc) == (
    f"{tmp_path} is in use by another process (it holds {tmp_path / '.lock'}): wait for "
    "that run to end or pick another workdir"
  )


def test_running_the_training_library_names_the_binary():
  message = _error(_run("experiments.train"), "experiments.train")
  assert "python -m experiments.main --config=" in message


@pytest.mark.parametrize(
  "options, expected",
  [
    (
      ["--config.loss.score=soft_f1", "--config.loss.score_weight=0"],
      "method 'local': score_weight must be positive with a score; got 0.0",
    ),
    (
      ["--config.method=spen_pretrain", "--config.loss.score=soft_f1"],
      "method 'spen_pretrain': loss.score='soft_f1' trains methods ",
    ),
  ],
)
def test_an_option_the_library_refuses_is_one_line(tmp_path, options, expected):
  proc = _run("experiments.main", *TINY, f"--workdir={tmp_path}", *options)
  assert _error(proc).startswith(expected)
  assert not (tmp_path / "results.json").exists()


def test_an_error_inside_training_keeps_its_traceback(tmp_path):
  # A builder that fails while building: a bug, even though it is a ValueError.
  package = tmp_path / "enx_buggy"
  package.mkdir()
  (package / "__init__.py").write_text(
    "def build(config, dataset, optimizer):\n  raise ValueError('a bug in the builder')\n"
  )
  proc = _run(
    "experiments.main",
    *TINY,
    f"--workdir={tmp_path / 'run'}",
    "--config.method=enx_buggy:build",
    env={"PYTHONPATH": str(tmp_path)},
  )
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert "Traceback" in proc.stderr and "ValueError: a bug in the builder" in proc.stderr


def test_a_diverging_run_stops_early_and_names_the_cause(tmp_path):
  proc = _run(
    "experiments.main",
    *TINY,
    f"--workdir={tmp_path}",
    "--config.optimizer.learning_rate=1e6",
    "--config.train.steps=1000",
    "--config.train.log_every=10",
    "--config.train.eval_every=1000",
  )
  message = _error(proc)
  match = re.fullmatch(
    r"training diverged: loss (\S+) at step (\d+), above max_loss=1e\+08 "
    r"at 3 logged steps in a row since step \d+; training stopped, .*"
    r"The learning rate is likely too high: lower it, or clip gradients\.",
    message,
  )
  assert match, message
  assert float(match.group(1)) > 1e8 and int(match.group(2)) < 100
  logged = [json.loads(l)["step"] for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert max(logged) == int(match.group(2))
  assert not (tmp_path / "results.json").exists()


def test_a_run_resumes_only_with_the_config_it_was_trained_with(tmp_path):
  run = [
    "experiments.main",
    *TINY,
    f"--workdir={tmp_path}",
    "--config.train.steps=2",
    "--config.train.eval_every=2",
  ]
  first = _run(*run)
  assert first.returncode == 0, first.stderr[-3000:]
  changed = _run(*run, "--config.optimizer.learning_rate=0.01")
  assert _error(changed) == (
    f"{tmp_path} holds a run trained with another config; it differs in "
    "optimizer.learning_rate (0.001 -> 0.01). Use a fresh --workdir, or pass "
    "--allow_config_change to continue that run with the new config"
  )
  allowed = _run(*run, "--config.optimizer.learning_rate=0.01", "--allow_config_change")
  assert allowed.returncode == 0, allowed.stderr[-3000:]
  assert "optimizer.learning_rate (0.001 -> 0.01)" in allowed.stderr  # the warning
  recorded = json.loads((tmp_path / "config.json").read_text())
  assert recorded["optimizer"]["learning_rate"] == 0.01


# ---------------------------------------------------------------------------------------
# The pieces, in this process.


def test_unknown_config_keys_and_their_suggestions():
  import ml_collections

  from experiments import cli

  config = ml_collections.ConfigDict({"train": {"steps": 1, "seed": 0}, "model": {"depth": 2}})
  assert cli.unknown_config_key(config, "train.steps") is None
  assert cli.unknown_config_key(config, "trian.steps") == (
    "unknown config key trian.steps; did you mean train.steps?"
  )
  assert cli.unknown_config_key(config, "train.zzz") == "unknown config key train.zzz"
  assert cli.unknown_config_key(config, "train.steps.x") == (
    "unknown config key train.steps.x: train.steps is a value of type int, not a block of keys"
  )


def test_overrides_are_user_errors_that_stay_key_and_value_errors():
  from experiments import cli
  from experiments import configuration

  with pytest.raises(KeyError) as excinfo:
    configuration.get_config("mlp", "synthetic", ["train.stpes=3"])
  assert isinstance(excinfo.value, cli.UserError)
  assert str(excinfo.value) == "unknown config key train.stpes; did you mean train.steps?"
  with pytest.raises(cli.UserError, match="train.steps takes values of type int, not 'x'"):
    configuration.get_config("mlp", "synthetic", ["train.steps=x"])
  with pytest.raises(ValueError, match="unknown config 'mlpp'"):
    configuration.get_config("mlpp", "synthetic")


def test_resumable_changes_are_logging_devices_data_location_and_more_steps():
  from experiments import workdirs

  old = {
    "train": {"steps": 10, "log_every": 5},
    "optimizer": {"learning_rate": 0.1},
    "data": {"data_dir": "/a"},
    "stages": {"fine": {"train": {"steps": 4}}},
  }
  same = {
    "train": {"steps": 20, "log_every": 1},
    "optimizer": {"learning_rate": 0.1},
    "data": {"data_dir": "/b"},
    "stages": {"fine": {"train": {"steps": 5}}},
  }
  assert workdirs.config_changes(old, same) == []
  other = {
    "train": {"steps": 5, "log_every": 5},
    "optimizer": {"learning_rate": 0.2},
    "data": {"data_dir": "/a"},
    "stages": {"fine": {"train": {"steps": 4}}},
  }
  assert workdirs.config_changes(old, other) == [
    "optimizer.learning_rate (0.1 -> 0.2)",
    "train.steps (10 -> 5)",
  ]


def test_the_data_directory_hint_names_the_command_line_flag():
  from energynets.data import registry
  from experiments import cli

  with pytest.raises(registry.DataError) as excinfo:
    registry.resolve_data_dir("/nonexistent/energynets-data")
  message = cli.user_error_message(excinfo.value, "--config.data.data_dir")
  assert message == (
    "/nonexistent/energynets-data: data directory (from "
    "--config.data.data_dir) does not exist; pass --config.data.data_dir=DIR "
    "or set ENERGYNETS_DATA_DIR, or fetch the data into it with `python -m "
    "energynets.data.fetch all --data_dir=/nonexistent/energynets-data`"
  )

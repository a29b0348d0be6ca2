"""What the binaries print: results on stdout, progress and problems on stderr, the INFO
log in the workdir; and what a run that fails at its start leaves behind."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = [
  "--config=experiments/configs/mlp.py:synthetic",
  "--config.data.num_train=64",
  "--config.train.tensorboard=False",
  "--config.train.steps=20",
  "--config.train.eval_every=10",
  "--config.train.log_every=10",
]
# A line absl's logging wrote at INFO (`I1201 19:31:41.934799 ...`).
_INFO = re.compile(r"^I\d{4} \d\d:\d\d:\d\d", re.M)
_ANY_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")


def _run(*args: str, platforms: str | None = "cpu", **env) -> subprocess.CompletedProcess:
  environ = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  if platforms is not None:
    environ["JAX_PLATFORMS"] = platforms
  return subprocess.run(
    [sys.executable, "-m", *args],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=600,
    env={**environ, **env},
  )


def test_main_prints_a_short_table_and_logs_to_the_workdir(tmp_path):
  # JAX picks its backends itself, as for a user: it then reports those it did not find.
  proc = _run("experiments.main", *TINY, f"--workdir={tmp_path}", platforms=None)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.splitlines()
  assert 3 <= len(lines) <= 12, proc.stdout
  assert re.match(r"^metric +tuned +@0\.5$", lines[0]), proc.stdout
  rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
  for key in ("test/example_f1", "test/micro_f1", "test/macro_f1", "test/hamming"):
    assert len(rows[key]) == 2 and all(0 <= float(v) <= 1 for v in rows[key]), proc.stdout
  results = json.loads((tmp_path / "results.json").read_text())
  assert float(rows["test/example_f1"][0]) == pytest.approx(results["test/example_f1"], abs=1e-4)
  assert lines[-1] == f"results: {tmp_path / 'results.json'}"
  assert "Unable to initialize backend" not in proc.stderr
  assert not _INFO.search(proc.stderr), proc.stderr
  # Not a terminal: no progress bar's carriage returns.
  assert "\r" not in proc.stderr
  log = (tmp_path / "logs" / "main.log").read_text()
  assert "steps/s" in log and "ETA" in log and "step 20 | validation/example_f1=" in log

  # --verbose: the INFO log on stderr as well (a finished run re-evaluates).
  verbose = _run("experiments.main", *TINY, f"--workdir={tmp_path}", "--verbose")
  assert verbose.returncode == 0, verbose.stderr[-3000:]
  assert re.search(r"^I\d{4} .*resumed from .* at step 20$", verbose.stderr, re.M)
  assert verbose.stdout.splitlines()[1:] == lines[1:]
  assert "resumed from" in (tmp_path / "logs" / "main.log").read_text()  # appended

  # experiments.predict, which has no log file, drops the report as well.
  import numpy as np  # pylint: disable=g-import-not-at-top

  np.savez(tmp_path / "rows.npz", x=np.zeros((3, 64), np.float32))
  predict = _run(
    "experiments.predict",
    f"--workdir={tmp_path}",
    f"--input={tmp_path / 'rows.npz'}",
    f"--output={tmp_path / 'out.npz'}",
    platforms=None,
  )
  assert predict.returncode == 0, predict.stderr[-3000:]
  assert predict.stdout.startswith(f"{tmp_path / 'out.npz'}: 3 rows")
  assert "Unable to initialize backend" not in predict.stderr and not predict.stderr.strip()


def test_compare_prints_only_its_table_on_stdout(tmp_path):
  proc = _run(
    "experiments.compare",
    "--methods=br",
    f"--workdir={tmp_path}",
    "--set=train.steps=4",
    "--set=train.eval_every=2",
    "--set=data.num_train=64",
    "--set=train.tensorboard=False",
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.splitlines()
  assert len(lines) == 3 and all(line.startswith("|") for line in lines), proc.stdout
  assert lines[2].startswith("| synthetic | br |")
  # Not a terminal: a line per run, warnings; the INFO log is in the workdir.
  other = [l for l in proc.stderr.splitlines() if not _ANY_LOG.match(l)]
  assert other == ["run 1/1: br:synthetic"], proc.stderr
  assert not _INFO.search(proc.stderr), proc.stderr
  assert "=== br on synthetic" in (tmp_path / "logs" / "compare.log").read_text()


def test_tune_lists_its_trials_and_the_results_on_stdout(tmp_path):
  from test_tune import _write_mulan  # pylint: disable=g-import-not-at-top

  toy = _write_mulan(tmp_path / "toy")
  proc = _run(
    "experiments.tune",
    "--config=experiments/configs/br.py:mulan",
    f"--config.data.path={toy}",
    f"--workdir={tmp_path / 'tune'}",
    "--folds=2",
    "--only_search_flags",
    "--search=train.steps=10",
    "--search=loss.l2_c=0.1,1",
    "--config.train.eval_every=5",
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.splitlines()
  # The config's own setting is trial 1, then the two searched values.
  assert [l.split(":")[0] for l in lines[:3]] == ["trial 1/3", "trial 2/3", "trial 3/3"], (
    proc.stdout
  )
  assert re.search(r"\| best 0\.\d{4} \(trial [123]\) \| .* elapsed, ETA 0 s$", lines[2])
  assert lines[3].startswith("chosen: ") and " loss.l2_c=" in lines[3], proc.stdout
  assert any(l.startswith("test/example_f1 ") for l in lines[4:]), proc.stdout
  assert lines[-1] == f"results: {tmp_path / 'tune' / 'results.json'}"
  assert not _INFO.search(proc.stderr), proc.stderr
  assert "trial 3/3" in (tmp_path / "tune" / "logs" / "tune.log").read_text()


@pytest.mark.parametrize("before", ["none", "empty", "launcher_logs", "earlier_run"])
def test_a_run_that_fails_at_its_start_removes_what_it_created(tmp_path, before):
  workdir = tmp_path / "run"
  if before != "none":
    workdir.mkdir()
  if before == "launcher_logs":  # launch/worker.sh's log, written before the run starts
    (workdir / "logs").mkdir()
    (workdir / "logs" / "worker_0.log").write_text("=== worker 0\n")
  if before == "earlier_run":
    (workdir / "results.json").write_text("{}")
  # A data directory that does not exist: the run stops after its workdir is set up.
  proc = _run(
    "experiments.main",
    "--config=experiments/configs/br.py:bibtex",
    "--config.data.data_dir=/nonexistent/energynets-data",
    f"--workdir={workdir}",
  )
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert proc.stderr.splitlines()[-1].startswith("experiments.main: error: ")
  left = sorted(os.fspath(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
  expected = {
    "none": [],
    "empty": ["run"],
    "launcher_logs": ["run", "run/logs", "run/logs/worker_0.log"],
    # Not a fresh workdir: nothing is touched.
    "earlier_run": [
      "run",
      "run/.lock",
      "run/config.json",
      "run/logs",
      "run/logs/main.log",
      "run/results.json",
    ],
  }[before]
  assert left == expected


def test_a_failed_start_keeps_checkpoints_and_the_output_of_training(tmp_path):
  from experiments import workdirs  # pylint: disable=g-import-not-at-top

  for name, output in (("checkpointed", "checkpoints/10/state"), ("diverged", "metrics.jsonl")):
    workdir = tmp_path / name
    log = workdir / "logs" / "main.log"
    with pytest.raises(RuntimeError):
      with workdirs.removed_if_failed(workdir, log):
        log.parent.mkdir(parents=True)
        log.write_text("I ...\n")
        (workdir / workdirs.LOCK_FILE).write_text("")
        (workdir / workdirs.CONFIG_FILE).write_text("{}")
        (workdir / "xla_cache").mkdir()
        (workdir / output).parent.mkdir(parents=True, exist_ok=True)
        (workdir / output).write_text("1")
        raise RuntimeError("failed")
    left = sorted(os.fspath(p.relative_to(workdir)) for p in workdir.rglob("*"))
    if name == "checkpointed":  # a saved step: the run is resumable, nothing goes
      assert left == [
        ".lock",
        "checkpoints",
        "checkpoints/10",
        "checkpoints/10/state",
        "config.json",
        "logs",
        "logs/main.log",
        "xla_cache",
      ]
    else:  # the metrics stay, and the log that explains them
      assert left == ["logs", "logs/main.log", "metrics.jsonl"]


def test_training_draws_a_bar_per_stage_when_asked(tmp_path, capsys):
  from experiments import configuration  # pylint: disable=g-import-not-at-top
  from experiments import console  # pylint: disable=g-import-not-at-top
  from experiments import train  # pylint: disable=g-import-not-at-top

  config = configuration.get_config(
    "mlp",
    "synthetic",
    ["data.num_train=64", "train.eval_every=3", "train.log_every=3", "train.tensorboard=False"],
  )
  config.stage_order = "first,second"
  with config.unlocked():
    config.stages.first = {"train": {"steps": 4}}
    config.stages.second = {"train": {"steps": 6}}
  console.configure("on")
  try:
    train.train_and_evaluate(config, str(tmp_path))
  finally:
    console.configure("auto")  # the default where no binary chose
  err = capsys.readouterr().err
  final = [chunk.strip() for chunk in re.split(r"[\r\n]", err) if "|" in chunk]
  assert any(c.startswith("first: 100%") and "4/4" in c for c in final), err
  assert any(
    c.startswith("second: 100%") and "6/6" in c and "loss " in c and "best example_f1 0." in c
    for c in final
  ), err


def test_results_table_pairs_each_metric_with_its_fixed_threshold_value():
  from experiments import console  # pylint: disable=g-import-not-at-top

  results = {
    "validation/example_f1": 0.5,
    "test/example_f1": 0.41234,
    "test/hamming": 0.75,
    "test/example_f1@0.5": 0.3,
    "test/hamming@0.5": 0.7,
    "test/search_error": 0.1,
    "threshold": 0.25,
    "meta": {"selected_step": 40, "final_step": 60},
  }
  assert console.results_table(results, "/w/results.json").splitlines() == [
    "metric                tuned      @0.5",
    "test/example_f1      0.4123    0.3000",
    "test/hamming         0.7500    0.7000",
    "test/search_error    0.1000",
    "threshold 0.25 (tuned on validation); selected step 40 of 60",
    "results: /w/results.json",
  ]
  psnr = console.results_table({"test/psnr": 25.5, "natural/psnr": 20.25})
  assert psnr.splitlines() == [
    "metric           value",
    "test/psnr      25.5000",
    "natural/psnr   20.2500",
  ]


def test_a_training_bar_shows_the_state_fit_selects(capsys):
  """Of equal evaluations the bar names the later, as selection keeps it."""
  from energynets.train import LoopOptions  # pylint: disable=g-import-not-at-top
  from experiments import console  # pylint: disable=g-import-not-at-top

  options = LoopOptions(
    steps=30, batch_size=8, select_metric="validation/example_f1", select_mode="max"
  )
  console.configure("on")
  try:
    with console.training_progress(options, "tied") as progress:
      progress(0, {})
      for step, value in ((10, 0.5), (20, 0.7), (30, 0.7)):
        progress(step, {"validation/example_f1": value})
  finally:
    console.configure("auto")
  err = capsys.readouterr().err
  assert "best example_f1 0.7000 @30" in err, err

"""How a run stops: one process's failure ends every process of a pod within seconds,
with its reason printed by the launcher; a preemption (SIGTERM) makes every process
save the same step and exit with status 75, and a rerun resumes to the uninterrupted
run's results. Real 2-process pods of launch/local_pod.sh (`benchmarks.faults` runs
them and times every process), with faults injected on process 1 from outside the
library (benchmarks/faulty_run.py); the TPU and SLURM launchers' report of a preempted
or failed run (stand-ins for gcloud and srun); and a single-process `fit` stopped by
SIGTERM."""

import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys

import jax
from multiprocess import _subprocess_env
import numpy as np
import optax
import pytest

from benchmarks import faults as faults_bench
from energynets import train as train_lib
from energynets.data.batching import train_batch_indices
from energynets.nets import MLP
from energynets.objectives import local_bce
from energynets.train import faults
from experiments import cli
from experiments import train

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# Every process must end within this long of the fault (they take seconds; the margin
# is for two loaded cores).
EXIT_WITHIN_S = 60
POD_TIMEOUT_S = 400
needs_proc = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")

# The preempted run: long enough to be signalled mid-run, short enough to rerun to the end.
PREEMPT_STEPS = 600
PREEMPT_FLAGS = (
  f"{faults_bench.CONFIG}:none",
  f"--config.train.steps={PREEMPT_STEPS}",
  "--config.train.log_every=10",
  "--config.train.eval_every=200",
  "--config.train.checkpoint_every=1000",
)


def _fault(name):
  (fault,) = [f for f in faults_bench.faults() if f.name == name]
  return fault


@needs_proc
@pytest.mark.parametrize(
  "name, status",
  [
    ("missing_data", cli.EXIT_USER_ERROR),
    ("bad_device_count", cli.EXIT_USER_ERROR),
    ("step_exception", cli.EXIT_FAILURE),
  ],
)
def test_a_fault_on_process_1_ends_every_process_with_its_reason(name, status, tmp_path):
  if name == "missing_data" and not os.path.isdir(
    os.path.join(faults_bench.default_data_dir(), "genbase")
  ):
    pytest.skip("no genbase in the data directory")
  fault = _fault(name)
  outcome = faults_bench.run_fault(fault, tmp_path, timeout_s=POD_TIMEOUT_S)
  report = outcome.report()
  # Every process ends, soon, with the failed process's status; the launcher says why.
  assert outcome.status == status, report
  assert outcome.statuses == [status, status], report
  assert all(s is not None and s < EXIT_WITHIN_S for s in outcome.exit_s), report
  assert outcome.launcher_s < EXIT_WITHIN_S, report
  assert fault.expected in outcome.stderr, report
  (reason,) = [
    m
    for m in outcome.messages
    if m.startswith("local_pod: worker ") and ": experiments.main: error: " in m
  ]
  assert fault.expected in reason, report
  print(
    f"{name}: processes ended {outcome.exit_s} s after the first, launcher status {outcome.status}"
  )


def _results(workdir):
  results = json.loads((workdir / "results.json").read_text())
  return {k: v for k, v in results.items() if k != "meta"}, results["meta"]


@needs_proc
def test_sigterm_saves_every_process_at_one_step_and_a_rerun_resumes(tmp_path):
  workdir = tmp_path / "pod"
  # The uninterrupted run, meanwhile: one process with both devices, drawing the batches
  # of two processes (two data shards).
  with open(tmp_path / "reference.log", "w") as log:
    reference = subprocess.Popen(
      [
        sys.executable,
        "-m",
        "experiments.main",
        *PREEMPT_FLAGS,
        "--config.data.num_shards=2",
        f"--workdir={tmp_path / 'reference'}",
      ],
      cwd=REPO_ROOT,
      env=_subprocess_env(2),
      stdout=log,
      stderr=subprocess.STDOUT,
    )
  try:
    pod = faults_bench.start_pod(2, PREEMPT_FLAGS, workdir)
    # To the python processes, as a preemption signals them, once training runs.
    outcome = faults_bench.watch(
      pod,
      faults_bench.signal_when(faults_bench.trained_some, signal.SIGTERM, (0, 1)),
      timeout_s=POD_TIMEOUT_S,
    )
    report = outcome.report()
    assert outcome.status == faults.EXIT_PREEMPTED == cli.EXIT_PREEMPTED, report
    assert outcome.statuses == [faults.EXIT_PREEMPTED] * 2, report
    assert all(s is not None and s < EXIT_WITHIN_S for s in outcome.exit_s), report
    (line,) = [m for m in outcome.messages if "preempted at step" in m]
    step = int(line.split("preempted at step ")[1].split(":")[0])
    assert line == (
      f"local_pod: preempted at step {step}: rerun the same command to resume; "
      f"logs in {workdir / 'logs'}"
    ), report
    # Both saved that step (one checkpoint), mid-run, and said so.
    assert 0 < step < PREEMPT_STEPS and outcome.checkpoints == [step], report
    for log in outcome.logs:
      assert f"experiments.main: preempted at step {step}: saved the checkpoint" in log
    assert not (workdir / "results.json").exists()

    rerun = faults_bench.watch(
      faults_bench.start_pod(2, PREEMPT_FLAGS, workdir), timeout_s=POD_TIMEOUT_S
    )
    assert rerun.status == 0 and rerun.statuses == [0, 0], rerun.report()
    # Process 0's INFO log (its worker log holds what it printed).
    assert (
      f"resumed from {workdir / 'checkpoints'} at step {step}"
      in (workdir / "logs" / "main.log").read_text()
    )
    assert reference.wait(timeout=POD_TIMEOUT_S) == 0, (tmp_path / "reference.log").read_text()
  finally:
    if reference.poll() is None:
      reference.kill()
      reference.wait()
  metrics, meta = _results(workdir)
  reference_metrics, reference_meta = _results(tmp_path / "reference")
  assert meta["final_step"] == reference_meta["final_step"] == PREEMPT_STEPS
  assert metrics.keys() == reference_metrics.keys()
  np.testing.assert_allclose(
    [metrics[k] for k in metrics], [reference_metrics[k] for k in metrics], atol=1e-6
  )
  steps = [json.loads(l)["step"] for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  reference_steps = [
    json.loads(l)["step"]
    for l in (tmp_path / "reference" / "metrics.jsonl").read_text().splitlines()
  ]
  assert steps == reference_steps
  print(f"preempted at step {step}; processes ended {outcome.exit_s} s after the SIGTERM")


@needs_proc
def test_sigterm_to_the_launcher_is_passed_on_as_a_preemption(tmp_path):
  workdir = tmp_path / "pod"
  pod = faults_bench.start_pod(2, PREEMPT_FLAGS, workdir)

  def term_launcher(pod):
    if not faults_bench.trained_some(pod):
      return False
    pod.proc.send_signal(signal.SIGTERM)
    return True

  outcome = faults_bench.watch(pod, term_launcher, timeout_s=POD_TIMEOUT_S)
  report = outcome.report()
  assert outcome.status == faults.EXIT_PREEMPTED, report
  assert outcome.statuses == [faults.EXIT_PREEMPTED] * 2, report
  assert "local_pod: TERM: passing it on to the 2 workers" in outcome.stderr, report
  (line,) = [m for m in outcome.messages if "preempted at step" in m]
  step = int(line.split("preempted at step ")[1].split(":")[0])
  assert 0 < step < PREEMPT_STEPS and outcome.checkpoints == [step], report
  assert outcome.launcher_s < EXIT_WITHIN_S, report


# ------------------------------------------- the TPU and SLURM launchers, stand-ins


def _stub(path, body):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("#!/usr/bin/env bash\n" + body.lstrip())
  path.chmod(0o755)


PREEMPTED_LINE = (
  "worker 1: exit status 75: experiments.main: preempted at step 40: saved "
  "the checkpoint of step 40 in W/checkpoints; rerun to resume"
)


@pytest.mark.parametrize("status", [75, 2])
def test_tpu_pod_run_reports_a_preemption_apart_from_a_failure(status, tmp_path):
  """A gcloud stand-in whose ssh of the run prints a worker's last line and exits as
  the workers did."""
  line = PREEMPTED_LINE if status == 75 else "worker 1: exit status 2: experiments.main: error: x"
  _stub(
    tmp_path / "bin" / "gcloud",
    f"""
[[ "$*" == *launch/worker.sh* ]] && {{ echo {shlex.quote(line)} >&2; exit {status}; }}
exit 0
""",
  )
  env = {k: v for k, v in os.environ.items() if not k.startswith(("TPU_", "DRY_RUN"))}
  env["PATH"] = f"{tmp_path / 'bin'}:{os.environ['PATH']}"
  proc = subprocess.run(
    [
      "bash",
      str(REPO_ROOT / "launch" / "tpu_pod.sh"),
      "run",
      "--name=a",
      "--zone=z",
      "--config=experiments/configs/mlp.py:bibtex",
      "--workdir=gs://bucket/run",
    ],
    capture_output=True,
    text=True,
    env=env,
    cwd=tmp_path,
    timeout=60,
  )
  assert proc.returncode == status, proc.stderr
  assert line in proc.stderr
  preempted = "preempted: every worker saved a checkpoint" in proc.stderr
  failed = "error: the run failed on a worker (gcloud ssh exit status 2)" in proc.stderr
  assert (preempted, failed) == (status == 75, status == 2), proc.stderr


@pytest.mark.parametrize("status", [75, 2])
def test_sbatch_job_reports_a_preemption_apart_from_a_failure(status, tmp_path):
  _stub(tmp_path / "bin" / "srun", f"exit {status}\n")
  env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "DRY_RUN"))}
  env.update(
    PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
    SLURM_JOB_ID="7",
    SLURM_JOB_NODELIST="gpu001",
    SLURM_NNODES="1",
    SLURM_GPUS_ON_NODE="1",
    ENERGYNETS_ROOT=str(REPO_ROOT),
  )
  job = tmp_path / "job.sh"
  job.write_text((REPO_ROOT / "launch" / "slurm.sbatch").read_text())
  proc = subprocess.run(
    ["bash", str(job), "--config=experiments/configs/mlp.py:bibtex", f"--workdir={tmp_path / 'w'}"],
    capture_output=True,
    text=True,
    env=env,
    cwd=tmp_path,
    timeout=60,
  )
  assert proc.returncode == status, proc.stderr
  preempted = "preempted: every task saved a checkpoint" in proc.stderr
  failed = "error: the job step failed (srun exit status 2)" in proc.stderr
  assert (preempted, failed) == (status == 75, status == 2), proc.stderr


# ---------------------------------------------------------------- a single process


def _toy_data(n=128, d=8, labels=4):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(n, d)).astype(np.float32)
  y = (x[:, :labels] + 0.3 * rng.normal(size=(n, labels)) > 0).astype(np.float32)
  return {"x": x, "y": y}


def _options():
  return train_lib.LoopOptions(
    steps=30,
    batch_size=16,
    seed=1,
    log_every=5,
    eval_every=10,
    checkpoint_every=100,
    select_metric=None,
    tensorboard=False,
  )


def test_fit_stopped_by_sigterm_saves_that_step_and_resumes_to_the_same_state(tmp_path):
  data, options = _toy_data(), _options()
  objective = local_bce(MLP((8,), 4, dropout=0.2), optax.adam(1e-2))
  full = train_lib.fit(objective, data, options, tmp_path / "full")

  signalled = []

  def train_batch(step):
    # The batches `fit` draws by default; SIGTERM to this process while building one.
    if step == 7 and not signalled:
      signalled.append(step)
      os.kill(os.getpid(), signal.SIGTERM)
    idx = train_batch_indices(len(data["x"]), options.batch_size, options.seed, step)
    return {k: v[idx] for k, v in data.items()}

  workdir = tmp_path / "preempted"
  before = signal.getsignal(signal.SIGTERM)
  with faults.preempt_on_sigterm():
    with pytest.raises(faults.Preempted) as stopped:
      train_lib.fit(objective, data, options, workdir, train_batch=train_batch)
    step = stopped.value.step
    assert signalled and 1 <= step < options.steps
    assert f"preempted at step {step}: saved the checkpoint of step {step}" in str(stopped.value)
    saved = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == [step]
    resumed = train_lib.fit(objective, data, options, workdir, train_batch=train_batch)
  assert resumed.final_step == full.final_step == options.steps
  for a, b in zip(_leaves(full.state), _leaves(resumed.state)):
    np.testing.assert_array_equal(a, b)
  # Outside the context SIGTERM does what it did before.
  assert signal.getsignal(signal.SIGTERM) == before


def _leaves(state):
  return [np.asarray(v) for v in jax.tree_util.tree_leaves(state)]


def test_no_preemption_without_a_notice():
  assert not faults.preemption_reached(5)
  faults.request_preemption()
  assert faults.preemption_reached(6)
  assert not faults.preemption_reached(7)  # once: the step every process saves


def test_an_error_in_a_host_callback_is_one_line_ending_with_its_exception():
  error = RuntimeError(
    "INTERNAL: CpuCallback error calling callback: Traceback (most recent "
    "call last):\n  File \"x.py\", line 3, in check\nValueError: bad row 7\n"
  )
  assert cli.exception_line(error) == (
    "RuntimeError: INTERNAL: CpuCallback error calling callback: ... ValueError: bad row 7"
  )
  assert cli.exception_line(KeyError("k")) == "KeyError: 'k'"
  assert len(cli.exception_line(ValueError("x" * 5000))) == 600


@pytest.mark.parametrize("timeouts", [dict(heartbeat_timeout_s=0), dict(shutdown_timeout_s=2.5)])
def test_distributed_timeouts_must_be_whole_seconds(timeouts):
  # Refused before jax.distributed is touched (this process joins nothing).
  with pytest.raises(ValueError, match="must be a whole number of seconds"):
    train.initialize_distributed("127.0.0.1:1", 2, 0, **timeouts)
  assert not faults.joined()

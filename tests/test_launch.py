"""The TPU-pod and SLURM launch scripts, run in dry-run mode: the commands they print."""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
LAUNCH = REPO_ROOT / "launch"
CONFIG = "--config=experiments/configs/mlp.py:bibtex"
# Arguments a shell would mangle if a script dropped a level of quoting.
ODD_ARGS = ["--config.model.hidden=(512, 512)", "--config.data.path=it's a $HOME; `x`",
            '--config.train.select_metric="validation/example_f1@0.5"']


def _run(script, *args, env=None, cwd=None):
  full_env = {k: v for k, v in os.environ.items()
              if not k.startswith(("TPU_", "SLURM_", "DRY_RUN"))}
  full_env.update(env or {})
  return subprocess.run(["bash", str(LAUNCH / script), *args], capture_output=True, text=True,
                        env=full_env, cwd=cwd or REPO_ROOT, timeout=60)


def _commands(proc):
  assert proc.returncode == 0, proc.stderr
  return [shlex.split(line) for line in proc.stdout.splitlines()]


def _remote(argv):
  """The remote shell command of a `gcloud ... ssh --command=...` argv, as words."""
  (command,) = [a[len("--command="):] for a in argv if a.startswith("--command=")]
  return shlex.split(command)


def _main_args(words):
  """The argv after `python3 -m experiments.main` (or `python -m ...`) in `words`."""
  i = words.index("experiments.main")
  assert words[i - 1] == "-m" and words[i - 2].startswith("python")
  return words[i + 1:]


# ------------------------------------------------------------------------------ TPU pods


def test_tpu_all_creates_ships_runs_on_every_worker_and_fetches(tmp_path):
  proc = _run("tpu_pod.sh", "all", "--dry_run", "--name=en-v4", "--zone=us-central2-b",
              "--project=my-proj", "--accelerator_type=v4-32", "--runtime_version=v2-alpha",
              CONFIG, "--workdir=runs/mlp", *ODD_ARGS)
  commands = _commands(proc)
  gcloud = [c for c in commands if c[0] == "gcloud"]
  assert all("--zone=us-central2-b" in c and "--project=my-proj" in c for c in gcloud)
  create, scp_code, unpack, setup, run, fetch = gcloud
  assert create[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", "en-v4"]
  assert "--accelerator-type=v4-32" in create and "--version=v2-alpha" in create
  # Shipping: a git archive of HEAD, copied to and unpacked on every worker.
  archive_cmd = next(c for c in commands if c[0] == "git")
  assert "archive" in archive_cmd and archive_cmd[-1] == "HEAD"
  archive = next(a for a in archive_cmd if a.startswith("--output=")).split("=", 1)[1]
  assert scp_code[4] == "scp" and archive in scp_code and "--worker=all" in scp_code
  assert "--worker=all" in unpack and "tar" in _remote(unpack)
  assert "--worker=all" in setup and "install" in _remote(setup)
  # The run: every worker, the experiment's flags intact through two shells.
  assert run[4:6] == ["ssh", "en-v4"] and "--worker=all" in run
  words = _remote(run)
  assert words[:2] == ["cd", "energynets"]
  args = _main_args(words)
  assert args[:2 + len(ODD_ARGS)] == [CONFIG, "--workdir=runs/mlp", *ODD_ARGS]
  # Fetch: the (relative) workdir from worker 0 into the local results directory.
  assert fetch[4] == "scp" and "--recurse" in fetch and "--worker=0" in fetch
  assert "en-v4:energynets/runs/mlp" in fetch and "tpu_results/en-v4" in fetch
  assert commands.index(create) < commands.index(scp_code) < commands.index(run) < \
      commands.index(fetch)


def test_tpu_run_passes_the_multihost_flag_experiments_main_defines():
  proc = _run("tpu_pod.sh", "run", "--dry_run", "--name=a", "--zone=z", CONFIG, "--workdir=w")
  (run,) = _commands(proc)
  extra = _main_args(_remote(run))[2:]
  assert extra, "the run command starts no distributed runtime"
  proc = subprocess.run([sys.executable, "-m", "experiments.main", "--helpfull"],
                        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))
  for flag in extra:
    name = flag.lstrip("-").split("=")[0]
    assert re.search(rf"^\s*--(\[no\])?{name}:", proc.stdout + proc.stderr, re.M), \
        f"experiments.main has no {flag}"


def test_tpu_settings_from_the_environment_and_dry_run_env_var():
  proc = _run("tpu_pod.sh", "create,ship,delete", env=dict(
      DRY_RUN="1", TPU_NAME="pod", TPU_ZONE="europe-west4-a", TPU_ACCELERATOR_TYPE="v5litepod-16",
      TPU_RUNTIME_VERSION="v2-alpha-tpuv5-lite", TPU_REMOTE_DIR="my code", TPU_SPOT="1"))
  commands = _commands(proc)
  create, delete = commands[0], commands[-1]
  assert "--accelerator-type=v5litepod-16" in create and "--spot" in create
  assert "--version=v2-alpha-tpuv5-lite" in create and "--project" not in " ".join(create)
  assert delete[4:6] == ["delete", "pod"] and "--quiet" in delete
  unpack = [c for c in commands if any(a.startswith("--command=") for a in c)][0]
  assert _remote(unpack)[-2:] == ["-C", "my code"]  # the directory name survived quoting


def test_tpu_ship_data_and_gcs_workdir_fetch():
  proc = _run("tpu_pod.sh", "ship,fetch", "--dry_run", "--name=a", "--zone=z",
              "--ship_data=../shared/data", CONFIG, "--workdir=gs://bucket/run 1")
  commands = _commands(proc)
  data = [c for c in commands if "../shared/data" in c]
  assert len(data) == 1 and "a:energynets/data" in data[0] and "--worker=all" in data[0]
  assert commands[-1] == ["gcloud", "storage", "cp", "--recursive", "gs://bucket/run 1",
                          "tpu_results/a"]


@pytest.mark.parametrize("args, message", [
    (["run", "--zone=z", CONFIG, "--workdir=w"], "--name"),
    (["run", "--name=a", CONFIG, "--workdir=w"], "--zone"),
    (["run", "--name=a", "--zone=z", "--workdir=w"], "--config"),
    (["all", "--name=a", "--zone=z", CONFIG], "--workdir"),
    (["fetch", "--name=a", "--zone=z", CONFIG], "--workdir"),
    (["launch", "--name=a", "--zone=z"], "unknown action 'launch'"),
    (["--name=a"], "ACTIONS"),
])
def test_tpu_missing_or_bad_arguments_fail(args, message):
  proc = _run("tpu_pod.sh", *args, "--dry_run")
  assert proc.returncode != 0
  assert message in proc.stderr
  assert proc.stdout == ""  # nothing half-launched


# ------------------------------------------------------------------------------ SLURM


def test_slurm_submit_builds_the_sbatch_command():
  proc = _run("slurm_submit.sh", "--dry_run", "--nodes=4", "--gpus_per_node=2",
              "--time=01:00:00", "--partition=gpu", "--account=lab", CONFIG,
              "--workdir=/shared/runs/mlp", *ODD_ARGS)
  (sbatch,) = _commands(proc)
  script = str(LAUNCH / "slurm.sbatch")
  i = sbatch.index(script)
  assert sbatch[0] == "sbatch"
  options = sbatch[1:i]
  for option in ("--nodes=4", "--gpus-per-node=2", "--ntasks-per-node=1",
                 "--time=01:00:00", "--partition=gpu", "--account=lab",
                 f"--chdir={REPO_ROOT}"):
    assert option in options
  assert sbatch[i + 1:] == [CONFIG, "--workdir=/shared/runs/mlp", *ODD_ARGS]


@pytest.mark.parametrize("args, message", [
    ([CONFIG], "--workdir"),
    (["--workdir=/w"], "--config"),
    (["--nodes=0", CONFIG, "--workdir=/w"], "--nodes"),
])
def test_slurm_submit_missing_or_bad_arguments_fail(args, message):
  proc = _run("slurm_submit.sh", "--dry_run", *args)
  assert proc.returncode != 0 and message in proc.stderr and proc.stdout == ""


def _slurm_env(**extra):
  env = dict(DRY_RUN="1", SLURM_JOB_ID="123456", SLURM_JOB_NODELIST="gpu[007-008,011]",
             SLURM_STEP_NODELIST="gpu[007-008,011]", SLURM_NNODES="3",
             SLURM_GPUS_ON_NODE="4", ENERGYNETS_ROOT=str(REPO_ROOT))
  env.update(extra)
  return env


def test_sbatch_script_runs_one_task_per_node_with_jax_coordinator(tmp_path):
  env = _slurm_env()
  # sbatch runs a copy of the script from the job's directory: do the same.
  copy = tmp_path / "job.sh"
  copy.write_text((LAUNCH / "slurm.sbatch").read_text())
  proc = subprocess.run(["bash", str(copy), CONFIG, "--workdir=/shared/w", *ODD_ARGS],
                        capture_output=True, text=True, cwd=tmp_path, timeout=60,
                        env=dict({k: v for k, v in os.environ.items()
                                  if not k.startswith("SLURM_")}, **env))
  (command,) = _commands(proc)
  assert command[0] == "env"
  exports = dict(a.split("=", 1) for a in command[1:3])
  srun = command[3:]
  assert srun[0] == "srun" and "--ntasks-per-node=1" in srun
  assert _main_args(srun)[:2 + len(ODD_ARGS)] == [CONFIG, "--workdir=/shared/w", *ODD_ARGS]
  assert exports["JAX_LOCAL_DEVICE_IDS"] == "0,1,2,3"  # all 4 GPUs of the node
  # The coordinator is the one JAX's own SLURM detection derives from the same variables.
  from jax._src.clusters import slurm_cluster  # pylint: disable=g-import-not-at-top
  with pytest.MonkeyPatch.context() as mp:
    for k, v in env.items():
      mp.setenv(k, v)
    expected = slurm_cluster.SlurmCluster.get_coordinator_address(None, None)
  assert exports["JAX_COORDINATOR_ADDRESS"] == expected == "gpu007:" + str(123456 % 4096 + 61440)


def test_sbatch_script_typed_gpu_count_and_missing_workdir():
  proc = _run("slurm.sbatch", CONFIG, "--workdir=/w",
              env=_slurm_env(SLURM_GPUS_ON_NODE="", SLURM_GPUS_PER_NODE="a100:2",
                             SLURM_JOB_NODELIST="node1", SLURM_STEP_NODELIST="node1"))
  (command,) = _commands(proc)
  assert "JAX_LOCAL_DEVICE_IDS=0,1" in command and "JAX_COORDINATOR_ADDRESS=node1:" + \
      str(123456 % 4096 + 61440) in command
  proc = _run("slurm.sbatch", CONFIG, env=_slurm_env())
  assert proc.returncode != 0 and "--workdir" in proc.stderr and proc.stdout == ""

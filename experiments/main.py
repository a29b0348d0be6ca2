r"""Runs one experiment: train, select on validation, evaluate, write results.json.

  python -m experiments.main --config=experiments/configs/mlp.py:bibtex --workdir=/tmp/mlp \
      --config.train.steps=5000 --config.data.data_dir=DATA

Multi-host: start the same command once per process with `--multihost` (TPU pods,
SLURM, Open MPI: JAX detects the cluster) or with `--coordinator_address=HOST:PORT
--num_processes=N --process_id=I` (see launch/README.md).

A MULAN folder given by path (`--config=experiments/configs/<method>.py:mulan
--config.data.path=DIR`) first selects the config's settings on held-out training rows
within the budget of `config.tune` (experiments/tune.py; docs/tuning.md), then trains
the chosen setting in --workdir; `--config.tune.enabled=False` trains the config as is.

SIGTERM (a preemption notice; on a TPU pod also the platform's own) saves a checkpoint at
the next step, on every process alike, and exits with status 75: the same command
resumes. In a multi-process run, one process's failure ends every process within
seconds with that process's status and reason (experiments/cli.py; launch/README.md).

A workdir that already holds a run resumes it; a config that differs from the run's in
what it trains is refused unless `--allow_config_change`. A mistake in the command line,
the config or the data ends the command with one line on stderr and exit status 2; a run
that fails before its first checkpoint in a fresh workdir removes what it had created
there (`workdirs.removed_if_failed`).

Output: the selected model's test metrics as a short table on stdout; progress bars on
stderr when it is a terminal (`--progress`); the INFO log in WORKDIR/logs/main.log
(`--verbose`: on stderr too); warnings and errors on stderr.
"""

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags

from energynets.train import faults
from energynets.train import quiet_library_logs
from energynets.train import storage
from experiments import builders
from experiments import cli
from experiments import console
from experiments import train
from experiments import tune

_CONFIG = config_flags.DEFINE_config_file(
  "config", "experiments/configs/mlp.py", "experiment config file[:dataset]", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "directory for checkpoints, logs and results")
flags.mark_flags_as_required(["workdir"])
_MULTIHOST = flags.DEFINE_bool(
  "multihost",
  False,
  "join a multi-process run by jax.distributed.initialize(), the "
  "cluster detected by JAX (TPU pods, SLURM, Open MPI; JAX_COORDINATOR_ADDRESS if set); "
  "implied by --coordinator_address",
)
_COORDINATOR = flags.DEFINE_string(
  "coordinator_address",
  None,
  "HOST:PORT of process 0, which serves the coordinator of "
  "a multi-process run (with --num_processes and --process_id)",
)
_ALLOW_CONFIG_CHANGE = flags.DEFINE_bool(
  "allow_config_change",
  False,
  "resume the run in --workdir even though the config "
  "differs from the one it was trained with in what it trains (optimizer, model, "
  "method, data, ...)",
)
_NUM_PROCESSES = flags.DEFINE_integer(
  "num_processes", None, "number of processes of a multi-process run"
)
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "this process's index in 0..num_processes-1")
_HEARTBEAT_TIMEOUT = flags.DEFINE_integer(
  "heartbeat_timeout_s",
  train.HEARTBEAT_TIMEOUT_S,
  "multi-process runs: a process "
  "silent for this many seconds (killed, hung) is lost and JAX ends the others",
)
_SHUTDOWN_TIMEOUT = flags.DEFINE_integer(
  "shutdown_timeout_s",
  train.SHUTDOWN_TIMEOUT_S,
  "multi-process runs: how long a process that ends waits for the others at JAX's shutdown barrier",
)
_VERBOSE, _PROGRESS = console.define_flags()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  if _MULTIHOST.value or _COORDINATOR.value:
    try:
      train.initialize_distributed(
        _COORDINATOR.value,
        _NUM_PROCESSES.value,
        _PROCESS_ID.value,
        heartbeat_timeout_s=_HEARTBEAT_TIMEOUT.value,
        shutdown_timeout_s=_SHUTDOWN_TIMEOUT.value,
      )
    except ValueError as e:
      raise cli.UserError(e) from None
    # Another process's failure ends this one at once, wherever it is blocked.
    faults.watch_peers(cli.stop_for_peer)
  workdir = storage.workdir_path(_WORKDIR.value)
  with console.logged_run(workdir, "main", verbose=_VERBOSE.value):
    with faults.preempt_on_sigterm():
      results = _run(_CONFIG.value)
  if jax.process_index() == 0:
    print(console.results_table(results, workdir / "results.json"), flush=True)
  # The processes end together, so that JAX's shutdown barrier waits for no one.
  faults.finish_together()


def _run(config) -> dict:
  """Trains and evaluates `config` in --workdir (tuning it first where it asks); returns
  the results (results.json's content)."""
  try:
    # A misspelled method or stage option, or a builder path that does not import, is
    # the command line's mistake: refused before the data loads.
    builders.check_builders(config)
  except ValueError as e:
    raise cli.UserError(e) from None
  workdir = _WORKDIR.value
  assert workdir is not None, "--workdir is a required flag"
  if config.get("tune") is not None and config.tune.enabled and storage.is_local(workdir):
    # The folds of a setting, and the final run, share compiled programs (kept on local
    # disk only: an object store would be slower than compiling again).
    tune.use_compilation_cache(storage.workdir_path(workdir) / "xla_cache")
  results = tune.run_experiment(
    config,
    workdir,
    config_file=config_flags.get_config_filename(flags.FLAGS["config"]),
    allow_config_change=_ALLOW_CONFIG_CHANGE.value,
  )
  logging.info("results: %s", {k: round(v, 4) for k, v in results.items() if k != "meta"})
  return results


if __name__ == "__main__":
  cli.run(main, data_dir_flag="--config.data.data_dir")

"""A user's own config file and objective builder that fail on the last process of a
multi-process run: the faults `benchmarks.faults` and tests/test_faults.py inject, through
the hooks the command line has for outside code (`--config=FILE:ARG`, and a
`config.method` that names a builder `"module:function"`), with no test-only branch in
the library.

  --config=benchmarks/faulty_run.py:missing_data  the last process's data directory is
                                                  missing (genbase from
                                                  $ENERGYNETS_DATA_DIR on the others)
  --config=benchmarks/faulty_run.py:step          the objective's update raises on the
                                                  last process in step FAIL_AT_STEP
  --config=benchmarks/faulty_run.py:none          the same run as `step`, without a fault

The config reads which process it is from the command line (`--process_id`,
`--num_processes`: a local pod's processes, `launch/local_pod.sh`), since it is loaded
before the process joins the run.
"""

import itertools
import sys

import jax
from jax.experimental import io_callback
import jax.numpy as jnp
import numpy as np

from experiments import builders
from experiments.configs import mlp

# The step whose update fails on the last process (`failing_local`).
FAIL_AT_STEP = 5
# Where the last process looks for the data in `missing_data`: nothing is there.
MISSING_DATA_DIR = "/nonexistent/energynets_data"


def _flag(name: str, default: int) -> int:
  """The integer value of `--name=V` on this process's command line, else `default`."""
  for arg in sys.argv[1:]:
    if arg.startswith(f"--{name}="):
      return int(arg.split("=", 1)[1])
  return default


def _is_last_process() -> bool:
  return _flag("process_id", 0) == _flag("num_processes", 1) - 1


def get_config(fault: str = "none"):
  """A tiny mlp run (`mlp.py`: genbase for `missing_data`, else 64 synthetic rows) with
  the fault `fault` on the last process."""
  if fault not in ("none", "missing_data", "step"):
    raise ValueError(f"unknown fault {fault!r}; known: none, missing_data, step")
  config = mlp.get_config("genbase" if fault == "missing_data" else "synthetic")
  config.model.hidden = (16,)
  config.model.dropout = config.model.input_dropout = 0.0
  if fault != "missing_data":
    config.data.num_train = 64
  config.train.steps = 12
  config.train.batch_size = 16
  config.train.eval_batch_size = 200
  config.train.log_every = 1
  config.train.eval_every = 6
  config.train.checkpoint_every = 3
  config.train.tensorboard = False
  if fault == "missing_data" and _is_last_process():
    config.data.data_dir = MISSING_DATA_DIR  # this host lacks the data
  if fault == "step":
    config.method = "benchmarks.faulty_run:failing_local"
  return config


def failing_local(config, dataset, optimizer):
  """The mlp's objective (method `local`) whose update, on the last process only, calls
  back to the host, where step FAIL_AT_STEP raises: a user's objective that fails on
  one host in the middle of training."""
  objective = builders.OBJECTIVE_BUILDERS["local"](config, dataset, optimizer)
  # The callback runs on this device only: the last process's.
  device = jax.sharding.SingleDeviceSharding(jax.devices()[-1])
  steps = itertools.count(1)

  def check(loss):
    step = next(steps)
    if step == FAIL_AT_STEP:
      raise RuntimeError(f"injected fault in step {step} on process {jax.process_index()}")
    return np.float32(loss)

  def update(state, batch, rng):
    state, metrics = objective.update(state, batch, rng)
    checked = io_callback(
      check, jax.ShapeDtypeStruct((), jnp.float32), metrics["loss"], sharding=device
    )
    return state, {**metrics, "loss": checked}

  return objective._replace(update=update)

"""Helpers of the multi-process tests: experiment runs as separate processes on this
machine, joined by a loopback coordinator (`experiments.main --coordinator_address`).

`_subprocess_env(n)` gives a process n forced CPU devices (and launch/worker.sh this
interpreter), `_free_port` a coordinator port, `_run_all` starts runs together and fails
the test, with their logs, on the first that fails; `MULTIHOST_FLAGS` is a tiny
multi-label run (the mlp on 64 synthetic rows).
"""

import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

STEPS = 6
MULTIHOST_FLAGS = (
  "--config=experiments/configs/mlp.py:synthetic",
  "--config.data.num_train=64",
  f"--config.train.steps={STEPS}",
  "--config.train.batch_size=16",
  "--config.train.eval_batch_size=200",
  "--config.train.eval_every=3",
  "--config.train.log_every=3",
  "--config.train.checkpoint_every=3",
  "--config.train.tensorboard=False",
  # Dropout: every process must draw the masks of its rows of the global batch.
  "--config.model.dropout=0.2",
)
MULTIHOST_TIMEOUT_S = 240


def _subprocess_env(num_devices: int, *xla_flags: str) -> dict[str, str]:
  env = {
    k: v
    for k, v in os.environ.items()
    # A proxy would be asked for the loopback coordinator.
    if not k.lower().endswith("_proxy")
  }
  # ENERGYNETS_PYTHON: launch/worker.sh runs this interpreter, not the python on PATH
  # (which need not have energynets' dependencies when the suite runs from a venv).
  env.update(
    JAX_PLATFORMS="cpu",
    PYTHONPATH=str(REPO_ROOT),
    ENERGYNETS_PYTHON=sys.executable,
    # The inherited flags (conftest's) first, so that the device count wins.
    XLA_FLAGS=" ".join(
      [
        os.environ.get("XLA_FLAGS", ""),
        f"--xla_force_host_platform_device_count={num_devices}",
        *xla_flags,
      ]
    ).strip(),
  )
  return env


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _run_all(runs: dict[str, tuple[list[str], dict]], log_dir: pathlib.Path) -> None:
  """Starts every `name: (argv, env)` at once; fails, stopping the rest, on the first
  non-zero exit or at the timeout, with the logs of all of them."""
  procs, logs = {}, {}
  for name, (argv, env) in runs.items():
    logs[name] = log_dir / f"{name}.log"
    with open(logs[name], "w") as log:
      procs[name] = subprocess.Popen(
        argv, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
      )
  deadline = time.monotonic() + MULTIHOST_TIMEOUT_S
  try:
    while any(p.poll() is None for p in procs.values()):
      failed = [n for n, p in procs.items() if p.poll() not in (None, 0)]
      if failed or time.monotonic() > deadline:
        break
      time.sleep(0.2)
  finally:
    for p in procs.values():
      if p.poll() is None:
        p.kill()
      p.wait()
  bad = {n: p.returncode for n, p in procs.items() if p.returncode != 0}
  if bad:
    text = "\n".join(
      f"--- {n} (exit {procs[n].returncode})\n{logs[n].read_text()[-5000:]}" for n in procs
    )
    pytest.fail(f"runs {bad} failed or timed out after {MULTIHOST_TIMEOUT_S} s:\n{text}")

"""How the processes of a run stop together: a preemption saves, a failure ends them all.

Preemption. A preempted machine gets SIGTERM (a spot or preemptible VM, SLURM's
preemption, a TPU maintenance event; JAX forwards such a notice to every process of a
multi-process run). `fit` asks `preemption_reached(step)` at every step: in a
multi-process run that is `multihost_utils.reached_preemption_sync_point`, true on
every process at the same step once any of them got the notice; in a single process,
true once SIGTERM arrived inside `preempt_on_sigterm()` (the experiment binaries
enter it). `fit` then saves that step's checkpoint and raises `Preempted`; the
binaries exit with `EXIT_PREEMPTED`, and the same command resumes from that step.

Failure. A process of a multi-process run that fails records its exit status and
one-line reason in JAX's coordination service (`announce_failure`) and ends at once;
every other process watches for that record (`watch_peers`, a background thread, so
that a process blocked in a collective with the failed one still sees it) and ends
with the failed process's status and reason. A process that dies without a word
(killed) is found by JAX's heartbeats (`jax.distributed.initialize`'s
`heartbeat_timeout_seconds`) or, on CPU, by the collective that loses its peer.
"""

import atexit
from collections.abc import Callable
from collections.abc import Iterator
import contextlib
import signal
import threading
import time

import jax
from jax.experimental import multihost_utils

__all__ = [
  "announce_failure",
  "coordination_client",
  "COORDINATOR_WAIT_S",
  "end_after_failure",
  "EXIT_PREEMPTED",
  "finish_together",
  "joined",
  "peer_failure",
  "preempt_on_sigterm",
  "Preempted",
  "preemption_reached",
  "request_preemption",
  "watch_peers",
]

# The exit status of a run that stopped at a preemption after saving a checkpoint:
# sysexits.h's EX_TEMPFAIL ("try again later"), distinct from a failure (1, 2), from a
# process killed by a signal (128 + N) and from a clean end (0).
EXIT_PREEMPTED = 75

# The coordination-service keys of the processes that failed: `<prefix><process>`,
# valued `<exit status>\n<one-line reason>`.
_FAILED = "energynets/failed/"

_sigterm = threading.Event()


class Preempted(Exception):
  """Training stopped at a preemption notice after saving the checkpoint of `step`.

  Attributes:
    step: the step saved, where the same command resumes.
  """

  def __init__(self, step: int, directory: str):
    super().__init__(
      f"preempted at step {step}: saved the checkpoint of step {step} in "
      f"{directory}; rerun to resume"
    )
    self.step = step


def coordination_client():
  """JAX's coordination-service client of a multi-process run (its key-value store and
  barriers), or None before `jax.distributed.initialize` and in a single process."""
  from jax._src import distributed  # pylint: disable=g-import-not-at-top

  return distributed.global_state.client


def joined() -> bool:
  """Whether this process has joined a multi-process run (`jax.distributed.initialize`)."""
  return coordination_client() is not None


@contextlib.contextmanager
def preempt_on_sigterm() -> Iterator[None]:
  """Inside it, SIGTERM asks a single-process run to save and stop (`preemption_reached`)
  instead of killing it.

  In a multi-process run JAX's preemption notifier already takes SIGTERM, and off the
  main thread Python cannot install a handler: there it does nothing.
  """
  if joined() or threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = signal.signal(signal.SIGTERM, lambda *_: _sigterm.set())
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


def request_preemption() -> None:
  """What SIGTERM does inside `preempt_on_sigterm`: the next `preemption_reached` of a
  single-process run is true."""
  _sigterm.set()


def preemption_reached(step: int) -> bool:
  """Whether to save `step` and stop for a preemption notice.

  Call it after every training step, on every process, with the step just finished:
  in a multi-process run it is true on all of them at the same step.

  Args:
    step: the number of steps trained.

  Returns:
    True once: at the step every process saves.
  """
  if joined():
    try:
      return multihost_utils.reached_preemption_sync_point(step)
    except RuntimeError:  # JAX's preemption service is switched off
      return False
  if _sigterm.is_set():
    _sigterm.clear()
    return True
  return False


def announce_failure(status: int, reason: str) -> None:
  """Records that this process fails with exit `status` and one-line `reason`, for the
  other processes of a multi-process run (`watch_peers`); a single process: nothing."""
  client = coordination_client()
  if client is None:
    return
  try:
    client.key_value_set(f"{_FAILED}{jax.process_index()}", f"{status}\n{reason}")
  except Exception:  # pylint: disable=broad-except  (the service is gone: nobody to tell)
    pass


def peer_failure(wait_s: float = 0.0) -> tuple[int, int, str] | None:
  """The failure another process of the run announced, waiting up to `wait_s` for one.

  Returns:
    `(process, exit status, reason)` of the lowest-numbered process that announced a
    failure, or None (none did, or this is a single process).
  """
  client = coordination_client()
  if client is None:
    return None
  me = jax.process_index()
  deadline = time.monotonic() + wait_s
  while True:
    try:
      entries = client.key_value_dir_get(_FAILED)
    except Exception:  # pylint: disable=broad-except  (the service is gone)
      entries = []
    failed = sorted((int(k.rsplit("/", 1)[-1]), v) for k, v in entries)
    failed = [(p, v) for p, v in failed if p != me]
    if failed:
      process, value = failed[0]
      status, reason = value.split("\n", 1)
      return process, int(status), reason
    if time.monotonic() >= deadline:
      return None
    time.sleep(0.1)


# The keys of the processes that are about to end after a failure: `<prefix><process>`.
_ENDED = "energynets/ended/"
# How long process 0, which serves the coordination service, waits for the others to
# end first after a failure (`end_after_failure`).
COORDINATOR_WAIT_S = 5.0


def end_after_failure(timeout_s: float = COORDINATOR_WAIT_S) -> None:
  """Call right before a process of a failed multi-process run exits.

  Records that this process ends; process 0 then waits (up to `timeout_s`) until every
  other process has recorded it too. Process 0 serves JAX's coordination service, and
  a process that loses it aborts at once (status 134, JAX's fatal message), before it
  can print why the run ended or exit with the failed process's status.
  """
  client = coordination_client()
  if client is None:
    return
  me, count = jax.process_index(), jax.process_count()
  try:
    client.key_value_set(f"{_ENDED}{me}", "1")
  except Exception:  # pylint: disable=broad-except  (the service is gone)
    return
  if me != 0:
    return
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    try:
      ended = {int(k.rsplit("/", 1)[-1]) for k, _ in client.key_value_dir_get(_ENDED)}
    except Exception:  # pylint: disable=broad-except
      return
    if len(ended) >= count:
      # Recorded right before their exit: a moment for the exit itself.
      time.sleep(0.5)
      return
    time.sleep(0.05)


_watching = threading.Event()


def watch_peers(
  on_failure: Callable[[int, int, str], None], interval_s: float = 1.0, grace_s: float = 1.0
) -> None:
  """Calls `on_failure(process, status, reason)` from a background thread once another
  process of the run has announced a failure (`announce_failure`), `grace_s` after it
  is seen: a refusal every process makes alike (a config they cannot share) ends each
  with its own message, not the first one's.

  `on_failure` should end this process (`os._exit`): it runs while the main thread may
  be blocked in a collective with the failed process. The watch stops when the
  interpreter exits, before JAX disconnects from the coordination service. A single
  process: nothing.

  Args:
    on_failure: what to do about the failed process.
    interval_s: how often to look.
    grace_s: how long this process may still end by itself.
  """
  if not joined() or _watching.is_set():
    return
  _watching.set()

  def watch():
    while _watching.is_set():
      failure = peer_failure()
      if failure is not None:
        time.sleep(grace_s)
        if _watching.is_set():
          on_failure(*failure)
        return
      time.sleep(interval_s)

  threading.Thread(target=watch, name="energynets-peer-watch", daemon=True).start()
  # Registered after jax.distributed.initialize registered its shutdown, so it runs
  # first (last registered, first run): a clean exit is not taken for a failure.
  atexit.register(_watching.clear)


def finish_together(timeout_s: float = 24 * 3600) -> None:
  """Waits until every process of a multi-process run gets here, so that they end
  together: JAX's shutdown barrier then waits for no one (its timeout can stay short).
  A process that fails meanwhile ends the wait (`watch_peers`, JAX's heartbeats)."""
  client = coordination_client()
  if client is not None:
    client.wait_at_barrier("energynets/finished", int(timeout_s * 1000))

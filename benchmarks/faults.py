r"""The fault table: how a 2-process pod ends when one process fails or is preempted.

  python -m benchmarks.faults                          # results/faults/faults.md and .json
  python -m benchmarks.faults --out=/tmp/faults.md --only=sigterm

(In a folder of its own, like results/scaling/: the papers' folders of results/ hold
the results that the reproduction report embeds.)

Every row runs `bash launch/local_pod.sh 2 ...` (each process started through
launch/worker.sh, as tpu_pod.sh and slurm.sbatch start them on many hosts) on a tiny run
(benchmarks/faulty_run.py: a small MLP, one CPU device per process) with one fault on
process 1, injected from outside the library:

- missing data: process 1's data directory does not exist (a host without the data);
- bad device count: `--config.train.num_devices=1` on a 2-process run (a mesh without
  process 1's device);
- exception in step 5: the objective's update raises on process 1 in step 5 (a host
  callback of a user's objective);
- SIGKILL: process 1 killed after the first checkpoint (a machine lost without warning);
- SIGTERM: both processes get SIGTERM mid-run (a preemption notice).

Columns: seconds to exit, per process, from the fault (the first process's exit for an
injected fault, since the failing process ends at once; the signal for SIGKILL and
SIGTERM); each process's exit status (worker.sh's log footer); the lines the launcher
printed after the workers started; steps lost, the steps trained past the last
checkpoint, which a rerun trains again (from metrics.jsonl, written every step for
the injected faults, every 10 steps for the signals: up to 9 more there).

The runner (`start_pod`, `watch`, `run_fault`) is what tests/test_faults.py asserts on.
It reads /proc to see when each worker's python process ends (Linux).
"""

from collections.abc import Callable
import dataclasses
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

from energynets.data import datadir
from energynets.train import faults as faults_lib
from experiments import cli

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
LOCAL_POD = REPO_ROOT / "launch" / "local_pod.sh"
# experiments.main's status after saving at a preemption notice.
EXIT_PREEMPTED = faults_lib.EXIT_PREEMPTED

CONFIG = "--config=benchmarks/faulty_run.py"
# A run long enough to be signalled mid-run: metrics every 10 steps, a checkpoint every 100.
LONG_FLAGS = (
  "--config.train.steps=3000",
  "--config.train.log_every=10",
  "--config.train.eval_every=500",
  "--config.train.checkpoint_every=100",
)


def default_data_dir() -> str:
  """The data directory the runs read when none is given: the library's
  (`$ENERGYNETS_DATA_DIR`, else the per-user default)."""
  return str(datadir.resolve_data_dir(must_exist=False))


def pod_env(**extra: str) -> dict[str, str]:
  """The environment of a local pod's launcher: this interpreter for the workers
  (ENERGYNETS_PYTHON: not whatever `python` is on PATH), no proxy for the loopback
  coordinator, CPU devices."""
  env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
  env.update(ENERGYNETS_PYTHON=sys.executable, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO_ROOT))
  env.update(extra)
  return env


def _running(pid: int) -> bool:
  try:
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
  except OSError:
    return False
  return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclasses.dataclass
class Pod:
  """`launch/local_pod.sh N FLAGS --workdir=WORKDIR`, running in the background."""

  n: int
  workdir: pathlib.Path
  proc: subprocess.Popen
  stderr_path: pathlib.Path
  started: float

  def log(self, worker: int) -> pathlib.Path:
    return self.workdir / "logs" / f"worker_{worker}.log"

  def python_pids(self) -> dict[int, int]:
    """Each started worker's python process, from the header worker.sh logs."""
    pids = {}
    for i in range(self.n):
      try:
        found = re.findall(rf"^=== worker {i} on .*, pid (\d+),", self.log(i).read_text(), re.M)
      except OSError:
        continue
      if found:
        pids[i] = int(found[-1])
    return pids

  def checkpoints(self) -> list[int]:
    folder = self.workdir / "checkpoints"
    return (
      sorted(int(p.name) for p in folder.glob("*") if p.name.isdigit()) if folder.is_dir() else []
    )

  def trained(self) -> int:
    """The last step in metrics.jsonl (0: none yet)."""
    try:
      lines = (self.workdir / "metrics.jsonl").read_text().splitlines()
    except OSError:
      return 0
    steps = []
    for line in lines:
      try:
        steps.append(int(json.loads(line)["step"]))
      except (ValueError, KeyError):  # a line being written
        pass
    return max(steps, default=0)


@dataclasses.dataclass
class Outcome:
  """How a pod ended.

  Attributes:
    status: the launcher's exit status.
    stderr: everything the launcher printed.
    statuses: each worker's exit status (None: no footer in its log).
    exit_s: each worker's python process's end, seconds after the fault.
    launcher_s: the launcher's end, seconds after the fault.
    trained: the last step in metrics.jsonl.
    checkpoints: the steps of the checkpoints left.
    logs: each worker's log.
  """

  status: int
  stderr: str
  statuses: list[int | None]
  exit_s: list[float | None]
  launcher_s: float
  trained: int
  checkpoints: list[int]
  logs: list[str]

  @property
  def messages(self) -> list[str]:
    """The launcher's lines about how the run ended (after its start-up lines)."""
    return [
      l
      for l in self.stderr.splitlines()
      if l.startswith("local_pod: ") and " worker(s) of " not in l
    ]

  @property
  def steps_lost(self) -> int:
    return max(self.trained - max(self.checkpoints, default=0), 0)

  def report(self) -> str:
    return "\n".join(
      [
        f"--- launcher (exit {self.status})\n{self.stderr}",
        *(f"--- worker {i}\n{log[-4000:]}" for i, log in enumerate(self.logs)),
      ]
    )


def as_from_a_terminal() -> None:
  """In the launcher's child before exec: SIGINT and SIGTERM at their defaults and
  unblocked, as a shell starts a command. A blocked or ignored signal survives exec, and
  bash then never runs its trap (a launcher started with SIGINT blocked ignores Ctrl-C
  and exits 0 when its workers finish); the calling process may hold either, left there
  by a library or by whatever ran in it before."""
  for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_DFL)
  signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def start_pod(
  n: int, flags: tuple[str, ...], workdir: pathlib.Path, env: dict[str, str] | None = None
) -> Pod:
  """Starts `launch/local_pod.sh n FLAGS --workdir=workdir` in the background."""
  workdir.parent.mkdir(parents=True, exist_ok=True)
  stderr_path = workdir.parent / f"{workdir.name}.launcher.err"
  with open(stderr_path, "w") as err:
    proc = subprocess.Popen(
      ["bash", str(LOCAL_POD), str(n), *flags, f"--workdir={workdir}"],
      cwd=REPO_ROOT,
      env=env or pod_env(),
      stdout=subprocess.DEVNULL,
      stderr=err,
      preexec_fn=as_from_a_terminal,
    )
  return Pod(n, workdir, proc, stderr_path, time.monotonic())


def watch(pod: Pod, fault: Callable[[Pod], bool] | None = None, timeout_s: float = 600) -> Outcome:
  """Waits for `pod` to end, timing each worker's python process.

  Args:
    pod: the running pod.
    fault: called every 50 ms until it returns True, which marks the fault's moment
      (it sends a signal, say); None: the fault is the first python process to end.
    timeout_s: the pod is stopped (TERM to the launcher, then KILL) after this long.

  Returns:
    The `Outcome`, times measured from the fault.
  """
  fault_at: float | None = None
  ended: dict[int, float | None] = {}  # worker -> when it ended (None: still running)
  deadline = pod.started + timeout_s
  while True:
    now = time.monotonic()
    pids = pod.python_pids()
    for i, pid in pids.items():
      if i not in ended and not _running(pid):
        ended[i] = now
    if fault is not None and fault_at is None and fault(pod):
      fault_at = time.monotonic()
    if pod.proc.poll() is not None:
      launcher_end = time.monotonic()
      break
    if now > deadline:
      pod.proc.send_signal(signal.SIGINT)  # the launcher stops every worker
      try:
        pod.proc.wait(timeout=30)
      except subprocess.TimeoutExpired:
        pod.proc.kill()
        pod.proc.wait()
      launcher_end = time.monotonic()
      break
    time.sleep(0.05)
  for i, pid in pod.python_pids().items():
    ended.setdefault(i, launcher_end if not _running(pid) else None)
  if fault_at is None:
    fault_at = (
      min((t for t in ended.values() if t is not None), default=launcher_end)
      if fault is None
      else launcher_end
    )
  statuses, logs = [], []
  for i in range(pod.n):
    try:
      text = pod.log(i).read_text(errors="replace")
    except OSError:
      text = ""
    logs.append(text)
    footer = re.findall(rf"^=== worker {i}: exit status (\d+)$", text, re.M)
    statuses.append(int(footer[-1]) if footer else None)
  return Outcome(
    status=pod.proc.returncode,
    stderr=pod.stderr_path.read_text(),
    statuses=statuses,
    exit_s=[
      None if (end := ended.get(i)) is None else round(end - fault_at, 2) for i in range(pod.n)
    ],
    launcher_s=round(launcher_end - fault_at, 2),
    trained=pod.trained(),
    checkpoints=pod.checkpoints(),
    logs=logs,
  )


def signal_when(
  condition: Callable[[Pod], bool], sig: int, workers: tuple[int, ...]
) -> Callable[[Pod], bool]:
  """A `watch` fault: once `condition(pod)` holds, `sig` to the python process of each
  of `workers` (as a preemption or a lost machine signals them, not through the
  launcher)."""

  def fault(pod: Pod) -> bool:
    pids = pod.python_pids()
    if len(pids) < pod.n or not condition(pod):
      return False
    for w in workers:
      os.kill(pids[w], sig)
    return True

  return fault


def trained_some(pod: Pod) -> bool:
  return pod.trained() > 0


def checkpointed(pod: Pod) -> bool:
  return bool(pod.checkpoints())


@dataclasses.dataclass(frozen=True)
class Fault:
  """One row of the table: a name, the run's flags, the fault (`watch`'s), the text the
  launcher's output must hold."""

  name: str
  description: str
  flags: tuple[str, ...]
  fault: Callable[[Pod], bool] | None
  expected: str


def faults() -> list[Fault]:
  """The rows: three faults injected on process 1, a SIGKILL, and a preemption."""
  return [
    Fault(
      "missing_data",
      "missing data on process 1",
      (f"{CONFIG}:missing_data",),
      None,
      "/nonexistent/energynets_data",
    ),
    Fault(
      "bad_device_count",
      "config.train.num_devices=1 on 2 processes",
      (f"{CONFIG}:none", "--config.train.num_devices=1"),
      None,
      "num_devices=1 leaves out devices of the 2 processes",
    ),
    Fault(
      "step_exception",
      "exception in step 5 on process 1",
      (f"{CONFIG}:step",),
      None,
      "injected fault in step 5 on process 1",
    ),
    Fault(
      "sigkill",
      "SIGKILL of process 1 after its first checkpoint",
      (f"{CONFIG}:none", *LONG_FLAGS),
      signal_when(checkpointed, signal.SIGKILL, (1,)),
      "worker 1 exited with status 137",
    ),
    Fault(
      "sigterm",
      "SIGTERM to both processes mid-run (preemption)",
      (f"{CONFIG}:none", *LONG_FLAGS),
      signal_when(trained_some, signal.SIGTERM, (0, 1)),
      "preempted at step",
    ),
  ]


def run_fault(
  fault: Fault, root: pathlib.Path, data_dir: str = "", timeout_s: float = 600
) -> Outcome:
  """Runs `fault`'s 2-process pod in `root/<name>` and returns how it ended."""
  env = pod_env(ENERGYNETS_DATA_DIR=data_dir or default_data_dir())
  pod = start_pod(2, fault.flags, root / fault.name, env)
  return watch(pod, fault.fault, timeout_s)


def _row(fault: Fault, outcome: Outcome) -> dict:
  return {
    "fault": fault.name,
    "description": fault.description,
    "processes": 2,
    "exit_seconds": outcome.exit_s,
    "launcher_seconds": outcome.launcher_s,
    "exit_statuses": outcome.statuses,
    "launcher_status": outcome.status,
    "launcher_message": outcome.messages,
    "steps_trained": outcome.trained,
    "checkpoints": outcome.checkpoints,
    "steps_lost": outcome.steps_lost,
    "expected_in_message": fault.expected,
    "message_ok": fault.expected in outcome.stderr,
  }


def _markdown(rows: list[dict], seconds: float) -> str:
  from benchmarks import common  # pylint: disable=g-import-not-at-top

  lines = [
    f"Machine: {common.machine_description()}; load average {os.getloadavg()[0]:.1f} at "
    f"the end; {seconds:.0f} s in all.",
    "",
    "A 2-process `launch/local_pod.sh` pod (one CPU device per process) of the tiny run "
    "of benchmarks/faulty_run.py, one fault per row. Seconds to exit: each process's "
    "python (process 0, process 1) and the launcher, from the fault (the first process's "
    "exit for an injected fault, the signal for SIGKILL and SIGTERM). Exit status `-`: "
    "killed by the launcher before worker.sh logged one. Steps lost: steps trained past "
    "the last checkpoint, from metrics.jsonl (every step for the injected faults; every "
    "10 for the signals, so up to 9 more there). TMP: the run's temporary directory.",
    "",
    "| fault | processes | seconds to exit (0, 1; launcher) | exit statuses (0, 1; "
    "launcher) | the launcher printed | steps lost |",
    "|---|---|---|---|---|---|",
  ]
  for r in rows:
    secs = ", ".join("-" if s is None else f"{s:.1f}" for s in r["exit_seconds"])
    statuses = ", ".join("-" if s is None else str(s) for s in r["exit_statuses"])
    message = "<br>".join(f"`{m}`" for m in r["launcher_message"]).replace("|", "\\|")
    lines.append(
      f"| {r['description']} | {r['processes']} | {secs}; "
      f"{r['launcher_seconds']:.1f} | {statuses}; {r['launcher_status']} | "
      f"{message} | {r['steps_lost']} |"
    )
  lines += [
    "",
    "Exit statuses: 2 a mistake in the command, the config or the data; 1 any "
    "other failure; 75 preempted after saving a checkpoint (rerun to resume); 137 "
    "killed by SIGKILL. Every process of a failed run exits with the failed "
    "process's status.",
  ]
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  from absl import flags  # pylint: disable=g-import-not-at-top

  from benchmarks import common  # pylint: disable=g-import-not-at-top

  del argv
  out = flags.FLAGS.out
  only = [n for n in flags.FLAGS.only.split(",") if n]
  chosen = [f for f in faults() if not only or f.name in only]
  if only and len(chosen) != len(only):
    raise SystemExit(
      f"--only: unknown fault in {only}; known: {', '.join(f.name for f in faults())}"
    )
  started = time.monotonic()
  rows = []
  with tempfile.TemporaryDirectory(prefix="energynets_faults_") as root:
    for fault in chosen:
      outcome = run_fault(fault, pathlib.Path(root), flags.FLAGS.data_dir)
      rows.append(_row(fault, outcome))
      rows[-1]["launcher_message"] = [m.replace(root, "TMP") for m in rows[-1]["launcher_message"]]
      print(json.dumps(rows[-1]), flush=True)
  seconds = time.monotonic() - started
  common.write_report(out, "benchmarks.faults", _markdown(rows, seconds))
  with open(os.path.splitext(out)[0] + ".json", "w") as f:
    json.dump({"rows": rows, "seconds": round(seconds, 1)}, f, indent=2)


if __name__ == "__main__":
  from absl import flags  # pylint: disable=g-import-not-at-top

  flags.DEFINE_string("out", "results/faults/faults.md", "the table (and its .json beside it)")
  flags.DEFINE_string("only", "", "comma-separated fault names (default: all)")
  flags.DEFINE_string(
    "data_dir",
    "",
    "the data directory (default: $ENERGYNETS_DATA_DIR, "
    "else the per-user default of energynets.data.datadir)",
  )
  cli.run(main)

r"""The benchmarks to run when an accelerator is lent: the suite, the e2e gradients and a
data-parallel step.

One command, sized to finish in under 10 minutes on one GPU, that writes beside the CPU
results (`results/suite/`, `results/e2e/e2e_gradients.md`):

- `<out_dir>/e2e_gradients.md`: `benchmarks.e2e_gradients` (scan / remat / adjoint
  gradients through T unrolled GBI steps; its default T = 5, 20, 50, 100);
- `<out_dir>/scaling/summary.md`: `benchmarks.scaling --platform=auto` on one process,
  the trainer's data-parallel step over a mesh of 1 and of all the local devices;
- `<out_dir>/summary.md` and its CSVs and PNGs: `benchmarks.suite` (every method, the
  bfloat16 rows against float32, the scaling curves, JAX against eager and
  `torch.compile`d PyTorch, which the suite puts on the GPU when JAX and PyTorch both
  see one);
- `<out_dir>/gpu_run.md`: the devices JAX and PyTorch saw, each command, its seconds
  and exit status.

The e2e benchmark runs first (about a minute), then the data-parallel step (weak and
strong scaling of three methods at one or two device counts: a minute or two); the
suite gets what is left of `--time_limit_s` and writes each section's CSV as it
finishes, so a cut-off run still leaves the sections it completed.

  python -m benchmarks.gpu_run                                  # on the accelerator
  python -m benchmarks.gpu_run --quick --out_dir=/tmp/gpu_run   # CPU smoke test, minutes
  python -m benchmarks.gpu_run --dry_run                        # check the commands' flags

With `--verdict=FLAG` (repeated) it runs cells of `benchmarks.verdict` instead, with
those flags, `--verdict_jobs` at once on the one GPU, until `--time_limit_s`; their
workdir (`--verdict_workdir`, checkpoints included) stays on the machine, and every
cell's JSON files (records, choices, configs) are packed into
`<out_dir>/verdict_cells.tgz`, which `tar xzf ... -C W` turns back into a workdir that
`benchmarks.verdict --report_only --workdir=W` reports:

  python -m benchmarks.gpu_run --out_dir=/tmp/out --verdict=--data_dir=DATA \
      --verdict=--datasets=bibtex --verdict=--sizes=500 --verdict=--nolinear \
      --verdict=--methods=mlp,dmf,seal_dynamic,spen_ssvm
"""

import os
import signal
import subprocess
import sys
import tarfile
import time

from absl import app
from absl import flags

from benchmarks import RESULTS_DIR
from benchmarks import common
from experiments import cli

_OUT_DIR = flags.DEFINE_string(
  "out_dir",
  os.path.join(RESULTS_DIR, "suite_gpu"),
  "where both benchmarks write (beside results/suite)",
)
_QUICK = flags.DEFINE_bool(
  "quick", False, "tiny shapes: a smoke test of the same commands (numbers meaningless)"
)
_DRY_RUN = flags.DEFINE_bool(
  "dry_run", False, "print the commands and check that their flags parse; run nothing"
)
_TIME_LIMIT_S = flags.DEFINE_integer(
  "time_limit_s", 570, "wall-clock budget of the whole run; each command is stopped at what is left"
)
_VERDICT = flags.DEFINE_multi_string(
  "verdict",
  [],
  "a flag of benchmarks.verdict (repeat for each): run its cells instead of the benchmarks",
)
_VERDICT_WORKDIR = flags.DEFINE_string(
  "verdict_workdir", "/tmp/verdict_gpu", "the verdict's workdir (with its checkpoints)"
)
_VERDICT_JOBS = flags.DEFINE_integer(
  "verdict_jobs", 0, "verdict cells at once, each in its own process (0: the CPUs less 3)"
)
_SUITE_ARGS = flags.DEFINE_list(
  "suite_args", [], "extra flags for benchmarks.suite (e.g. --torch_compile_mode=max-autotune)"
)

# --quick: the e2e benchmark at tiny sizes (the suite has its own --quick).
_E2E_QUICK = [
  "--num_steps=2,5",
  "--num_features=40",
  "--num_labels=12",
  "--feature_hidden=16,16",
  "--batch_size=4",
  "--repeats=1",
]


def commands(
  out_dir: str, quick: bool, suite_args=(), num_devices: int = 1
) -> list[tuple[str, list[str]]]:
  """`[(module, args)]`: the benchmarks this run executes, in order.

  Args:
    out_dir: the directory they write into.
    quick: tiny shapes (a smoke test).
    suite_args: extra flags for `benchmarks.suite`.
    num_devices: the local devices the data-parallel step spans (besides one device).

  Returns:
    The module names (`python -m` targets) and their flags.
  """
  e2e = ["--repeats=5", f"--out={os.path.join(out_dir, 'e2e_gradients.md')}"]
  counts = ",".join(str(d) for d in sorted({1, num_devices}))
  scaling = [
    "--platform=auto",
    f"--device_counts={counts}",
    f"--out_dir={os.path.join(out_dir, 'scaling')}",
  ]
  suite = [f"--out_dir={out_dir}", *suite_args]
  if quick:
    e2e = _E2E_QUICK + e2e[1:]
    scaling = ["--quick", *scaling]
    suite = ["--quick", *suite]
  return [
    ("benchmarks.e2e_gradients", e2e),
    ("benchmarks.scaling", scaling),
    ("benchmarks.suite", suite),
  ]


# With XLA's GEMM autotuning and Triton GEMM fusions, a dozen processes compiling at once
# on one H200 held one compile for over two minutes; the verdict's cells ran without both.
VERDICT_XLA_FLAGS = "--xla_gpu_autotune_level=0 --xla_gpu_enable_triton_gemm=false"
CELLS_ARCHIVE = "verdict_cells.tgz"


def verdict_command(
  out_dir: str, workdir: str, jobs: int, verdict_flags=()
) -> tuple[str, list[str]]:
  """`(module, args)` of the verdict's cells: `verdict_flags` into `workdir`, `jobs` at
  once, the report at `<out_dir>/verdict.md`."""
  return (
    "benchmarks.verdict",
    [
      f"--workdir={workdir}",
      f"--jobs={jobs}",
      f"--out={os.path.join(out_dir, 'verdict.md')}",
      *verdict_flags,
    ],
  )


def pack_cells(workdir: str, path: str) -> int:
  """Writes every JSON file under `workdir` (each cell's results, choice, configs and
  trials; not its checkpoints) into the .tgz `path`, named relative to `workdir`.

  Returns:
    How many cells (results.json files) it holds.
  """
  cells = 0
  with tarfile.open(path, "w:gz") as tar:
    for root, _, files in sorted(os.walk(workdir)):
      for name in sorted(files):
        if name.endswith((".json", ".jsonl")):
          full = os.path.join(root, name)
          tar.add(full, arcname=os.path.relpath(full, workdir))
          cells += name == "results.json"
  return cells


def run_within(command: list[str], seconds: float, env=None) -> int | str:
  """Runs `command` for at most `seconds`; its exit status, or a note that it was stopped.
  At the limit its whole process group is ended (the verdict's pool workers included)."""
  proc = subprocess.Popen(command, env=env, start_new_session=True)
  try:
    return proc.wait(timeout=max(seconds, 1))
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
      proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
    return "stopped at the time limit"


def check_flags(module: str, arg_lists: list[list[str]]) -> subprocess.CompletedProcess:
  """Imports `module` in one subprocess and parses each of `arg_lists` with its absl
  flags (nothing runs); a nonzero exit status names the first list that fails."""
  # benchmarks.scaling defines its flags only when run as the program (`_define_flags`).
  code = (
    f"from absl import flags; import {module}\n"
    f"getattr({module}, '_define_flags', lambda: None)()\n"
    f"for args in {[list(a) for a in arg_lists]!r}:\n"
    f"  flags.FLAGS.unparse_flags()\n"
    f"  flags.FLAGS(['{module}'] + args)"
  )
  return subprocess.run(
    [sys.executable, "-c", code],
    capture_output=True,
    text=True,
    timeout=300,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
  )


def _devices() -> str:
  """What JAX and PyTorch see, from a subprocess (this process keeps no device)."""
  code = (
    "import jax; print('JAX', jax.__version__, jax.devices())\n"
    "try:\n  import torch\n  print('PyTorch', torch.__version__, 'cuda' if "
    "torch.cuda.is_available() else 'no cuda', torch.cuda.get_device_name(0) if "
    "torch.cuda.is_available() else '')\nexcept ImportError:\n  print('no PyTorch')"
  )
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  return (proc.stdout + proc.stderr[-500:] if proc.returncode else proc.stdout).strip()


def _local_device_count() -> int:
  """`jax.local_device_count()`, from a subprocess (this process keeps no device)."""
  proc = subprocess.run(
    [sys.executable, "-c", "import jax; print(jax.local_device_count())"],
    capture_output=True,
    text=True,
    timeout=300,
  )
  if proc.returncode:
    raise SystemExit(f"cannot count the local devices: {proc.stderr[-1000:]}")
  return int(proc.stdout.split()[-1])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  out_dir = _OUT_DIR.value
  env = None
  if _VERDICT.value:
    jobs = _VERDICT_JOBS.value or max(1, (os.cpu_count() or 4) - 3)
    planned = [verdict_command(out_dir, _VERDICT_WORKDIR.value, jobs, _VERDICT.value)]
    xla_flags = f"{os.environ.get('XLA_FLAGS', '')} {VERDICT_XLA_FLAGS}".strip()
    env = dict(os.environ, XLA_FLAGS=xla_flags)
  else:
    planned = commands(out_dir, _QUICK.value, _SUITE_ARGS.value, _local_device_count())
  if _DRY_RUN.value:
    failed = []
    for module, args in planned:
      proc = check_flags(module, [args])
      print(
        f"python -m {module} {' '.join(args)}: "
        f"{'flags parse' if proc.returncode == 0 else 'FLAGS FAIL'}",
        flush=True,
      )
      if proc.returncode:
        failed.append(f"{module}: {proc.stderr[-1000:]}")
    if failed:
      raise SystemExit("\n".join(failed))
    return
  os.makedirs(out_dir, exist_ok=True)
  started = time.perf_counter()
  lines = ["Devices: " + _devices(), "", "| command | seconds | exit status |", "|---|---|---|"]
  print(lines[0], flush=True)
  status = 0
  for module, args in planned:
    left = _TIME_LIMIT_S.value - (time.perf_counter() - started)
    command = [sys.executable, "-m", module, *args]
    began = time.perf_counter()
    rc = run_within(command, left, env)
    seconds = time.perf_counter() - began
    status = status or (rc != 0)
    lines.append(f"| `python -m {module} {' '.join(args)}` | {seconds:.0f} | {rc} |")
    print(f"{module}: {seconds:.0f} s, exit status {rc}", flush=True)
  if _VERDICT.value and os.path.isdir(_VERDICT_WORKDIR.value):
    archive = os.path.join(out_dir, CELLS_ARCHIVE)
    cells = pack_cells(_VERDICT_WORKDIR.value, archive)
    lines += ["", f"{archive}: the JSON files of {cells} finished cells"]
    print(lines[-1], flush=True)
  common.write_report(
    os.path.join(out_dir, "gpu_run.md"), "benchmarks.gpu_run", "\n".join(lines) + "\n"
  )
  if status:
    raise SystemExit(1)


if __name__ == "__main__":
  cli.run(main)

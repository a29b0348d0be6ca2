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
"""

import os
import subprocess
import sys
import time

from absl import app
from absl import flags

from benchmarks import RESULTS_DIR
from benchmarks import common

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
    try:
      rc = subprocess.run(command, timeout=max(left, 1)).returncode
    except subprocess.TimeoutExpired:
      rc = "stopped at the time limit"
    seconds = time.perf_counter() - began
    status = status or (rc != 0)
    lines.append(f"| `python -m {module} {' '.join(args)}` | {seconds:.0f} | {rc} |")
    print(f"{module}: {seconds:.0f} s, exit status {rc}", flush=True)
  common.write_report(
    os.path.join(out_dir, "gpu_run.md"), "benchmarks.gpu_run", "\n".join(lines) + "\n"
  )
  if status:
    raise SystemExit(1)


if __name__ == "__main__":
  app.run(main)

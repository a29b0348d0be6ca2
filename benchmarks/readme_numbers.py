r"""Measures the numbers the README states for a fresh machine and writes them into it.

  python -m benchmarks.readme_numbers                  # the demo and the test suite
  python -m benchmarks.readme_numbers --only=suite     # one of them

Runs the README's two fresh-machine commands after their `pip install` part, as a user
would on this machine, in this checkout and its installed environment (install the
`test` extra first, as the README's command does):

- the default experiment, `python -m experiments.compare` with a temporary workdir
  (and `--out` beside it, to read the table's numbers);
- the test suite, `python -m pytest -n 2 --dist worksteal tests` with `CI=true` (what
  `.ci/run` runs), its closing line parsed for the counts.

Each is timed, with the machine (processor, CPUs, jax version) and the share of the CPUs
other processes used meanwhile. The numbers go to `results/readme/numbers.json` and
`numbers.md`, and into the README between the markers `<!-- numbers:NAME -->` and
`<!-- /numbers:NAME -->`, so that the README says what this command measured.
"""

import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from benchmarks import REPO_ROOT
from benchmarks import RESULTS_DIR
from benchmarks import common
from experiments import cli


def _define_flags() -> None:
  """The program's flags, defined when it runs (not on import: the test suite imports it
  beside other benchmarks whose flags have the same names)."""
  flags.DEFINE_enum("only", None, ["demo", "suite"], "measure one command only")
  flags.DEFINE_string(
    "readme", os.path.join(REPO_ROOT, "README.md"), "the README to write the numbers into"
  )
  flags.DEFINE_string(
    "out_dir", os.path.join(RESULTS_DIR, "readme"), "where numbers.json and numbers.md go"
  )


DEMO_COMMAND = ["python", "-m", "experiments.compare"]
SUITE_COMMAND = ["python", "-m", "pytest", "-n", "2", "--dist", "worksteal", "tests"]
# The demo's table: these methods' test example F1 at the tuned threshold.
DEMO_METRIC = "test/example_f1"

# pytest's closing line, e.g. "== 1791 passed, 81 skipped, 2 warnings in 393.81s (0:06:33) ==".
_CLOSING = re.compile(r"^=* ?(?P<counts>\d+ [a-z]+(, \d+ [a-z]+)*) in (?P<seconds>[0-9.]+)s\b")


def processor() -> str:
  """The processor's model name (from /proc/cpuinfo where there is one)."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def machine() -> dict:
  """What the numbers were measured on."""
  import jax  # pylint: disable=g-import-not-at-top

  return {
    "processor": processor(),
    "cpus": os.cpu_count(),
    "python": platform.python_version(),
    "jax": jax.__version__,
    "system": platform.system(),
  }


def parse_closing_line(output: str) -> dict:
  """The counts and seconds of pytest's closing line in `output`.

  Args:
    output: what pytest printed.

  Returns:
    `{"passed": n, "skipped": n, ..., "seconds": s}` (every count pytest printed).

  Raises:
    ValueError: no closing line, or one with a failure or an error.
  """
  for line in reversed(output.splitlines()):
    match = _CLOSING.match(line.strip())
    if match:
      counts = {}
      for part in match["counts"].split(", "):
        number, _, word = part.partition(" ")
        counts[word] = int(number)
      if {"failed", "error", "errors"} & set(counts):
        raise ValueError(f"the suite did not pass: {match['counts']}")
      return {**counts, "seconds": float(match["seconds"])}
  raise ValueError("no pytest closing line in the suite's output")


def _run(
  command: list[str], env: dict | None = None, log: str | None = None
) -> tuple[str, float, float | None]:
  """Runs `command` from the repository root; `(output, wall seconds, other CPU share)`.
  With `log`, the whole output goes there as well, failed or not."""
  load = common.OtherLoad()
  start = time.perf_counter()
  proc = subprocess.run(
    [sys.executable, *command[1:]],
    cwd=REPO_ROOT,
    env=env,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
    check=False,
  )
  seconds = time.perf_counter() - start
  if log is not None:
    with open(log, "w") as f:
      f.write(proc.stdout)
    print(f"the output: {log}", file=sys.stderr)
  if proc.returncode != 0:
    tail = "\n".join(proc.stdout.splitlines()[-30:])
    raise RuntimeError(f"{' '.join(command)} exited with {proc.returncode}:\n{tail}")
  return proc.stdout, seconds, load.fraction()


def measure_demo() -> dict:
  """Runs the default experiment; its table's numbers and time."""
  with tempfile.TemporaryDirectory(prefix="energynets_demo_") as tmp:
    out = os.path.join(tmp, "demo.md")
    _, seconds, other = _run(DEMO_COMMAND + [f"--workdir={tmp}/runs", f"--out={out}"])
    with open(os.path.splitext(out)[0] + ".json") as f:
      rows = json.load(f)
  scores = {
    row["method"]: 100 * sum(r[DEMO_METRIC] for r in row["runs"]) / len(row["runs"]) for row in rows
  }
  return {
    "command": " ".join(DEMO_COMMAND) + " --workdir=/tmp/energynets_demo",
    "seconds": round(seconds, 1),
    "other_cpu_share": other,
    "example_f1": {m: round(v, 2) for m, v in scores.items()},
  }


def measure_suite() -> dict:
  """Runs the test suite as CI does; its counts and time."""
  env = {**os.environ, "CI": "true"}
  log = os.path.join(tempfile.gettempdir(), "energynets_readme_suite.log")
  output, seconds, other = _run(SUITE_COMMAND, env=env, log=log)
  counts = parse_closing_line(output)
  return {
    "command": " ".join(SUITE_COMMAND),
    "seconds": round(seconds, 1),
    "pytest_seconds": counts.pop("seconds"),
    "counts": counts,
    "other_cpu_share": other,
  }


def _share(value: float | None) -> str:
  return "" if value is None else f"; other processes used {100 * value:.0f}% of the CPUs"


def describe(name: str, entry: dict, where: dict) -> str:
  """The README's sentence for one measurement."""
  on = (
    f"{where['processor']}, {where['cpus']} CPUs, jax {where['jax']}, "
    f"{entry['date']}{_share(entry.get('other_cpu_share'))}"
  )
  if name == "demo":
    table = ", ".join(f"{m} {v:.2f}" for m, v in entry["example_f1"].items())
    return (
      f"Its table (test example F1 at the tuned threshold): {table}; "
      f"{entry['seconds'] / 60:.1f} min ({on}; `python -m benchmarks.readme_numbers`)."
    )
  counts = ", ".join(f"{v} {k}" for k, v in entry["counts"].items())
  return (
    f"Measured: {entry['seconds'] / 60:.1f} min, {counts} (pytest's closing line, with "
    f"`CI=true`; {on}; `python -m benchmarks.readme_numbers`)."
  )


def write_into(readme: str, name: str, text: str) -> str:
  """`readme` with the text between `<!-- numbers:NAME -->` and its end marker replaced.

  Raises:
    ValueError: the README lacks the markers.
  """
  pattern = re.compile(rf"(<!-- numbers:{name} -->\n).*?(\n<!-- /numbers:{name} -->)", re.S)
  if not pattern.search(readme):
    raise ValueError(
      f"the README has no <!-- numbers:{name} --> ... <!-- /numbers:{name} --> markers"
    )
  return pattern.sub(lambda m: m[1] + text + m[2], readme)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  only, readme_path, out_dir = flags.FLAGS.only, flags.FLAGS.readme, flags.FLAGS.out_dir
  path = os.path.join(out_dir, "numbers.json")
  numbers = {}
  if os.path.exists(path):
    with open(path) as f:
      numbers = json.load(f)
  where = machine()
  measures = {"demo": measure_demo, "suite": measure_suite}
  for name in [only] if only else list(measures):
    print(f"measuring the {name} ...", file=sys.stderr)
    entry = measures[name]()
    entry["date"] = datetime.date.today().isoformat()
    entry["machine"] = where
    numbers[name] = entry
  os.makedirs(out_dir, exist_ok=True)
  with open(path, "w") as f:
    json.dump(numbers, f, indent=1)
  sentences = {name: describe(name, entry, entry["machine"]) for name, entry in numbers.items()}
  common.write_report(
    os.path.join(out_dir, "numbers.md"),
    "benchmarks.readme_numbers",
    "\n\n".join(f"- {name}: `{e['command']}`. {sentences[name]}" for name, e in numbers.items()),
  )
  with open(readme_path) as f:
    readme = f.read()
  for name, text in sentences.items():
    readme = write_into(readme, name, text)
  with open(readme_path, "w") as f:
    f.write(readme)
  for text in sentences.values():
    print(text)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)

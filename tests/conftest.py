"""Shared test set-up: data directory discovery, missing data, and the `slow` marker.

Tests that need the real datasets take the `data_dir` fixture. Where the data directory
lacks a registered dataset they are skipped, and one line at the end of the run counts
them and names the fetch command; in CI ($CI set) missing data fails them instead.
Tests never download: $ENERGYNETS_AUTO_FETCH is off for the whole run.
"""

import atexit
import os
import pathlib
import shutil
import tempfile

from absl import flags
import pytest

# absltest helpers (create_tempdir, ...) read absl flags; pytest never parses them.
flags.FLAGS.mark_as_parsed()

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# CI clones the repo with shared/ beside it; that is where the real datasets live.
_SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

if "ENERGYNETS_DATA_DIR" not in os.environ and _SHARED_DATA.is_dir():
  os.environ["ENERGYNETS_DATA_DIR"] = str(_SHARED_DATA)
# A test that reads a missing dataset must skip or fail, never reach the network.
os.environ["ENERGYNETS_AUTO_FETCH"] = "0"

# The suite compiles hundreds of small programs and runs each a few times, so most of
# its time is XLA:CPU compilation. JAX's `jax_disable_most_optimizations` (XLA backend
# optimization level 0, no expensive LLVM passes) compiles them about 3x faster; it
# changes code generation, not the computation. Programs whose run time dominates
# (convolution gradients over images: the horse DVN test takes 20 min instead of 25 s)
# are marked `optimized_xla` and compile with optimizations (the fixture below).
# XLA:CPU's newer fusion emitters compile about a third slower than the classic
# emitters on these small programs (backend compile of tests/test_ssvm.py: 36 s -> 25 s
# with jax 0.10); the computation is the same.
# Set before any test imports jax; subprocesses inherit them; a value already set wins.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
_TEST_XLA_FLAGS = {"xla_backend_optimization_level": "1", "xla_cpu_use_fusion_emitters": "false"}
for _flag, _value in _TEST_XLA_FLAGS.items():
  if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --{_flag}={_value}").strip()


# Many tests compile the same programs in separate processes: a run and its resumed
# rerun, the processes of a local pod, the command-line tests' subprocesses. One persistent
# compilation cache for the whole run lets the later ones load those programs instead of
# compiling them again. Compilations under 0.2 s are not written: writing the hundreds of
# tiny ones costs more than compiling them again. The first process makes the directory
# (xdist workers and subprocesses inherit the variable) and removes it at exit; a cache
# directory already set is used as it is.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _xla_cache = tempfile.mkdtemp(prefix="energynets-tests-xla-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _xla_cache
  atexit.register(shutil.rmtree, _xla_cache, ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")


# The oracle tests compare float32 computations at tolerances near float32's. On GPUs and
# TPUs JAX's default runs float32 matmuls and convolutions with TF32 / bfloat16 passes:
# on an H200, 12 of 312 such tests failed at the default and all passed at 'highest'
# (results/e2e/e2e.md). The experiments run at 'highest' too
# (train.matmul_precision). On CPU this changes nothing.
import jax  # pylint: disable=g-import-not-at-top  (after XLA_FLAGS is set)

jax.config.update("jax_default_matmul_precision", "highest")

from energynets.data import datadir  # pylint: disable=g-import-not-at-top
from energynets.data import fetch as fetch_lib  # pylint: disable=g-import-not-at-top
from energynets.data.errors import DataError  # pylint: disable=g-import-not-at-top
from energynets.data.errors import MissingDataError  # pylint: disable=g-import-not-at-top

# Skip reasons that count as missing data in the end-of-run line (the second is the
# wording of tests that check the data directory themselves).
MISSING_DATA = "missing data"
_MISSING_DATA_REASONS = (MISSING_DATA, "real data not found")


def in_ci() -> bool:
  """Whether the run is CI's ($CI set and not false), where missing data is a failure."""
  return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_addoption(parser):
  parser.addoption(
    "--runslow",
    action="store_true",
    default=False,
    help="run tests marked slow (long reproduction runs, full test grids)",
  )


# The suite's longest tests (each notebook runs for about 40 s) go first: with two
# workers, a long test that starts last leaves the other worker idle until it ends.
_LONGEST_FIRST = (
  "tests/test_notebooks.py::test_notebook_executes",
  "tests/test_launch.py::test_local_pod_killed_worker",
  "tests/test_experiments.py::test_compare_prints_table_and_writes_files",
)


def pytest_collection_modifyitems(config, items):
  items.sort(key=lambda item: not item.nodeid.startswith(_LONGEST_FIRST))  # stable
  if config.getoption("--runslow"):
    return
  skip_slow = pytest.mark.skip(reason="slow (reproduction run or full grid); pass --runslow")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip_slow)


@pytest.fixture(autouse=True)
def _xla_optimizations(request, monkeypatch):
  """Compiles an `optimized_xla` test's programs with XLA's optimizations on."""
  if request.node.get_closest_marker("optimized_xla") is None:
    yield
    return
  before = jax.config.values["jax_disable_most_optimizations"]
  monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "0")  # for its subprocesses
  jax.config.update("jax_disable_most_optimizations", False)
  # The in-memory cache does not key on this flag: drop programs compiled without.
  jax.clear_caches()
  try:
    yield
  finally:
    jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture
def hold_workdir():
  """`hold_workdir(directory)` starts a process that holds `directory`'s workdir lock
  (as a run in progress does) and returns it; it is killed after the test."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top

  from experiments import workdirs  # pylint: disable=g-import-not-at-top

  holders = []

  def hold(directory: os.PathLike | str) -> subprocess.Popen:
    os.makedirs(directory, exist_ok=True)
    holder = subprocess.Popen(
      [
        sys.executable,
        "-c",
        "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
        "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)",
        os.path.join(directory, workdirs.LOCK_FILE),
      ],
      stdout=subprocess.PIPE,
      text=True,
    )
    holders.append(holder)
    assert holder.stdout.readline().strip() == "held"
    return holder

  yield hold
  for holder in holders:
    holder.kill()
    holder.wait()


def _missing_data(reason: str):
  if in_ci():
    pytest.fail(f"{reason} (CI runs every test on the real data)", pytrace=False)
  pytest.skip(f"{MISSING_DATA}: {reason}")


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
  """The real-data directory, holding every registered dataset's files.

  Where a dataset's files are missing the test is skipped (counted at the end of the
  run), or fails in CI.
  """
  try:
    root = datadir.resolve_data_dir()
  except DataError as e:
    _missing_data(f"{e}")
  absent = sorted(
    {
      name
      for name, source in fetch_lib.sources().items()
      for f in source.files
      if not (root / source.subdir / f.name).is_file()
    }
  )
  if absent:
    _missing_data(f"{', '.join(absent)} not in {root}")
  return root


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  """Reports a test that loaded a missing dataset as skipped (not in CI)."""
  outcome = yield
  report = outcome.get_result()
  if call.excinfo is None or not call.excinfo.errisinstance(MissingDataError) or in_ci():
    return
  error = call.excinfo.value
  report.outcome = "skipped"
  report.longrepr = (
    str(item.path),
    item.location[1] or 0,
    f"Skipped: {MISSING_DATA}: {error.dataset} not in {error.path}",
  )


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
  """One line counting the tests skipped for missing data, with the fetch command.

  A wrapper run first, so the line comes after pytest's short test summary.
  """
  yield
  count = 0
  for report in terminalreporter.stats.get("skipped", []):
    longrepr = report.longrepr
    if (
      isinstance(longrepr, (tuple, list))
      and len(longrepr) == 3
      and any(reason in str(longrepr[2]) for reason in _MISSING_DATA_REASONS)
    ):
      count += 1
  if count:
    root = datadir.resolve_data_dir(must_exist=False)
    terminalreporter.write_line(
      f"{count} test{'s' * (count != 1)} skipped for missing data (data directory "
      f"{root}); get it with "
      f"`{datadir.fetch_command('all')}` (or set ENERGYNETS_DATA_DIR)"
    )

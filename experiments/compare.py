r"""Trains several methods on several datasets and prints one comparison table.

The default (no flags but --workdir) is the README's first command: SPEN Table 3's
comparison of a linear model (BR), an MLP and a SPEN on the synthetic
block-exclusivity task (15k training examples; `--set=data.num_train=1500` for the
small-data row), a few minutes on 2 CPU cores, no files needed. SPEN runs also write
the learned measurement matrix (`<workdir>/synthetic/spen_ssvm/measurement_matrix.png`).

  python -m experiments.compare --workdir=/tmp/energynets_demo
  python -m experiments.compare --methods=br,mlp \
      --datasets=bibtex,delicious,yeast,genbase,cal500,expr_fun,spo_fun \
      --data_dir=DATA --workdir=/tmp/baselines --out=/tmp/baselines.md

Each run writes `<workdir>/<dataset>[-fold<k>]/<method>/results.json`; the table is
generated from those files. Yeast follows SPEN's 10-fold protocol: `--yeast_folds`
folds are run and reported as mean ± standard deviation.

--workdir and --out may be local paths, `file://` URLs or object-store URLs
(`gs://bucket/compare`, with `pip install 'energynets[gcs]'`).

A run directory that already holds a run resumes it (`--allow_config_change`: also with
a config that trains differently). A mistake in the flags, a config or the data ends the
command with one line on stderr and exit status 2.

Output: the table (and any figure's path) on stdout; on stderr, progress bars when it is
a terminal (run k/N with method:dataset, and each run's training; `--progress`), else
a line as each run starts; the INFO log in `<workdir>/logs/compare.log` (`--verbose`:
on stderr too); warnings and errors on stderr.

The tables are `experiments.comparison_tables`; --reuse_stage is `experiments.stage_reuse`.
"""

from collections.abc import Callable
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging
from etils import epath

from energynets.train import quiet_library_logs
from energynets.train import storage
from experiments import builders
from experiments import cli
from experiments import configuration
from experiments import console
from experiments import train
from experiments import trials
from experiments.comparison_tables import format_pivot
from experiments.comparison_tables import format_table
from experiments.comparison_tables import write_outputs
from experiments.specs import parse_spec
from experiments.specs import rejoin_tuples
from experiments.specs import run_name
from experiments.stage_reuse import check_reuse_plan
from experiments.stage_reuse import is_source
from experiments.stage_reuse import reuse_stage
from experiments.stage_reuse import source_spec  # re-exported

_METHODS = flags.DEFINE_list(
  "methods",
  ["br", "mlp", "spen_ssvm"],
  "config names in experiments/configs, or dotted import paths of config modules "
  "outside it (my_pkg.configs.my_method); a row may add overrides of its own as "
  "name:key=value[:key=value], e.g. seal_dynamic:seal.objective=regression; a tuple "
  "value keeps its commas, e.g. mlp:model.hidden=(500,500); a value may be an import "
  "path, e.g. mlp:method=my_pkg.builders:build",
)
_DATASETS = flags.DEFINE_list(
  "datasets",
  ["synthetic"],
  "dataset variants of those configs; a column may add "
  "overrides of its own as name:key=value, e.g. expr_fun:data.root_label=True",
)
_WORKDIR = flags.DEFINE_string("workdir", None, "root directory of all runs")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "data directory (else $ENERGYNETS_DATA_DIR)")
_YEAST_FOLDS = flags.DEFINE_integer("yeast_folds", 10, "folds of the yeast protocol to run")
_SET = flags.DEFINE_multi_string("set", [], "config override for every run, e.g. train.steps=100")
_OUT = flags.DEFINE_string(
  "out",
  "",
  "write the markdown table here as well (and a summary of every run next to it, as .json)",
)
_PIVOT = flags.DEFINE_list(
  "pivot",
  [],
  "results keys (e.g. test/example_f1@0.5) to also show as method x dataset "
  "tables, the layout of SEAL's Table 1",
)
_REUSE_STAGE = flags.DEFINE_string(
  "reuse_stage",
  "",
  "STAGE=METHOD: a row's training stage STAGE starts from the "
  "checkpoints of METHOD's finished run on the same dataset (listed earlier in --methods) "
  "instead of training again, e.g. pretrain=bilstm for the sequence energy methods, whose "
  "pretrain stage is the BiLSTM-CE run. Their configs must agree on every key of METHOD's "
  "config (else an error names the keys). A row trained with train.seed=N reuses "
  "METHOD:train.seed=N where that row is listed, so seeds pair up.",
)
_JOBS = flags.DEFINE_integer(
  "jobs",
  1,
  "train up to this many runs at once, each in its own process (log: "
  "<run dir>/worker.log), then evaluate them all here and write the table. Rows whose "
  "stage --reuse_stage takes train first. On one GPU, set "
  "XLA_PYTHON_CLIENT_PREALLOCATE=false so the processes share its memory.",
)
_ALLOW_CONFIG_CHANGE = flags.DEFINE_bool(
  "allow_config_change",
  False,
  "resume runs whose directory holds a run trained with "
  "a config that differs in what it trains (optimizer, model, method, data, ...)",
)
_VERBOSE, _PROGRESS = console.define_flags()
_RUN_INDEX = flags.DEFINE_integer(
  "run_index", -1, "internal (--jobs): train only this entry of the plan, write nothing else"
)
flags.mark_flags_as_required(["workdir"])


def worker_phases(methods: list[str], source: str) -> list[list[int]]:
  """Plan indices in the order --jobs trains them: the runs whose stage others reuse
  (`is_source`) first, as one phase, then every other run; a phase's runs go in
  parallel."""
  first = [i for i, m in enumerate(methods) if source and is_source(m, source)]
  rest = [i for i in range(len(methods)) if i not in first]
  return [phase for phase in (first, rest) if phase]


def worker_command(index: int) -> list[str]:
  """The command line of the worker that trains planned run `index`: this one's flags
  with `--run_index=index`."""
  # The same flags, so the same plan; --run_index returns after that one run, before
  # --jobs, the table or --out are looked at.
  return [sys.executable, "-m", "experiments.compare", *sys.argv[1:], f"--run_index={index}"]


def train_in_workers(
  run_dirs: list[str | os.PathLike],
  phases: list[list[int]],
  jobs: int,
  command: Callable[[int], list[str]] = worker_command,
) -> None:
  """Runs `command(i)` (default: `worker_command(i)`) for every planned index, at most
  `jobs` at once, phase after phase; a failed run is a RuntimeError naming its log, once
  its phase has finished.

  Each worker's output goes to `<run_dir>/worker.log`; a worker of a non-local run_dir
  (`gs://...`) writes it to a local temporary file, copied there when it ends.
  """
  progress = console.Items(sum(len(phase) for phase in phases), "run")
  try:
    _train_phases(run_dirs, phases, jobs, progress, command)
  finally:
    progress.close()


def _train_phases(
  run_dirs, phases, jobs, progress: console.Items, command: Callable[[int], list[str]]
) -> None:
  """`train_in_workers`' loop; `progress` advances as each worker ends."""
  for phase in phases:
    pending, failed = list(phase), []
    # index -> (worker, its log in the run's workdir, the log it writes to)
    running: dict[int, tuple[subprocess.Popen, epath.Path, epath.Path]] = {}
    while pending or running:
      while pending and len(running) < jobs:
        index = pending.pop(0)
        run_dir = storage.workdir_path(run_dirs[index])
        run_dir.mkdir(parents=True, exist_ok=True)
        log_path = run_dir / "worker.log"
        local_log = (
          log_path
          if storage.is_local(run_dir)
          else epath.Path(tempfile.mkdtemp(prefix="energynets_worker_")) / "worker.log"
        )
        with local_log.open("w") as log:
          running[index] = (
            subprocess.Popen(
              command(index),
              stdout=log,
              stderr=subprocess.STDOUT,
              env={**os.environ, **trials.SHARED_ACCELERATOR},
            ),
            log_path,
            local_log,
          )
        logging.info("worker started: %s (log %s)", run_dir, log_path)
      time.sleep(0.5)
      for index, (proc, log_path, local_log) in list(running.items()):
        if proc.poll() is not None:
          del running[index]
          if local_log != log_path:
            local_log.copy(log_path, overwrite=True)
            shutil.rmtree(local_log.parent, ignore_errors=True)
          logging.info("worker finished (exit %d): %s", proc.returncode, run_dirs[index])
          progress.done(
            f"run {progress.count + 1}/{progress.total} trained (exit "
            f"{proc.returncode}): {run_dirs[index]}"
          )
          if proc.returncode:
            failed.append(f"{run_dirs[index]} (exit {proc.returncode}; log {log_path})")
    if failed:
      raise RuntimeError("--jobs: these runs failed, see their logs: " + "; ".join(failed))


def _prepare_and_train(plan_entry, stage: str, source: str, listed) -> dict:
  """Reuses the source run's stage (with --reuse_stage), then trains and evaluates."""
  dataset, method, fold, config, run_dir, _ = plan_entry
  if _REUSE_STAGE.value and not is_source(method, source):
    reuse_stage(
      config, run_dir, stage, run_dir.parent / run_name(source_spec(config, source, listed))
    )
  logging.info("=== %s on %s (fold %d) -> %s", method, dataset, fold, run_dir)
  return train.train_and_evaluate(config, run_dir, allow_config_change=_ALLOW_CONFIG_CHANGE.value)


def _plan() -> tuple[list[tuple], list[str]]:
  """`(plan, methods)`: `(dataset, method, fold, config, run_dir, column)` of every run,
  built before any trains (`column` is where a reused stage's source run lives: the
  dataset, or one yeast fold), and the --methods rows."""
  plan = []
  root = _WORKDIR.value
  assert root is not None, "--workdir is a required flag"
  methods = rejoin_tuples(_METHODS.value)
  for dataset in rejoin_tuples(_DATASETS.value):
    dataset_name, dataset_overrides = parse_spec(dataset)
    folds = range(_YEAST_FOLDS.value) if dataset_name == "yeast" else [0]
    for method in methods:
      name, overrides = parse_spec(method)
      for fold in folds:
        config = configuration.get_config(
          name, dataset_name, [*_SET.value, *dataset_overrides, *overrides]
        )
        if len(folds) > 1:
          config.data.fold = fold
        if _DATA_DIR.value and "data_dir" in config.data:  # generated data has no files
          config.data.data_dir = _DATA_DIR.value
        builders.check_builders(config)  # an import path that does not import fails now
        column = dataset + (f" fold {fold}" if len(folds) > 1 else "")
        run_dir = (
          storage.workdir_path(root)
          / (run_name(dataset) + (f"-fold{fold}" if len(folds) > 1 else ""))
          / run_name(method)
        )
        plan.append((dataset, method, fold, config, run_dir, column))
  return plan, methods


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  if _RUN_INDEX.value >= 0:
    # A --jobs worker: what it prints is its run's worker.log, the INFO log included.
    console.configure("off")
    _compare()
    return
  console.configure(_PROGRESS.value)
  workdir = storage.workdir_path(_WORKDIR.value)
  # A comparison refused at its start (a bad flag) leaves no workdir behind.
  with console.logged_run(workdir, "compare", verbose=_VERBOSE.value):
    _compare()


def _compare():
  """Trains the plan (or, with --run_index, one entry of it), prints the table."""
  stage, _, source = _REUSE_STAGE.value.partition("=")
  if _REUSE_STAGE.value and not (stage and source):
    raise app.UsageError(f"--reuse_stage must be STAGE=METHOD, got {_REUSE_STAGE.value!r}")
  try:
    plan, methods = _plan()
    # Checked before anything trains: e.g. a gs:// --out without gcsfs installed.
    out = storage.path(_OUT.value) if _OUT.value else None
  except ValueError as e:  # a bad spec, config name, override or method: the flags' mistake
    raise cli.UserError(e) from None
  listed = set(methods)
  if _REUSE_STAGE.value:
    check_reuse_plan([(column, m, c) for _, m, _, c, _, column in plan], stage, source)
  if _RUN_INDEX.value >= 0:
    if _RUN_INDEX.value >= len(plan):
      raise app.UsageError(f"--run_index={_RUN_INDEX.value}: the plan has {len(plan)} runs")
    _prepare_and_train(plan[_RUN_INDEX.value], stage, source, listed)
    return
  if _JOBS.value < 1:
    raise app.UsageError(f"--jobs must be at least 1, got {_JOBS.value}")
  if _JOBS.value > 1:
    train_in_workers(
      [entry[4] for entry in plan], worker_phases([entry[1] for entry in plan], source), _JOBS.value
    )
  # Sequentially: trains every run; after --jobs, resumes each finished run (evaluates).
  rows, figures = [], []
  progress = console.Items(len(plan), "run")
  try:
    for entry in plan:
      dataset, method, _, _, run_dir, column = entry
      if not rows or rows[-1][:2] != (dataset, method):
        rows.append((dataset, method, []))
      progress.start(f"{method}:{column}")
      results = _prepare_and_train(entry, stage, source, listed)
      progress.done()
      rows[-1][2].append(results)
      figures += [run_dir / f for f in results["meta"].get("figures", [])]
  finally:
    progress.close()
  table = format_table(rows)
  for key in _PIVOT.value:
    table += "\n\n" + format_pivot(rows, key)
  command = "python -m experiments.compare " + " ".join(shlex.quote(a) for a in sys.argv[1:])
  print(table)
  for figure in figures:
    print(f"figure: {figure}")
  if out is not None:
    write_outputs(out, command, table, rows)


if __name__ == "__main__":
  cli.run(main)

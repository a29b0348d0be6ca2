r"""Small-data behaviour: test example-F1 against training-set size, default and tuned.

  python -m benchmarks.small_data --data_dir=DATA --workdir=/tmp/small_data \
      --jobs=2 --out=results/spen/small_data.md --plot=results/spen/small_data.png

For every dataset and training size (`data.num_train`: a seeded subset of the training
split, nested across sizes, feature scaling fit on it; 0: every training row), each
method runs twice:

- default: its committed config (`experiments/configs/<method>.py:<dataset>`), trained
  once, its checkpoint selected on the dataset's validation split;
- tuned: what the by-path route does on a new folder (`experiments.tune.run_experiment`
  with the `tune` block of the method's `:mulan` variant): its search space
  (`get_search_space`) within that budget, selected on held-out training rows (k-fold
  below 2,000 of them), the choice refit on all kept rows.

Beside them, scikit-learn's one-vs-rest LogisticRegression with C and feature scaling
chosen on the same held-out rows as br's selection (`br_tuned_vs_sklearn`). Validation
and test are the dataset's own splits at every size; every threshold is tuned on
validation. Each cell writes results.json under --workdir (with the overrides it ran
with) and is skipped when it exists, so an interrupted run continues; a finished cell
that this command would give other overrides stops it before any cell trains. --out
and --plot report every finished cell, with the records of `--records` files (an
earlier report's .json) for cells not in --workdir.
"""

from collections.abc import Iterable
from collections.abc import Sequence
import dataclasses
import json
import os
import time
from typing import Any

from absl import app
from absl import flags
import jax
import ml_collections
import numpy as np

from benchmarks import br_tuned_vs_sklearn
from benchmarks import common
from benchmarks import label_prior
from energynets import metrics
from energynets.data import registry
from energynets.train import quiet_library_logs
from experiments import cli
from experiments import configuration
from experiments import search_spaces
from experiments import tasks
from experiments import trials
from experiments import tune

DATASETS = ("bibtex", "delicious", "genbase", "yeast", "expr_fun")
SIZES = (250, 500, 1000, 0)
METHODS = ("br", "mlp", "spen_ssvm", "dmf", "seal_dynamic", "infnet")
ENERGY_METHODS = ("spen_ssvm", "dmf", "seal_dynamic", "infnet")
LINEAR = "sklearn_lr"
# The floor: every row gets the training rows' label frequencies, thresholded on
# validation. A model that does not pass it has learned nothing from the features.
PRIOR = "label_prior"
HOST_SIDE = (LINEAR, PRIOR)
# The config whose data and search space the host-side cells read.
HOST_SIDE_CONFIG = "br"
# `<method>` + ON + `<base>` (`dmf_on_mlp`, `dmf_soft_f1_on_mlp_soft_f1`): `<method>`'s
# config, tuned from the finished tuned `<base>` cell of the same workdir, dataset and size
# (`tune.start_from`): its first stage is that run and its search the later stages' keys.
ON = "_on_"
# `<method>` + STAGEWISE (`spen_ssvm_stagewise`): `<method>`'s config searched stagewise
# (`tune.stagewise`: its first stage alone, then the later stages from it), as its by-path
# default runs; `<method>`'s own cell searches every stage at once.
STAGEWISE = "_stagewise"
METRIC = "test/example_f1"
# A finished cell's results.json key: the overrides it ran with (`check_finished`).
OVERRIDES_KEY = "overrides"


@dataclasses.dataclass(frozen=True)
class Cell:
  """One run: `method` (or `LINEAR`, `PRIOR`) on `dataset` cut to `size` training rows."""

  dataset: str
  size: int
  method: str
  mode: str  # 'default' | 'tuned' ('tuned' for LINEAR and PRIOR)

  @property
  def name(self) -> str:
    return os.path.join(self.dataset, f"n{self.size or 'all'}", f"{self.method}_{self.mode}")


def config_name(method: str) -> str:
  """The experiment config a method's cell runs (`dmf` for `dmf_on_mlp` and
  `dmf_stagewise`)."""
  return method.partition(ON)[0].removesuffix(STAGEWISE)


def is_stagewise(method: str) -> bool:
  """Whether a method's cell searches stagewise (`<method>_stagewise`)."""
  return method.partition(ON)[0].endswith(STAGEWISE)


def start_method(method: str) -> str | None:
  """The method whose tuned cell a `<method>_on_<base>` method starts from (`mlp` for
  `dmf_on_mlp`); None for others."""
  return method.partition(ON)[2] or None


def start_cell(cell: Cell) -> Cell | None:
  """The tuned cell that `cell` starts from (`start_method`'s); None for others."""
  base = start_method(cell.method)
  return None if base is None else Cell(cell.dataset, cell.size, base, "tuned")


def cells(datasets, sizes, methods, modes, linear: bool = True) -> list[Cell]:
  """Every cell, cheapest first within a size (the linear model, then each method)."""
  out = []
  for dataset in datasets:
    for size in sizes:
      if linear:
        out.append(Cell(dataset, size, LINEAR, "tuned"))
      out += [Cell(dataset, size, m, mode) for m in methods for mode in modes]
  return out


def cell_config(cell: Cell, data_dir: str, overrides=()) -> ml_collections.ConfigDict:
  """The config a cell runs: `experiments/configs/<method>.py:<dataset>` (`config_name`)
  with the training subset, and (tuned) the `tune` block of the method's `:mulan`
  variant, enabled, searching every stage at once (`STAGEWISE`: stagewise)."""
  budget_overrides = [o for o in overrides if o.startswith("tune.")]
  config = configuration.get_config(
    config_name(cell.method),
    cell.dataset,
    [
      f"data.data_dir={data_dir}",
      f"data.num_train={cell.size}",
      *(o for o in overrides if o not in budget_overrides),
    ],
  )
  budget = configuration.get_config(config_name(cell.method), "mulan").tune.to_dict()
  budget["enabled"] = cell.mode == "tuned"
  # A method's cell searches every stage at once; its stagewise forms are
  # `<method>_stagewise` and `<method>_on_<base>`, started from the base's own cell.
  budget["stagewise"] = is_stagewise(cell.method)
  with config.unlocked():
    config.tune = ml_collections.ConfigDict(budget)
  return configuration.apply_overrides(config, budget_overrides)


def check_configs(cells_and_overrides: Iterable[tuple[Cell, Sequence[str]]], data_dir: str) -> None:
  """Builds the config of each (dataset, method) of `cells_and_overrides` (reading no
  data), so that a misspelled method or dataset or a bad override stops the command
  before its first cell trains, not when that cell's turn comes.

  Args:
    cells_and_overrides: each cell with the overrides it runs with; a host-side cell's
      are checked against the br config it reads.
    data_dir: the data directory the cells name.

  Raises:
    cli.UserError: the first config that does not build, in one line.
  """
  seen = set()
  for cell, overrides in cells_and_overrides:
    method = HOST_SIDE_CONFIG if cell.method in HOST_SIDE else cell.method
    if (cell.dataset, method) not in seen:
      seen.add((cell.dataset, method))
      cell_config(dataclasses.replace(cell, method=method), data_dir, overrides)


def check_finished(runs: Iterable[tuple[str, Sequence[str]]]) -> None:
  """Refuses a finished cell that ran with other overrides than this command gives it: its
  results.json would be read back as this command's result. A cell finished before the
  overrides were recorded is taken as it is.

  Args:
    runs: each cell's directory with the overrides it runs with.

  Raises:
    cli.UserError: the first such cell, in one line.
  """
  for directory, overrides in runs:
    path = os.path.join(directory, "results.json")
    if not os.path.exists(path):
      continue
    with open(path) as f:
      before = json.load(f).get(OVERRIDES_KEY)
    if before is not None and list(before) != list(overrides):
      gone = [o for o in before if o not in overrides]
      new = [o for o in overrides if o not in before]
      if not (gone or new):  # the same overrides in another order
        gone, new = before, list(overrides)
      raise cli.UserError(
        f"{directory} finished with overrides {gone}, not {new}: use another --workdir"
      )


def run_cell(
  cell: Cell, workdir: str, data_dir: str, overrides=(), linear_jobs: int = 1
) -> dict[str, Any]:
  """Runs `cell` (or reads its results.json, which callers check with `check_finished`);
  its record for the report. The linear model's labels are fitted by `linear_jobs`
  processes; an `_on_<base>` method's cell starts from `start_cell`'s run in `workdir`,
  which must have finished."""
  directory = os.path.join(workdir, cell.name)
  path = os.path.join(directory, "results.json")
  if not os.path.exists(path):
    quiet_library_logs()
    started = time.time()
    ran_with = list(overrides)
    if cell.method == LINEAR:
      results = _linear(cell, data_dir, overrides, linear_jobs)
    elif cell.method == PRIOR:
      results = _label_prior(cell, data_dir, overrides)
    else:
      start = start_cell(cell)
      if start is not None:
        overrides = (*overrides, f"tune.start_from={os.path.join(workdir, start.name)}")
      config = cell_config(cell, data_dir, overrides)
      results = tune.run_experiment(config, directory, config_file=config_name(cell.method))
    results["seconds"] = time.time() - started
    results[OVERRIDES_KEY] = ran_with
    # Seconds on a GPU and on one CPU core are not one measure: the report keeps them apart.
    results["platform"] = "cpu" if cell.method in HOST_SIDE else jax.default_backend()
    os.makedirs(directory, exist_ok=True)
    with open(path + ".tmp", "w") as f:
      json.dump(results, f, default=configuration.json_default)
    os.replace(path + ".tmp", path)
  with open(path) as f:
    results = json.load(f)
  meta = results.get("meta", {})
  tuning = meta.get("tuning", {})
  return {
    **dataclasses.asdict(cell),
    METRIC: results[METRIC],
    "validation/example_f1": results.get("validation/example_f1"),
    "num_train": (
      meta.get("dataset_meta", {}).get("num_examples", {}).get("train") or results.get("num_train")
    ),
    "chosen": tuning.get("overrides") or results.get("chosen"),
    "seconds": results.get("seconds"),
    # Cells run before the platform was recorded all ran on CPU.
    "platform": results.get("platform", "cpu"),
  }


def _host_side_data(
  cell: Cell, data_dir: str, overrides=()
) -> tuple[ml_collections.ConfigDict, Any]:
  """(br's config, the cell's rows unscaled): what the host-side models fit."""
  config = cell_config(
    Cell(cell.dataset, cell.size, HOST_SIDE_CONFIG, "tuned"),
    data_dir,
    ["data.feature_scaling=none", *overrides],
  )
  return config, tasks.task_for(config).load(config)


def _label_prior(cell: Cell, data_dir: str, overrides=()) -> dict[str, Any]:
  """The cell's label prior (`benchmarks.label_prior`): each label's frequency in the kept
  training rows as every row's prediction, the threshold tuned on validation as every
  run's is."""
  _, dataset = _host_side_data(cell, data_dir, overrides)
  frequencies = label_prior.label_frequencies(dataset.train.y)
  y_val, y_test = np.asarray(dataset.validation.y), np.asarray(dataset.test.y)
  results = metrics.evaluate_multilabel(
    val=(y_val, label_prior.prior_probs(frequencies, len(y_val))),
    test=(y_test, label_prior.prior_probs(frequencies, len(y_test))),
  )
  return {**{k: float(v) for k, v in results.items()}, "num_train": dataset.train.num_examples}


def _linear(cell: Cell, data_dir: str, overrides=(), jobs: int = 1) -> dict[str, Any]:
  """scikit-learn's tuned LogisticRegression on the cell's rows: br's space and budget,
  the same folds as br's selection (the validation split from 2,000 rows); its labels
  fitted by `jobs` processes."""
  config, dataset = _host_side_data(cell, data_dir, overrides)
  num_train = dataset.train.num_examples
  folds = config.tune.folds or tune.DEFAULT_FOLDS
  held_out = (
    tune.fold_indices(num_train, folds, config.tune.seed) if num_train < tune.SMALL_TRAIN else None
  )
  space = search_spaces.for_config(HOST_SIDE_CONFIG, cell.dataset)
  results = br_tuned_vs_sklearn.sklearn_tuned_br(dataset, held_out, space, jobs)
  results["num_train"] = num_train
  return results


def run(
  all_cells: list[Cell],
  workdir: str,
  data_dir: str,
  jobs: int = 1,
  overrides=(),
  report_only: bool = False,
) -> list[dict[str, Any]]:
  """Every cell's record, in `all_cells`' order (`jobs` cells at once, each process on
  one XLA thread); a size beyond a dataset's training rows is left out, and with
  `report_only` every cell not finished yet (nothing trains)."""
  if report_only:
    all_cells = [
      c for c in all_cells if os.path.exists(os.path.join(workdir, c.name, "results.json"))
    ]
  if jobs <= 1:
    # One cell at a time: the linear model's labels are fitted on every CPU.
    records = [
      _attempt(c, workdir, data_dir, tuple(overrides), os.cpu_count() or 1) for c in all_cells
    ]
  else:
    with trials.single_threaded_processes(jobs) as pool:
      futures = [pool.submit(_attempt, c, workdir, data_dir, tuple(overrides)) for c in all_cells]
      records = [f.result() for f in futures]
  return [r for r in records if r is not None]


def merge(records: list[dict[str, Any]], earlier: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """`earlier`'s records of cells that `records` lacks, then `records`: a cell finished
  again replaces its earlier record."""
  key = lambda r: (r["dataset"], r["size"], r["method"], r["mode"])
  finished = {key(r) for r in records}
  return [r for r in earlier if key(r) not in finished] + list(records)


def _attempt(cell, workdir, data_dir, overrides, linear_jobs=1):
  """`run_cell`'s record, printed; None for a size the dataset does not have."""
  try:
    record = run_cell(cell, workdir, data_dir, overrides, linear_jobs)
  except registry.TooFewTrainingRows as e:
    print(f"{cell.name}: skipped ({e})", flush=True)
    return None
  print(f"{cell.name}: {METRIC} {record[METRIC]:.4f} ({record['seconds'] or 0:.0f} s)", flush=True)
  return record


def table(records: list[dict[str, Any]]) -> str:
  """Markdown: a row per (dataset, size), a column per method and mode."""
  columns = [(LINEAR, "tuned")] + sorted(
    {(r["method"], r["mode"]) for r in records if r["method"] != LINEAR},
    key=lambda c: (METHODS.index(c[0]) if c[0] in METHODS else len(METHODS), c[1]),
  )
  by_key = {(r["dataset"], r["size"], r["method"], r["mode"]): r for r in records}
  rows = sorted({(r["dataset"], r["size"]) for r in records}, key=lambda k: (k[0], k[1] or 10**9))
  head = ["dataset", "train rows"] + [
    "LR (sklearn, tuned)" if m == LINEAR else f"{m} {mode}" for m, mode in columns
  ]
  lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
  for dataset, size in rows:
    num = next(
      (
        r["num_train"]
        for r in records
        if (r["dataset"], r["size"]) == (dataset, size) and r["num_train"]
      ),
      size,
    )
    cells_ = [by_key.get((dataset, size, m, mode)) for m, mode in columns]
    lines.append(
      f"| {dataset} | {num} | "
      + " | ".join("—" if c is None else f"{100 * c[METRIC]:.2f}" for c in cells_)
      + " |"
    )
  return "\n".join(lines)


def verdicts(records: list[dict[str, Any]]) -> list[str]:
  """The benchmark's two goals, checked on the finished cells: every tuned deep method
  at least the tuned linear model from 500 training rows, and the tuned energy methods
  at least the tuned MLP on average over the (dataset, size) pairs both finished."""
  by_key = {(r["dataset"], r["size"], r["method"], r["mode"]): r[METRIC] for r in records}
  num_train = {(r["dataset"], r["size"]): r["num_train"] for r in records}
  lines, below, compared = [], [], 0
  for (dataset, size, method, mode), value in sorted(
    by_key.items(), key=lambda kv: (kv[0][0], kv[0][1] or 10**9, kv[0][2])
  ):
    if mode != "tuned" or method in (LINEAR, "br") or num_train[dataset, size] < 500:
      continue
    linear = by_key.get((dataset, size, LINEAR, "tuned"))
    compared += linear is not None
    if linear is not None and value < linear:
      below.append(f"{method} on {dataset} n={size or 'all'} ({100 * (value - linear):+.2f})")
  verdict = (
    (", ".join(below) if below else "none")
    if compared
    else ("not measured (no tuned deep method and tuned linear model at the same size)")
  )
  lines.append(
    "Tuned deep methods below the tuned linear model (from 500 training rows): " + verdict + "."
  )
  for method in ENERGY_METHODS:
    pairs = [
      (v, by_key[(d, s, "mlp", "tuned")])
      for (d, s, m, mode), v in by_key.items()
      if m == method and mode == "tuned" and (d, s, "mlp", "tuned") in by_key
    ]
    if pairs:
      gain = 100 * float(np.mean([a - b for a, b in pairs]))
      lines.append(
        f"{method} tuned − mlp tuned, mean over {len(pairs)} (dataset, size): {gain:+.2f} points."
      )
  return lines


def plot(records: list[dict[str, Any]], path: str) -> None:
  """Test example-F1 against training rows, a panel per dataset: tuned solid, default
  dashed, the linear model black."""
  from experiments import plots  # pylint: disable=g-import-not-at-top

  plt = plots.pyplot()
  datasets = sorted({r["dataset"] for r in records})
  fig, axes = plt.subplots(1, len(datasets), figsize=(4 * len(datasets), 3.4), squeeze=False)
  for ax, dataset in zip(axes[0], datasets):
    mine = [r for r in records if r["dataset"] == dataset]
    for method, mode in sorted({(r["method"], r["mode"]) for r in mine}):
      points = sorted(
        (r["num_train"], 100 * r[METRIC])
        for r in mine
        if (r["method"], r["mode"]) == (method, mode) and r["num_train"]
      )
      if not points:
        continue
      style = (
        dict(color="black", lw=2)
        if method == LINEAR
        else dict(
          ls="-" if mode == "tuned" else "--",
          color=f"C{METHODS.index(method) if method in METHODS else 9}",
        )
      )
      label = "LR (sklearn, tuned)" if method == LINEAR else f"{method} {mode}"
      ax.plot(*zip(*points), marker="o", ms=3, label=label, **style)
    ax.set_xscale("log")
    sizes = sorted({r["num_train"] for r in mine if r["num_train"]})
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.set_title(dataset)
    ax.set_xlabel("training rows")
    ax.set_ylabel("test example-F1 (%)")
  axes[0][-1].legend(fontsize=6, loc="lower right")
  fig.tight_layout()
  plots.save_figure(fig, path, dpi=120)


def durations(records: list[dict[str, Any]]) -> list[str]:
  """A line per method, mode and platform: the wall seconds of its cells (search and final
  run); the platform is named when it is not the CPU."""
  key = lambda r: (r["method"], r["mode"], r.get("platform", "cpu"))
  lines = []
  for method, mode, platform in sorted(set(map(key, records))):
    seconds = [
      r["seconds"] for r in records if key(r) == (method, mode, platform) and r.get("seconds")
    ]
    if seconds:
      where = "" if platform == "cpu" else f" on {platform}"
      lines.append(
        f"- {method} {mode}{where}: {len(seconds)} cells, {min(seconds):.0f}–"
        f"{max(seconds):.0f} s (median {np.median(seconds):.0f} s)"
      )
  return lines


def report(records: list[dict[str, Any]]) -> str:
  return "\n".join(
    [
      "Test example-F1 (%, threshold tuned on validation) by training-set size (a seeded "
      "nested subset of the training split; validation and test unchanged). "
      "`default`: the committed config; `tuned`: selected within the by-path route's "
      "budget on held-out training rows. — : not run.",
      "",
      table(records),
      "",
      *verdicts(records),
      "",
      "Wall time of each cell (the search included):",
      *durations(records),
    ]
  )


_FLAGS = {}


def _define_flags():
  return {
    "data_dir": flags.DEFINE_string("data_dir", "", "data directory (else $ENERGYNETS_DATA_DIR)"),
    "workdir": flags.DEFINE_string("workdir", None, "where every cell's run goes"),
    "datasets": flags.DEFINE_list("datasets", list(DATASETS), "registered datasets"),
    "sizes": flags.DEFINE_list("sizes", [str(s) for s in SIZES], "training rows (0: all)"),
    "methods": flags.DEFINE_list("methods", list(METHODS), "experiment configs"),
    "modes": flags.DEFINE_list("modes", ["default", "tuned"], "default and/or tuned"),
    "linear": flags.DEFINE_bool(
      "linear", True, "run scikit-learn's tuned LogisticRegression beside the methods"
    ),
    "report_only": flags.DEFINE_bool(
      "report_only", False, "train nothing: report the cells already finished in --workdir"
    ),
    "jobs": flags.DEFINE_integer("jobs", 1, "cells run at once, each in its own process"),
    "set": flags.DEFINE_multi_string(
      "set",
      [],
      "key=value override of every cell's config (e.g. a shorter train.steps for a smoke run)",
    ),
    "records": flags.DEFINE_list(
      "records",
      [],
      "earlier reports' .json files: their cells are reported unless --workdir has them",
    ),
    "out": flags.DEFINE_string("out", "", "markdown report (and .json beside it)"),
    "plot": flags.DEFINE_string("plot", "", "figure of F1 against training rows"),
  }


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  value = lambda name: _FLAGS[name].value
  bad = [m for m in value("modes") if m not in ("default", "tuned")]
  if bad:
    raise app.UsageError(f"--modes: {bad} (use default, tuned)")
  all_cells = cells(
    value("datasets"),
    [int(s) for s in value("sizes")],
    value("methods"),
    value("modes"),
    value("linear"),
  )
  check_configs(((c, value("set")) for c in all_cells), value("data_dir"))
  check_finished((os.path.join(value("workdir"), c.name), value("set")) for c in all_cells)
  records = run(
    all_cells,
    value("workdir"),
    value("data_dir"),
    value("jobs"),
    value("set"),
    value("report_only"),
  )
  for path in value("records"):
    with open(path) as f:
      records = merge(records, json.load(f))
  body = report(records)
  print(body)
  if value("out"):
    common.write_report(value("out"), "benchmarks.small_data", body)
    with open(os.path.splitext(value("out"))[0] + ".json", "w") as f:
      json.dump(records, f, indent=1, default=configuration.json_default)
  if value("plot"):
    plot(records, value("plot"))


if __name__ == "__main__":
  _FLAGS = _define_flags()
  cli.run(main)

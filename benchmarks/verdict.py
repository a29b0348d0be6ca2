r"""The verdict at equal budget: each energy method against the tuned MLP and the tuned
linear model, as paired differences of test example-F1 with 95 % intervals over seeds.

  python -m benchmarks.verdict --data_dir=DATA --workdir=W --jobs=N \
      --out=results/verdict/verdict.md --plot=results/verdict/verdict.png

Every method runs in the by-path route's `tuned` mode (`small_data.run_cell`: its
committed config for the dataset, its own `get_search_space`, selected on held-out
training rows, the choice refit) with ONE search budget for all of them: the `tune` block
of `mlp`'s `:mulan` variant, changed only by `--set=tune.KEY=VALUE`, recorded in the
report and in `--workdir`'s `budget.json` (a workdir holds cells of one budget only).
Beside them, scikit-learn's one-vs-rest LogisticRegression (`small_data.LINEAR`) with C
and feature scaling chosen on the same folds; its grid (br's search space) is evaluated
whole, whatever the budget's trial count. And the floor, the label prior
(`small_data.PRIOR`): the training rows' label frequencies as every row's prediction.

Seed s sets `train.seed`, `tune.seed` (folds and trial draws) and, unless
`--novary_data`, `data.split_seed`: the training subset of each size, the validation
holdout and, for datasets split at random (cv10, 60/20/20), the test rows differ by seed.
Methods at one seed share all of them, so each difference is paired by seed.

Cells (seed, dataset, size, method) run cheapest size first, `--jobs` at once, each in its
own single-threaded process; a cell's results.json under --workdir makes it finished, so
an interrupted run, or a slice (`--only`, `--max_cells`), continues where it stopped.
A method `<method>_on_<base>` (`--methods=dmf_on_mlp`) is `<method>`'s config started
from the same seed's tuned `<base>` cell (`small_data.ON`, `tune.start_from`): its first
stage is that run and its trials search the later stages' keys; its cells wait for the
base's, which `--methods` gains if it lacks it.
A method `<method>_stagewise` is `<method>`'s config searched stagewise, as its by-path
default runs (`small_data.STAGEWISE`, `tune.stagewise`); `<method>` searches every stage
at once.
`--records` adds an earlier report's .json for cells of the command's slice that
--workdir lacks; `--refit_from`
reruns an earlier report's choices' final runs without searching again (`refit_from`). The
report: test example-F1 per cell (mean over seeds), the paired difference against the
tuned MLP and against the linear model per (method, dataset, size) with its t-interval
over seeds, a pooled interval per method and size across datasets (the unit: a
dataset's mean paired difference), and a figure of the differences against the MLP.
"""

from collections.abc import Callable
from collections.abc import Sequence
import concurrent.futures
import dataclasses
import fnmatch
import json
import os
import time
from typing import Any

from absl import app
from absl import flags
import ml_collections
import numpy as np
from scipy import stats

from benchmarks import common
from benchmarks import small_data
from energynets.data import registry
from experiments import cli
from experiments import configuration
from experiments import search
from experiments import trials
from experiments import tune
from experiments import workdirs
from experiments.refit import CHOSEN_FILE

DATASETS = ("bibtex", "delicious", "genbase", "yeast", "expr_fun", "spo_fun", "cal500")
SIZES = (250, 500, 1000, 0)
MLP = "mlp"
ENERGY_METHODS = (
  "spen_ssvm",
  "dmf",
  "e2e",
  "seal_dynamic",
  "seal_static",
  "dvn",
  "infnet",
  "implicit",
)
METHODS = (MLP, *ENERGY_METHODS)
LINEAR = small_data.LINEAR
PRIOR = small_data.PRIOR
METRIC = small_data.METRIC
SEEDS = (0, 1, 2)
CONFIDENCE = 0.95
BUDGET_FILE = "budget.json"
# Keys a seed sets; `--set` may not set them.
SEED_KEYS = ("train.seed", "tune.seed", "data.split_seed")
# What a k-fold final run of earlier code trained for: a recorded step count, not a choice.
REFIT_STEP_KEYS = ("train.steps", "train.schedule_steps")


@dataclasses.dataclass(frozen=True)
class SeededCell:
  """`cell` (always tuned) trained at `seed`."""

  cell: small_data.Cell
  seed: int

  @property
  def name(self) -> str:
    return os.path.join(f"seed{self.seed}", self.cell.name)

  @property
  def key(self) -> tuple:
    """`record_key` of this cell's record."""
    return record_key({**dataclasses.asdict(self.cell), "seed": self.seed})


def scoped(override: str) -> tuple[str | None, str]:
  """`(method, key=value)` of an override `method:key=value`; `(None, override)` for one
  of every cell."""
  prefix, sep, rest = override.partition(":")
  if sep and "=" not in prefix:
    return prefix, rest
  return None, override


def budget(overrides: Sequence[str] = ()) -> dict[str, Any]:
  """The one search budget: mlp's `:mulan` `tune` block with the `tune.*` overrides of
  `overrides`, enabled, without `seed` (each cell's seed sets it), `start_from` (an
  `_on_<base>` method's cell sets it) and `stagewise` (a method's cell searches every
  stage at once, `small_data.cell_config`; `<method>_stagewise` and `<method>_on_<base>`
  are its stagewise forms).

  Raises:
    ValueError: an override of a key that a seed sets, of `tune.stagewise`, or a
      `tune.*` override of one method's cells.
  """
  keys = [(method, o.partition("=")[0]) for method, o in map(scoped, overrides)]
  if "tune.stagewise" in (k for _, k in keys):
    raise ValueError(
      "tune.stagewise: a method's cells search every stage at once; its stagewise forms "
      "are the methods <method>_stagewise and <method>_on_<base> (e.g. dmf_on_mlp)"
    )
  bad = [f"{m}:{k}" if m else k for m, k in keys if k in SEED_KEYS or (m and k.startswith("tune."))]
  if bad:
    raise ValueError(f"{bad}: --seeds sets the seeds and every method has the one tune budget")
  holder = ml_collections.ConfigDict({"tune": configuration.get_config(MLP, "mulan").tune})
  configuration.apply_overrides(holder, [o for o in overrides if o.startswith("tune.")])
  block = holder.tune.to_dict()
  block["enabled"] = True
  for key in ("seed", "start_from", "stagewise"):
    block.pop(key, None)
  return block


def cell_overrides(
  cell: "SeededCell",
  tune_budget: dict[str, Any],
  overrides: Sequence[str] = (),
  vary_data: bool = True,
) -> tuple[str, ...]:
  """The overrides of `cell`: those of `overrides` that are not the budget's and apply to
  its method (`key=value`, or `method:key=value` for that method or for the config it
  runs, `dmf:` for `dmf_on_mlp`), the seeds, and every
  key of `tune_budget` (so that each method's own `:mulan` block is replaced)."""
  method = cell.cell.method
  mine = [
    o for m, o in map(scoped, overrides) if m in (None, method, small_data.config_name(method))
  ]
  return (
    *(o for o in mine if not o.startswith("tune.")),
    f"train.seed={cell.seed}",
    *([f"data.split_seed={cell.seed}"] if vary_data else []),
    *(f"tune.{key}={value!r}" for key, value in sorted(tune_budget.items())),
    f"tune.seed={cell.seed}",
  )


def _size_order(size: int) -> int:
  """Sorts training sizes ascending with all rows (0) last."""
  return size or 10**9


def cells(
  datasets: Sequence[str],
  sizes: Sequence[int],
  methods: Sequence[str],
  seeds: Sequence[int],
  linear: bool = True,
) -> list[SeededCell]:
  """Every cell, tuned: by size (all rows last), dataset and seed, the label prior and
  the linear model (`linear`), then each method, so that a (dataset, size) is complete
  before the next starts. A method that starts from another's tuned cell
  (`small_data.start_method`) brings that method's cells, before its own."""
  bases = [small_data.start_method(m) for m in methods]
  methods = [*dict.fromkeys(b for b in bases if b and b not in methods), *methods]
  out = []
  for size in sorted(sizes, key=_size_order):
    for dataset in datasets:
      for seed in seeds:
        if linear:
          out.append(SeededCell(small_data.Cell(dataset, size, PRIOR, "tuned"), seed))
        out += [
          SeededCell(c, seed)
          for c in small_data.cells([dataset], [size], methods, ["tuned"], linear)
        ]
  return out


def select(
  all_cells: list[SeededCell],
  workdir: str,
  only: Sequence[str] = (),
  max_cells: int = 0,
  report_only: bool = False,
) -> list[SeededCell]:
  """The cells to visit: those whose name (`seed0/yeast/n500/mlp_tuned`) matches a glob of
  `only` (all when empty), finished cells always, unfinished ones only without
  `report_only` and, with `max_cells`, only the first that many."""
  chosen, unfinished = [], 0
  for c in all_cells:
    if only and not any(fnmatch.fnmatch(c.name, pattern) for pattern in only):
      continue
    if not os.path.exists(os.path.join(workdir, c.name, "results.json")):
      if report_only or (max_cells and unfinished >= max_cells):
        continue
      unfinished += 1
    chosen.append(c)
  return chosen


def check_budget(workdir: str, recorded: dict[str, Any]) -> None:
  """Writes `recorded` (the budget and the seed rule) to --workdir's budget.json, or checks
  that the one there is the same.

  Raises:
    ValueError: the workdir's cells were run with another budget or seed rule.
  """
  path = os.path.join(workdir, BUDGET_FILE)
  if os.path.exists(path):
    with open(path) as f:
      before = json.load(f)
    if before != json.loads(json.dumps(recorded)):
      raise ValueError(f"{workdir} holds cells of {before}, not {recorded}: use another --workdir")
    return
  os.makedirs(workdir, exist_ok=True)
  with open(path, "w") as f:
    json.dump(recorded, f, indent=1)


def run(
  chosen: list[SeededCell],
  workdir: str,
  data_dir: str,
  tune_budget: dict[str, Any],
  jobs: int = 1,
  overrides: Sequence[str] = (),
  vary_data: bool = True,
) -> list[dict[str, Any]]:
  """Every cell's record (with its `seed`), in `chosen`'s order, a progress line as each
  ends; `jobs` cells at once, each process on one XLA thread. A size beyond a dataset's
  training rows is left out."""
  check_budget(workdir, {"tune": tune_budget, "vary_data": vary_data})
  args = [
    (c, workdir, data_dir, cell_overrides(c, tune_budget, overrides, vary_data)) for c in chosen
  ]
  started, records = time.time(), {}
  progress = lambda done, c, line: print(
    f"[{done}/{len(chosen)}, {time.time() - started:.0f} s] {c.name}: {line}", flush=True
  )
  finished: set[str] = set()
  skipped: dict[str, str] = {}  # cell name -> why it was skipped

  def base_skipped(i: int) -> str | None:
    """Why chosen[i] is skipped with the cell it starts from (a size the dataset lacks)."""
    start = prerequisite(chosen[i])
    return f"skipped (it starts from {start}: {skipped[start]})" if start in skipped else None

  def ended(i: int, record) -> None:
    records[i] = record
    finished.add(chosen[i].name)
    if isinstance(record, str):
      skipped[chosen[i].name] = record.removeprefix("skipped (").removesuffix(")")
    progress(len(records), chosen[i], _line(record))

  if jobs <= 1:
    for i, a in enumerate(args):
      # One cell at a time: the linear model's labels are fitted on every CPU.
      ended(i, base_skipped(i) or _attempt(*a, linear_jobs=os.cpu_count() or 1))
  else:
    # A cell that starts from another (`prerequisite`) is submitted once that one ends.
    names = {c.name for c in chosen}
    waiting = {i: prerequisite(c) for i, c in enumerate(chosen)}
    with trials.single_threaded_processes(jobs) as pool:
      futures: dict[concurrent.futures.Future, int] = {}
      while waiting or futures:
        for i in [i for i, p in waiting.items() if p is None or p not in names or p in finished]:
          del waiting[i]
          if reason := base_skipped(i):
            ended(i, reason)
          else:
            futures[pool.submit(_attempt, *args[i])] = i
        done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED)
        for future in done:
          i = futures.pop(future)
          ended(i, future.result())
  return [records[i] for i in range(len(chosen)) if isinstance(records[i], dict)]


def prerequisite(cell: SeededCell) -> str | None:
  """The name of the cell `cell` starts from (`small_data.start_cell`), else None."""
  start = small_data.start_cell(cell.cell)
  return None if start is None else SeededCell(start, cell.seed).name


def record_key(record: dict[str, Any]) -> tuple:
  """What identifies a record's cell: (dataset, size, method, seed)."""
  return (record["dataset"], record["size"], record["method"], record["seed"])


def refit_from(
  chosen: list[SeededCell],
  earlier: list[dict[str, Any]],
  workdir: str,
  data_dir: str,
  tune_budget: dict[str, Any],
  overrides: Sequence[str] = (),
  vary_data: bool = True,
) -> list[SeededCell]:
  """Gives each unstarted tuned cell of `chosen` that `earlier` holds its recorded choice
  as chosen.json, so that the cell reruns that choice's final run instead of searching
  again (the tuner resumes from a chosen.json): for a change to the final run alone, the
  search being what produced `earlier`. The step count an earlier k-fold final run
  trained (`train.steps`, `train.schedule_steps` in its `chosen`) is not part of the
  choice: today's final run selects its own step on validation.

  Returns:
    The cells given a choice.
  """
  by_key = {record_key(r): r for r in earlier}
  seeded = []
  for c in chosen:
    record = by_key.get(c.key)
    directory = os.path.join(workdir, c.name)
    if (
      c.cell.method in small_data.HOST_SIDE
      or record is None
      or not record.get("chosen")
      or os.path.exists(directory)
    ):
      continue
    config = small_data.cell_config(
      c.cell, data_dir, cell_overrides(c, tune_budget, overrides, vary_data)
    )
    evidence = {
      "overrides": {k: v for k, v in record["chosen"].items() if k not in REFIT_STEP_KEYS},
      "selection_overrides": search.final_run_overrides(
        config, tune.block_trial_overrides(tune_budget)
      ),
      "folds": tune_budget["folds"],
      "value": None,
      "metric": search.REPORTED_METRIC,
      "searched_earlier": record,
    }
    os.makedirs(directory)
    with open(os.path.join(directory, CHOSEN_FILE), "w") as f:
      json.dump(evidence, f, indent=1, default=configuration.json_default)
    seeded.append(c)
  return seeded


def _attempt(cell: SeededCell, workdir, data_dir, overrides, linear_jobs=1):
  """`small_data.run_cell`'s record with the seed; the reason, for a size the dataset
  does not have, a cell another process is training (its workdir lock) or one whose
  `prerequisite` has not finished."""
  directory = os.path.join(workdir, cell.name)
  start = prerequisite(cell)
  if start is not None and not os.path.exists(os.path.join(workdir, start, "results.json")):
    return f"skipped (it starts from {start}, which has not finished)"
  try:
    with workdirs.workdir_lock(directory):
      record = small_data.run_cell(
        cell.cell, os.path.join(workdir, f"seed{cell.seed}"), data_dir, overrides, linear_jobs
      )
  except workdirs.WorkdirInUse as e:
    return f"skipped ({e})"
  except registry.TooFewTrainingRows as e:
    if os.listdir(directory) == [workdirs.LOCK_FILE]:  # a skipped size leaves no cell behind
      os.remove(os.path.join(directory, workdirs.LOCK_FILE))
      os.rmdir(directory)
    return f"skipped ({e})"
  chosen_path = os.path.join(directory, CHOSEN_FILE)
  if os.path.exists(chosen_path):
    with open(chosen_path) as f:
      earlier = json.load(f).get("searched_earlier")
    if earlier:  # refit alone here (`refit_from`): the time of its search and first refit
      record = {**record, "seconds": earlier["seconds"], "refit_of_earlier_search": True}
  return {**record, "seed": cell.seed}


def _line(record) -> str:
  if isinstance(record, str):
    return record
  return f"{METRIC} {record[METRIC]:.4f} ({record['seconds'] or 0:.0f} s)"


def in_slice(records: list[dict[str, Any]], named: Sequence[SeededCell]) -> list[dict[str, Any]]:
  """The records of `records` whose cell is one of `named` (the command's datasets,
  sizes, methods and seeds), so that an earlier report's other cells stay out."""
  keys = {c.key for c in named}
  return [r for r in records if record_key(r) in keys]


def merge(records: list[dict[str, Any]], earlier: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """`earlier`'s records of cells that `records` lacks, then `records`."""
  finished = {record_key(r) for r in records}
  return [r for r in earlier if record_key(r) not in finished] + list(records)


def _t_quantile(n: int, confidence: float = CONFIDENCE) -> float:
  """The t of a two-sided `confidence` interval over n values: the (1 + confidence) / 2
  quantile of Student's t with n−1 degrees of freedom."""
  return float(stats.t.ppf((1 + confidence) / 2, n - 1))


def paired_difference(
  values: Sequence[float], reference: Sequence[float], confidence: float = CONFIDENCE
) -> dict[str, Any]:
  """The mean of `values - reference` (paired) and its two-sided t-interval.

  Returns:
    `{"n", "mean", "half_width", "low", "high"}`; with fewer than two pairs the
    interval's entries are None.
  """
  d = np.asarray(values, float) - np.asarray(reference, float)
  n, mean = len(d), float(np.mean(d))
  half = None
  if n >= 2:
    half = _t_quantile(n, confidence) * float(np.std(d, ddof=1)) / float(np.sqrt(n))
  return {
    "n": n,
    "mean": mean,
    "half_width": half,
    "low": None if half is None else mean - half,
    "high": None if half is None else mean + half,
  }


def differences(records: list[dict[str, Any]], reference: str) -> list[dict[str, Any]]:
  """Per (method, dataset, size), the paired difference against `reference`'s cells of
  the same dataset, size and seed (the seeds both finished; `seeds` lists them)."""
  score = {(r["method"], r["dataset"], r["size"], r["seed"]): r[METRIC] for r in records}
  out = []
  for method, dataset, size in sorted(
    {k[:3] for k in score if k[0] != reference}, key=lambda k: report_order(k[0], k[1], k[2])
  ):
    seeds = sorted(
      s
      for m, d, z, s in score
      if (m, d, z) == (method, dataset, size) and (reference, d, z, s) in score
    )
    if seeds:
      out.append(
        {
          "method": method,
          "reference": reference,
          "dataset": dataset,
          "size": size,
          "seeds": seeds,
          **paired_difference(
            [score[method, dataset, size, s] for s in seeds],
            [score[reference, dataset, size, s] for s in seeds],
          ),
        }
      )
  return out


def pooled(diffs: list[dict[str, Any]], confidence: float = CONFIDENCE) -> list[dict[str, Any]]:
  """Per method and size (and over every size, `size` None), the mean over datasets of
  `diffs`' paired means with a t-interval over those per-(dataset, size) means: the
  unit is a dataset, its seeds' noise inside its mean. Over every size a dataset counts
  once per size (nested subsets of one dataset, so not independent units)."""
  out = []
  for method in sorted({d["method"] for d in diffs}, key=lambda m: report_order(m)):
    mine = [d for d in diffs if d["method"] == method]
    sizes = sorted({d["size"] for d in mine}, key=_size_order)
    for size in [*sizes, None]:
      means = [d["mean"] for d in mine if size is None or d["size"] == size]
      interval = paired_difference(means, [0.0] * len(means), confidence)
      out.append(
        {
          "method": method,
          "reference": mine[0]["reference"],
          "size": size,
          "datasets": sorted({d["dataset"] for d in mine if size is None or d["size"] == size}),
          "at_least_one_point": sum(m >= 0.01 for m in means),
          **interval,
        }
      )
  return out


def report_order(method: str, dataset: str = "", size: int = 0):
  """The report's order: the label prior, the linear model, the MLP, the energy methods as
  listed (each `_on_<base>` variant after its method), others, their `_on_<base>`
  variants."""
  rank = (PRIOR, LINEAR, *METHODS)
  name = small_data.config_name(method)
  place = rank.index(name) if name in rank else len(rank)
  return (place + 0.5 * (name != method), method, dataset, _size_order(size))


def _count(n: int, noun: str) -> str:
  """`1 set`, `2 sets`."""
  return f"{n} {noun}{'s' * (n != 1)}"


def points(d: dict[str, Any]) -> str:
  """`+1.23 ± 0.45` in points (the interval's half-width; `(no interval)` with one
  pair), bold where the interval leaves out 0."""
  if d["half_width"] is None:
    return f"{100 * d['mean']:+.2f} (no interval)"
  text = f"{100 * d['mean']:+.2f} ± {100 * d['half_width']:.2f}"
  return f"**{text}**" if d["low"] > 0 or d["high"] < 0 else text


def most_common(values: list, default):
  """The value `values` hold most often (the smallest of a tie); `default` when empty."""
  return max(sorted(set(values)), key=values.count, default=default)


def marked_with_seeds(usual: int) -> Callable[[dict[str, Any]], str]:
  """`points` of a difference, with its seed count `(n=k)` where it has an interval over
  another count than `usual`."""
  return lambda d: points(d) + (f" (n={d['n']})" if d["n"] >= 2 and d["n"] != usual else "")


def _num_train(records, dataset, size) -> int:
  return next(
    (
      r["num_train"]
      for r in records
      if (r["dataset"], r["size"]) == (dataset, size) and r["num_train"]
    ),
    size,
  )


def grid(records, entries, text) -> str:
  """Markdown: a row per (dataset, size) of `records`, a column per method of `entries`
  (dicts with method, dataset, size), each cell `text(entry)`."""
  methods = sorted({e["method"] for e in entries}, key=report_order)
  by_key = {(e["method"], e["dataset"], e["size"]): e for e in entries}
  rows = sorted(
    {(r["dataset"], r["size"]) for r in records}, key=lambda k: (k[0], _size_order(k[1]))
  )
  head = ["dataset", "train rows", *(_label(m) for m in methods)]
  lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
  for dataset, size in rows:
    cells_ = [by_key.get((m, dataset, size)) for m in methods]
    lines.append(
      f"| {dataset} | {_num_train(records, dataset, size)} | "
      + " | ".join("—" if e is None else text(e) for e in cells_)
      + " |"
    )
  return "\n".join(lines)


def _label(method: str) -> str:
  return {LINEAR: "LR (sklearn)", PRIOR: "label prior"}.get(method, method)


def scores_table(records: list[dict[str, Any]]) -> str:
  """Test example-F1 (%) per cell: mean ± standard deviation over its seeds."""
  groups: dict[tuple, list[float]] = {}
  for r in records:
    groups.setdefault((r["method"], r["dataset"], r["size"]), []).append(r[METRIC])
  entries = [{"method": m, "dataset": d, "size": s, "values": v} for (m, d, s), v in groups.items()]
  return grid(
    records,
    entries,
    lambda e: (
      f"{100 * np.mean(e['values']):.2f}"
      + (f" ± {100 * np.std(e['values'], ddof=1):.2f}" if len(e["values"]) > 1 else "")
      + f" ({len(e['values'])})"
    ),
  )


def pooled_table(pools: list[dict[str, Any]]) -> str:
  """Markdown: a row per method, a column per size (and every size), each the pooled
  difference with its interval, the datasets pooled and how many are ≥ +1 point."""
  sizes = sorted({p["size"] for p in pools if p["size"] is not None}, key=_size_order)
  head = ["method", *(f"n={s or 'all'}" for s in sizes), "every size"]
  lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
  by_key = {(p["method"], p["size"]): p for p in pools}
  for method in sorted({p["method"] for p in pools}, key=report_order):
    cells_ = [by_key.get((method, s)) for s in [*sizes, None]]
    lines.append(
      f"| {_label(method)} | "
      + " | ".join(
        "—"
        if p is None
        else f"{points(p)}; {_count(len(p['datasets']), 'set')}, {p['at_least_one_point']} ≥ +1"
        for p in cells_
      )
      + " |"
    )
  return "\n".join(lines)


def sentences(pools: list[dict[str, Any]], reference: str) -> list[str]:
  """One line per method: its pooled difference against `reference` over every size."""
  lines = []
  for p in pools:
    if p["size"] is not None:
      continue
    side = ""
    if p["half_width"] is not None and (p["low"] > 0 or p["high"] < 0):
      side = f" ({'above' if p['low'] > 0 else 'below'} it at {100 * CONFIDENCE:.0f} %)"
    elif p["half_width"] is not None:
      side = f" (its {100 * CONFIDENCE:.0f} % interval holds 0)"
    lines.append(
      f"- {_label(p['method'])} − {_label(reference)}: {points(p)} points over "
      f"{_count(p['n'], '(dataset, size) pair')}{side}; at least +1 point on "
      f"{p['at_least_one_point']} of them."
    )
  return lines


def _pair_order(pair: tuple[str, int]) -> tuple[int, str]:
  """Sizes ascending (all rows last), then datasets by name."""
  return (_size_order(pair[1]), pair[0])


def _pair_name(dataset: str, size: int) -> str:
  """`yeast 500`, `genbase all`."""
  return f"{dataset} {size or 'all'}"


def finding(verdict_summary: dict[str, Any]) -> str:
  """The verdict in one sentence, from `summary`'s JSON (`verdict.json`): which (dataset,
  size) pairs and seeds ran, each method's pooled difference against the tuned MLP over
  every size (over seeds where a method has one pair), which are above or below it at
  95 %, and the tuned MLP against the tuned linear model. README.md and
  REPRODUCTION.md carry it (`benchmarks.reproduction`)."""
  records = verdict_summary["records"]
  diffs = verdict_summary["differences"]
  pools = [p for p in verdict_summary["pooled"] if p["size"] is None]
  pairs = sorted({(r["dataset"], r["size"]) for r in records}, key=_pair_order)
  where = ", ".join(_pair_name(*p) for p in pairs)

  def scope(method: str, reference: str) -> str:
    """` (yeast 500 only)` where the method ran on fewer pairs than the report holds."""
    mine = sorted(
      {
        (d["dataset"], d["size"])
        for d in diffs
        if (d["method"], d["reference"]) == (method, reference)
      },
      key=_pair_order,
    )
    if len(mine) == len(pairs):
      return ""
    return f" ({', '.join(_pair_name(*p) for p in mine)} only)"

  def over_every_size(method: str, reference: str) -> dict[str, Any] | None:
    pool = next((p for p in pools if (p["method"], p["reference"]) == (method, reference)), None)
    if pool is not None and pool["n"] == 1:  # one pair: its interval over seeds
      return next(d for d in diffs if (d["method"], d["reference"]) == (method, reference))
    return pool

  methods = sorted({p["method"] for p in pools if p["reference"] == MLP}, key=report_order)
  methods = [m for m in methods if m not in (MLP, LINEAR, PRIOR)]
  shown, above, below = [], [], []
  for method in methods:
    d = over_every_size(method, MLP)
    if d is None:
      continue
    shown.append(f"{_label(method)} {points(d).replace('**', '')}{scope(method, MLP)}")
    if d["half_width"] is not None and d["low"] > 0:
      above.append(_label(method))
    elif d["half_width"] is not None and d["high"] < 0:
      below.append(_label(method))
  mlp_vs_linear = over_every_size(MLP, LINEAR)
  linear = (
    f"; the tuned MLP against the tuned LogisticRegression: "
    f"{points(mlp_vs_linear).replace('**', '')}{scope(MLP, LINEAR)}"
    if mlp_vs_linear
    else ""
  )
  return (
    f"At equal search budget on {_count(len(pairs), '(dataset, size) pair')} "
    f"({where}; {_seeds_of_pairs(records)}), "
    "test example-F1 against the tuned MLP in points (mean ± 95 % half-width, over "
    "datasets, or over seeds for one pair): "
    f"{'; '.join(shown) or 'no method'}; above it at 95 %: {', '.join(above) or 'none'}; "
    f"below it: {', '.join(below) or 'none'}{linear}"
  )


def _seeds_of_pairs(records: list[dict[str, Any]]) -> str:
  """`seeds 0, 1, 2`, or the seeds most pairs ran and the pairs that ran others:
  `seeds 0, 1, 2 (0, 1, 2, 3, 4 on yeast 250)`."""
  seeds: dict[tuple[str, int], set[int]] = {}
  for r in records:
    seeds.setdefault((r["dataset"], r["size"]), set()).add(r["seed"])
  runs = [tuple(sorted(s)) for s in seeds.values()]
  usual = most_common(runs, ())
  others = [
    f"{', '.join(map(str, run))} on "
    + ", ".join(_pair_name(*p) for p in sorted(seeds, key=_pair_order) if seeds[p] == set(run))
    for run in sorted(set(runs) - {usual})
  ]
  return f"seeds {', '.join(map(str, usual))}" + (f" ({'; '.join(others)})" if others else "")


def seed_counts(records: list[dict[str, Any]]) -> str:
  seeds = sorted({r["seed"] for r in records})
  return f"seeds {seeds}" if seeds else "no cells"


def report(records: list[dict[str, Any]], tune_budget: dict[str, Any], vary_data: bool) -> str:
  """The markdown report of `records` run with `tune_budget`."""
  vs_mlp, vs_linear = differences(records, MLP), differences(records, LINEAR)
  counts = [d["n"] for d in vs_mlp + vs_linear if d["n"] >= 2]
  # The usual seed count goes in the header; a difference over another count says so.
  n = most_common(counts, 0)
  others = "".join(
    f"; n={k}: t = {_t_quantile(k):.2f}, its differences marked (n={k})"
    for k in sorted(set(counts) - {n})
  )
  small_n = (
    f" With n={n} seeds the half-width is t·sd/√n with t the {(1 + CONFIDENCE) / 2:.3f} "
    f"quantile of Student's t with n−1 degrees of freedom, "
    f"t = {_t_quantile(n):.2f}{others}: wide, and only "
    "as good as the normality of so few differences."
    if 2 <= n <= 5
    else ""
  )
  with_seeds = marked_with_seeds(n)

  return "\n".join(
    [
      f"Test example-F1, every method tuned with one budget: `tune` = "
      f"`{json.dumps(tune_budget, sort_keys=True)}` (tune.seed = train.seed = the seed"
      + (", and data.split_seed" if vary_data else "; data.split_seed 0")
      + f"); {seed_counts(records)}. Differences are in points, paired by seed, "
      f"± the half-width of the {100 * CONFIDENCE:.0f} % t-interval over seeds; bold: "
      "the interval leaves out 0; no interval: one seed (pooled: one dataset)."
      f"{small_n} — : not run.",
      "",
      "Test example-F1 (%), mean ± sd over seeds (number of seeds):",
      "",
      scores_table(records),
      "",
      "Paired difference against the tuned MLP:",
      "",
      grid(records, vs_mlp, with_seeds),
      "",
      "Paired difference against the tuned linear model (scikit-learn LogisticRegression):",
      "",
      grid(records, vs_linear, with_seeds),
      "",
      "Pooled across datasets (the unit: a dataset's mean paired difference; t-interval "
      "over datasets; `≥ +1`: datasets whose mean difference is at least +1 point), "
      "against the tuned MLP:",
      "",
      pooled_table(pooled(vs_mlp)),
      "",
      "against the tuned linear model:",
      "",
      pooled_table(pooled(vs_linear)),
      "",
      "Over every size (a dataset once per size):",
      *sentences(pooled(vs_mlp), MLP),
      *sentences(pooled(vs_linear), LINEAR),
      "",
      "Wall time of each cell (the search included):",
      *small_data.durations(records),
      *(
        [
          f"A `<method>{small_data.ON}<base>` cell's time is its own search and final run, "
          "on top of the base's cell that it starts from."
        ]
        if any(small_data.start_method(r["method"]) for r in records)
        else []
      ),
    ]
  )


def plot(records: list[dict[str, Any]], path: str) -> None:
  """A panel per method: its paired difference against the tuned MLP per dataset, a
  marker per size, the bars the 95 % intervals."""
  from experiments import plots  # pylint: disable=g-import-not-at-top

  plt = plots.pyplot()
  # The label prior is tens of points below on some sets: on the shared axis it would
  # flatten every other panel.
  diffs = [d for d in differences(records, MLP) if d["method"] != PRIOR]
  methods = sorted({d["method"] for d in diffs}, key=report_order) or [LINEAR]
  datasets = sorted({d["dataset"] for d in diffs})
  sizes = sorted({d["size"] for d in diffs}, key=_size_order)
  columns = min(4, len(methods))
  rows = -(-len(methods) // columns)
  fig, axes = plt.subplots(
    rows, columns, figsize=(3.6 * columns, 3 * rows), squeeze=False, sharey=True
  )
  for ax, method in zip(axes.flat, methods):
    for k, size in enumerate(sizes):
      mine = {d["dataset"]: d for d in diffs if (d["method"], d["size"]) == (method, size)}
      xs = [i + 0.8 * (k + 0.5) / len(sizes) - 0.4 for i, ds in enumerate(datasets) if ds in mine]
      ys = [100 * mine[ds]["mean"] for ds in datasets if ds in mine]
      errors = [100 * (mine[ds]["half_width"] or 0) for ds in datasets if ds in mine]
      ax.errorbar(
        xs, ys, yerr=errors, fmt="o", ms=3, capsize=2, color=f"C{k}", label=f"n={size or 'all'}"
      )
    ax.axhline(0, color="black", lw=0.8)
    ax.axhline(1, color="gray", lw=0.6, ls=":")
    # Every panel spans every dataset, so a dataset sits at the same place in each.
    ax.set_xlim(-0.5, len(datasets) - 0.5)
    ax.set_xticks(
      range(len(datasets)), datasets, rotation=30, ha="right", rotation_mode="anchor", fontsize=7
    )
    ax.set_title(f"{_label(method)} − mlp")
  for ax in axes.flat[len(methods) :]:
    ax.set_visible(False)
  for ax in axes[:, 0]:
    ax.set_ylabel("test example-F1 difference (points)")
  axes.flat[0].legend(fontsize=6)
  fig.tight_layout()
  plots.save_figure(fig, path, dpi=120)


def summary(records: list[dict[str, Any]], tune_budget: dict[str, Any], vary_data: bool) -> dict:
  """The report's JSON: the budget, the seed rule, every cell's record and the
  differences (in F1 units, not points)."""
  vs_mlp, vs_linear = differences(records, MLP), differences(records, LINEAR)
  return {
    "budget": {"tune": tune_budget, "vary_data": vary_data},
    "confidence": CONFIDENCE,
    "records": records,
    "differences": vs_mlp + vs_linear,
    "pooled": pooled(vs_mlp) + pooled(vs_linear),
  }


_FLAGS = {}


def _define_flags():
  return {
    "data_dir": flags.DEFINE_string("data_dir", "", "data directory (else $ENERGYNETS_DATA_DIR)"),
    "workdir": flags.DEFINE_string("workdir", None, "where every cell's run goes", required=True),
    "datasets": flags.DEFINE_list("datasets", list(DATASETS), "registered datasets"),
    "sizes": flags.DEFINE_list("sizes", [str(s) for s in SIZES], "training rows (0: all)"),
    "methods": flags.DEFINE_list("methods", list(METHODS), "experiment configs (mlp included)"),
    "seeds": flags.DEFINE_list(
      "seeds", [str(s) for s in SEEDS], "seeds (at least 2 for intervals)"
    ),
    "linear": flags.DEFINE_bool(
      "linear", True, "run scikit-learn's tuned LogisticRegression and the label prior"
    ),
    "vary_data": flags.DEFINE_bool(
      "vary_data", True, "data.split_seed follows the seed (training subset, validation holdout)"
    ),
    "only": flags.DEFINE_list(
      "only", [], "globs of cell names (seed0/yeast/n500/mlp_tuned) to visit; empty: all"
    ),
    "max_cells": flags.DEFINE_integer("max_cells", 0, "train at most this many cells (0: all)"),
    "report_only": flags.DEFINE_bool(
      "report_only", False, "train nothing: report the cells already finished in --workdir"
    ),
    "jobs": flags.DEFINE_integer("jobs", 1, "cells run at once, each in its own process"),
    "set": flags.DEFINE_multi_string(
      "set",
      [],
      "key=value override of every cell's config, method:key=value of one method's "
      "(sklearn_lr: the br config it reads); tune.KEY=VALUE changes every method's budget",
    ),
    "out": flags.DEFINE_string("out", "", "markdown report (and .json beside it)"),
    "plot": flags.DEFINE_string("plot", "", "figure of the differences against the tuned MLP"),
    "records": flags.DEFINE_list(
      "records",
      [],
      "earlier reports' .json files: their cells of this command's datasets, sizes, "
      "methods and seeds are reported unless --workdir has them",
    ),
    "refit_from": flags.DEFINE_string(
      "refit_from",
      "",
      "an earlier report's .json: each unstarted tuned cell it holds reruns its recorded "
      "choice's final run instead of searching (after a change to the final run alone); "
      "the wall time reported is the earlier cell's",
    ),
  }


def read_report(path: str) -> dict[str, Any]:
  """A report's .json (its budget, records, differences).

  Raises:
    app.UsageError: it cannot be read as a report's .json.
  """
  try:
    with open(path) as f:
      earlier = json.load(f)
  except (OSError, ValueError) as e:
    raise app.UsageError(f"{path} is not a verdict report's .json: {e!r}") from None
  if not isinstance(earlier, dict) or not {"budget", "records"} <= earlier.keys():
    raise app.UsageError(f"{path} is not a verdict report's .json: no budget and records")
  return earlier


def read_records(path: str, tune_budget: dict[str, Any], vary_data: bool) -> list[dict]:
  """The records of an earlier report's .json.

  Raises:
    app.UsageError: it cannot be read as a report's .json, or was run with another
      budget or seed rule.
  """
  earlier = read_report(path)
  if earlier["budget"] != json.loads(json.dumps({"tune": tune_budget, "vary_data": vary_data})):
    raise app.UsageError(f"{path} was run with {earlier['budget']}, not this budget")
  return earlier["records"]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  value = lambda name: _FLAGS[name].value
  try:
    tune_budget = budget(value("set"))
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  vary_data = value("vary_data")
  named = cells(
    value("datasets"),
    [int(s) for s in value("sizes")],
    value("methods"),
    [int(s) for s in value("seeds")],
    value("linear"),
  )
  chosen = select(
    named,
    value("workdir"),
    value("only"),
    value("max_cells"),
    value("report_only"),
  )
  overrides_of = {c: cell_overrides(c, tune_budget, value("set"), vary_data) for c in chosen}
  small_data.check_configs(((c.cell, o) for c, o in overrides_of.items()), value("data_dir"))
  small_data.check_finished(
    (os.path.join(value("workdir"), c.name), o) for c, o in overrides_of.items()
  )
  try:
    check_budget(value("workdir"), {"tune": tune_budget, "vary_data": vary_data})
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  if value("refit_from"):
    given = refit_from(
      chosen,
      read_records(value("refit_from"), tune_budget, vary_data),
      value("workdir"),
      value("data_dir"),
      tune_budget,
      value("set"),
      vary_data,
    )
    unstarted = [c for c in chosen if not os.path.exists(os.path.join(value("workdir"), c.name))]
    print(
      f"--refit_from: {len(given)} cells refit a recorded choice; "
      f"{len(unstarted)} unstarted cells without one search",
      flush=True,
    )
  records = run(
    chosen, value("workdir"), value("data_dir"), tune_budget, value("jobs"), value("set"), vary_data
  )
  for path in value("records"):
    records = merge(records, in_slice(read_records(path, tune_budget, vary_data), named))
  body = report(records, tune_budget, vary_data)
  print(body)
  if value("out"):
    common.write_report(value("out"), "benchmarks.verdict", body)
    with open(os.path.splitext(value("out"))[0] + ".json", "w") as f:
      json.dump(
        summary(records, tune_budget, vary_data), f, indent=1, default=configuration.json_default
      )
  if value("plot"):
    plot(records, value("plot"))


if __name__ == "__main__":
  _FLAGS = _define_flags()
  cli.run(main)

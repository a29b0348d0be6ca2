r"""Tuned `br` against scikit-learn's LogisticRegression tuned the same way.

Our tuner (`experiments.tune`: C and feature scaling chosen by k-fold cross-validation
on the training split, refit on all training rows) against scikit-learn's one-vs-rest
`LogisticRegression(C)` behind `StandardScaler` / `MaxAbsScaler` / nothing, chosen on the
same folds by the same held-out metric, refit on the same rows, thresholded on the same
validation split:

  python -m benchmarks.br_tuned_vs_sklearn --path=DATA/yeast \
      --workdir=/tmp/br_tuned --out=results/spen/br_tuned_vs_sklearn.md
"""

import json
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np

from benchmarks import common
from energynets import metrics
from energynets.train import quiet_library_logs
from experiments import cli
from experiments import configuration
from experiments import tasks
from experiments import tune

KEYS = ("test/example_f1", "test/example_f1@0.5", "test/micro_f1", "test/macro_f1")


def _fit_labels(
  c: float,
  scaled_train: np.ndarray,
  train_y: np.ndarray,
  labels: np.ndarray,
  scaled_others: list[np.ndarray],
) -> list[np.ndarray]:
  """P(label = 1) of every row of each of `scaled_others`, `[N, len(labels)]`: one
  `LogisticRegression(C=c)` per label (a label with one class only predicts it)."""
  from sklearn.linear_model import LogisticRegression  # pylint: disable=g-import-not-at-top

  probs = [np.zeros((len(o), len(labels)), np.float32) for o in scaled_others]
  for k, label in enumerate(labels):
    column = train_y[:, label]
    if column.min() == column.max():
      for p in probs:
        p[:, k] = column[0]
      continue
    model = LogisticRegression(C=c, max_iter=5000).fit(scaled_train, column)
    for p, o in zip(probs, scaled_others):
      p[:, k] = model.predict_proba(o)[:, 1]
  return probs


def sklearn_tuned_br(
  dataset, held_out: list[np.ndarray] | None, space: dict[str, tuple], jobs: int = 1
) -> dict:
  """scikit-learn's OvR LogisticRegression with C and scaling chosen by cross-validation.

  Args:
    dataset: the multi-label dataset with unscaled features (`feature_scaling='none'`).
    held_out: each fold's held-out rows of `dataset.train` (`tune.fold_indices`);
      None: select on `dataset.validation` (the tuner's rule from 2,000 training rows).
    space: `{"loss.l2_c": Cs, "data.feature_scaling": scalings}` (br's search space).
    jobs: processes that fit the labels (split into `jobs` groups); the same models
      as one process fits.

  Returns:
    `{"chosen": {...}, "value": mean held-out validation/example_f1, "trials": [...],
    "test/...": the refit's metrics}`, the threshold tuned on `dataset.validation`.
  """
  import joblib  # pylint: disable=g-import-not-at-top
  from sklearn import preprocessing  # pylint: disable=g-import-not-at-top

  scalers = {
    "none": lambda: preprocessing.FunctionTransformer(),
    "zscore": preprocessing.StandardScaler,
    "maxabs": preprocessing.MaxAbsScaler,
  }
  groups = [g for g in np.array_split(np.arange(dataset.train.y.shape[1]), jobs) if g.size]
  # Arrays are pickled to the workers, not memory-mapped: loky's resource tracker
  # prints spurious KeyError tracebacks when it unlinks shared-memory copies.
  parallel = joblib.Parallel(n_jobs=len(groups), max_nbytes=None) if len(groups) > 1 else None

  def fit_predict(c, scaling, train_x, train_y, *others):
    scaler = scalers[scaling]().fit(train_x)
    scaled_train = scaler.transform(train_x)
    scaled_others = [scaler.transform(o) for o in others]
    if parallel is None:
      return _fit_labels(c, scaled_train, train_y, groups[0], scaled_others)
    parts = parallel(
      joblib.delayed(_fit_labels)(c, scaled_train, train_y, g, scaled_others) for g in groups
    )
    return [np.concatenate([part[i] for part in parts], axis=1) for i in range(len(scaled_others))]

  x, y = dataset.train.x, dataset.train.y
  everything = np.arange(len(x))
  if held_out is None:
    parts = [(x, y, dataset.validation.x, dataset.validation.y)]
  else:
    parts = [
      (x[fit], y[fit], x[rows], y[rows])
      for rows in held_out
      for fit in [np.setdiff1d(everything, rows)]
    ]
  trials = []
  grid = [(c, scaling) for c in space["loss.l2_c"] for scaling in space["data.feature_scaling"]]
  start = time.time()
  for c, scaling in grid:
    scores = []
    for fit_x, fit_y, scored_x, scored_y in parts:
      (probs,) = fit_predict(c, scaling, fit_x, fit_y, scored_x)
      threshold = metrics.tune_threshold(scored_y, probs)
      scores.append(metrics.example_f1(scored_y, probs >= threshold))
    trials.append({"C": c, "scaling": scaling, "value": float(np.mean(scores))})
    # A setting on a large label set takes minutes: say how far the grid is.
    logging.info(
      "linear model %d/%d: C=%g, scaling %s: held-out example-F1 %.4f | %.0f s elapsed",
      len(trials),
      len(grid),
      c,
      scaling,
      trials[-1]["value"],
      time.time() - start,
    )
  best = max(trials, key=lambda t: t["value"])
  val_probs, test_probs = fit_predict(
    best["C"], best["scaling"], x, y, dataset.validation.x, dataset.test.x
  )
  results = metrics.evaluate_multilabel(
    val=(dataset.validation.y, val_probs), test=(dataset.test.y, test_probs)
  )
  return {
    "chosen": {"C": best["C"], "scaling": best["scaling"]},
    "value": best["value"],
    "trials": trials,
    **{k: float(v) for k, v in results.items()},
  }


def compare(
  path: str, workdir: str, *, folds: int = 5, overrides=(), jobs: int = 1
) -> tuple[dict, dict, tune.TuneResult]:
  """(ours, scikit-learn's, our TuneResult) on the MULAN folder `path`."""
  # The trials' step budget as the config's own, so that its setting (trial 0) is a grid
  # point, and every trial trains every fold: the grid scikit-learn evaluates, exactly.
  config = configuration.get_config(
    "br", "mulan", [f"data.path={path}", "train.steps=1500", *overrides]
  )
  space = tune.search_spaces.for_config("br", "mulan")
  result = tune.tune(config, workdir, space=space, folds=folds, jobs=jobs, prune=False)
  raw_config = configuration.with_overrides(config, {"data.feature_scaling": "none"})
  raw = tasks.task_for(raw_config).load(raw_config)
  held_out = tune.fold_indices(raw.train.num_examples, folds, 0)
  started = time.time()
  theirs = sklearn_tuned_br(raw, held_out, space)
  theirs["seconds"] = time.time() - started
  return result.results, theirs, result


def _define_flags():
  """The command line's flags (only when this module is the program: tests import it
  next to other benchmarks that define flags of the same names)."""
  return {
    "path": flags.DEFINE_string("path", None, "MULAN dataset folder"),
    "workdir": flags.DEFINE_string("workdir", None, "where the tuner writes"),
    "folds": flags.DEFINE_integer("folds", 5, "folds of the selection"),
    "jobs": flags.DEFINE_integer("jobs", 1, "trials trained at once"),
    "set": flags.DEFINE_multi_string("set", [], "override for our br config"),
    "out": flags.DEFINE_string("out", "", "also write the markdown table here"),
  }


_FLAGS = {}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  tune.use_compilation_cache(f"{_FLAGS['workdir'].value}/xla_cache")
  value = lambda name: _FLAGS[name].value
  folds = value("folds")
  ours, theirs, result = compare(
    value("path"), value("workdir"), folds=folds, overrides=value("set"), jobs=value("jobs")
  )
  tuning = ours["meta"]["tuning"]
  lines = [
    "| | chosen | held-out ex-F1 | " + " | ".join(KEYS) + " | s |",
    "|---" * (len(KEYS) + 4) + "|",
  ]
  ours_chosen = (
    f"C={tuning['overrides']['loss.l2_c']:g}, "
    f"{tuning['overrides']['data.feature_scaling']}, "
    f"{tuning['overrides'].get('train.steps', '')} steps"
  )
  for name, res, chosen, held, secs in (
    ("energynets br (experiments.tune)", ours, ours_chosen, tuning["value"], result.seconds),
    (
      "scikit-learn LogisticRegression",
      theirs,
      f"C={theirs['chosen']['C']:g}, {theirs['chosen']['scaling']}",
      theirs["value"],
      theirs["seconds"],
    ),
  ):
    cells = [f"{100 * res[k]:.2f}" for k in KEYS]
    lines.append(
      f"| {name} | {chosen} | {100 * held:.2f} | " + " | ".join(cells) + f" | {secs:.0f} |"
    )
  diff = 100 * (ours["test/example_f1"] - theirs["test/example_f1"])
  lines += ["", f"difference (ours − scikit-learn), test example-F1 points: {diff:+.2f}"]
  table = "\n".join(lines)
  print(table)
  print(json.dumps({"sklearn_trials": theirs["trials"]}, indent=1))
  if value("out"):
    common.write_report(
      value("out"),
      "benchmarks.br_tuned_vs_sklearn",
      f"Dataset {ours['meta']['dataset']} (by path), {folds}-fold selection on "
      f"the training split over {tuning['search_space']}; rates in percent; threshold "
      f"tuned on the validation split.\n\n{table}",
      revision=ours["meta"]["code_revision"],
    )


if __name__ == "__main__":
  _FLAGS.update(_define_flags())
  flags.mark_flags_as_required(["path", "workdir"])
  cli.run(main)

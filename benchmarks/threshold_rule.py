r"""What the one-standard-error threshold rule would change in a verdict's test example-F1.

  python -m benchmarks.threshold_rule --workdir=W --data_dir=DATA --standard_errors=1 \
      --out=results/verdict/threshold_rule.md

Every finished multi-label cell of a verdict workdir (`seed<s>/<dataset>/n<size>/
<method>_<mode>`) is restored (`energynets.load_run`: its selected state) and predicts
its validation and test rows. Its threshold is tuned on validation as the run tuned it
(`metrics.tune_threshold`, checked against the test score it reported) and again with
`standard_errors`; the report gives the test example-F1 change (points) per (method,
dataset, size) and per method, as `verdict_changes` does, and the change of keeping 0.5.
"""

import json
import os
from typing import Any

from absl import app
from absl import flags
import numpy as np

from benchmarks import common
from benchmarks import verdict_changes
from energynets import metrics
from experiments import cli


def scores_at_thresholds(
  predictions: dict[str, np.ndarray], standard_errors: float
) -> dict[str, float]:
  """Test example-F1 at the threshold tuned as the library does, with `standard_errors`,
  and at 0.5."""
  y_val, p_val = predictions["y_val"], predictions["p_val"]
  at = lambda t: metrics.example_f1(predictions["y_test"], predictions["p_test"] >= t)
  return {
    "tuned": at(metrics.tune_threshold(y_val, p_val)),
    "rule": at(metrics.tune_threshold(y_val, p_val, standard_errors=standard_errors)),
    "half": at(0.5),
  }


def records(workdir: str, standard_errors: float, data_dir: str = "") -> dict[str, list[dict]]:
  """Verdict-style records of every finished multi-label cell under `workdir`, one list
  per threshold (`'tuned'`, `'rule'`, `'half'`).

  Raises:
    ValueError: a cell's threshold tuned here does not give the score it reported.
  """
  out: dict[str, list[dict]] = {"tuned": [], "rule": [], "half": []}
  for cell in common.verdict_cells(workdir):
    with open(os.path.join(cell.directory, "results.json")) as f:
      reported = json.load(f)
    if "threshold" not in reported:
      continue  # not a multi-label run
    (predictions,) = common.run_predictions(cell.directory, data_dir)
    scores = scores_at_thresholds(predictions, standard_errors)
    if abs(scores["tuned"] - reported["test/example_f1"]) > 1e-6:
      raise ValueError(
        f"{cell.directory}: its restored state scores {scores['tuned']:.6f} at the tuned "
        f"threshold, not the {reported['test/example_f1']:.6f} it reported"
      )
    key = {"dataset": cell.dataset, "size": cell.size, "method": cell.method}
    for name, score in scores.items():
      out[name].append({**key, "seed": cell.seed, "test/example_f1": score})
  return out


def report(by_threshold: dict[str, list[dict]], standard_errors: float) -> str:
  """The two change tables: the rule against the tuned threshold, and 0.5 against it."""
  parts = []
  for name, title in (
    ("rule", f"With standard_errors={standard_errors:g}"),
    ("half", "At 0.5"),
  ):
    rows = verdict_changes.changes(by_threshold["tuned"], by_threshold[name])
    compared = sum(r["n"] for r in rows if r["dataset"] is None)
    table = verdict_changes.report(rows, compared, 0, 0)
    parts.append(f"## {title}, against the tuned threshold (after − before)\n\n{table}")
  return "\n\n".join(parts)


_FLAGS: dict[str, Any] = {}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  value = lambda name: _FLAGS[name].value
  by_threshold = records(value("workdir"), value("standard_errors"), value("data_dir"))
  if not by_threshold["tuned"]:
    raise cli.UserError(
      f"--workdir={value('workdir')} holds no finished multi-label verdict cell "
      "(seed<s>/<dataset>/n<size>/<method>_<mode> with results.json and run.json)"
    )
  body = report(by_threshold, value("standard_errors"))
  print(body)
  if value("out"):
    common.write_report(value("out"), "benchmarks.threshold_rule", body)


if __name__ == "__main__":
  _FLAGS = {
    "workdir": flags.DEFINE_string("workdir", None, "a verdict workdir", required=True),
    "data_dir": flags.DEFINE_string("data_dir", "", "the datasets, where not where runs read them"),
    "standard_errors": flags.DEFINE_float("standard_errors", 1.0, "the rule's standard errors"),
    "out": flags.DEFINE_string("out", "", "markdown report"),
  }
  cli.run(main)

r"""Does a trained multi-label predictor read its input? Diagnostics of finished runs.

A predictor that gives every test example the same 0/1 label set is input-blind,
whatever its architecture: its example-F1 is that of a constant, to compare with the
constants of `benchmarks.label_prior` (the k most frequent labels, k on validation). Per
finished run of `experiments.main` / `experiments.compare`:

- `test ex-F1 @0.5`: from the run's results.json;
- `distinct sets`: how many different label sets its test predictions hold at 0.5
  (from test_predictions.npz); 1 means the same set for every example;
- `labels per example`: mean and standard deviation of the set size at 0.5;
- for a run whose last stage has a SPEN energy (`spen_*`, `dvn`, SEAL-static's
  `loss_net` stage): `constant F(x) units`, the units of the feature network's last
  hidden layer whose value does not change over the training inputs (a dead ReLU or a
  saturated unit: max − min below `CONSTANT_TOL`), and `local logit std`, the standard
  deviation over test examples of the local logits ℓ(x) (mean over labels): what
  x-dependence the energy's local term has left. Both are computed without dropout.

  python -m benchmarks.input_dependence --runs=WORKDIR/cal500 --data_dir=DATA \
      --out=results/seal/dvn_cal500_input_blind.md

A `--runs` entry is a finished run directory or a directory holding finished runs
(compare's `<workdir>/<dataset>`: each one directly below it, in name order).
"""

import json
import os
from typing import Any

from absl import app
from absl import flags
import jax.numpy as jnp
import numpy as np

from benchmarks import common
from energynets import metrics
from energynets.energies import protocol
from energynets.train import quiet_library_logs
from experiments import builders
from experiments import cli
from experiments import configuration
from experiments import train

CONSTANT_TOL = 1e-6
RESULTS = "results.json"


def distinct_rows(binary: np.ndarray) -> int:
  """The number of different rows of a `[N, L]` array (label sets, one per example)."""
  binary = np.asarray(binary)
  if binary.ndim != 2:
    raise ValueError(f"expected an [N, L] array of label sets; got shape {binary.shape}")
  return len(np.unique(binary, axis=0)) if len(binary) else 0


def constant_units(features: np.ndarray, tol: float = CONSTANT_TOL) -> int:
  """The columns of `[N, f]` whose range over the N rows is below `tol`."""
  features = np.asarray(features, np.float64)
  if features.ndim != 2 or not len(features):
    raise ValueError(f"expected a non-empty [N, f] array; got shape {features.shape}")
  return int(np.sum(features.max(axis=0) - features.min(axis=0) < tol))


def prediction_summary(
  y_true: np.ndarray, probs: np.ndarray, threshold: float = 0.5
) -> dict[str, float]:
  """Example-F1, distinct label sets and set sizes of `probs` binarized at `threshold`."""
  binary = metrics.binarize(np.asarray(probs), threshold)
  sizes = np.asarray(binary).sum(axis=1)
  return {
    "example_f1": float(metrics.example_f1(np.asarray(y_true), binary)),
    "distinct_sets": float(distinct_rows(binary)),
    "labels_mean": float(sizes.mean()),
    "labels_std": float(sizes.std()),
  }


def finished_runs(paths) -> list[str]:
  """Each path if it is a finished run, else the finished runs directly below it."""
  runs = []
  for path in paths:
    if os.path.isfile(os.path.join(path, RESULTS)):
      runs.append(path)
      continue
    if not os.path.isdir(path):
      raise FileNotFoundError(f"{path} does not exist")
    below = sorted(
      os.path.join(path, d)
      for d in os.listdir(path)
      if os.path.isfile(os.path.join(path, d, RESULTS))
    )
    if not below:
      raise FileNotFoundError(
        f"{path} is neither a finished run (no {RESULTS}) nor a directory of finished runs"
      )
    runs.extend(below)
  return runs


def local_term_summary(run_dir: str, config, dataset) -> dict[str, float] | None:
  """Constant F(x) units and local-logit std of a SPEN-energy run (`config` as it
  recorded it, `dataset` its data); None for other runs (the last stage keeps no
  energy, or F has no hidden layer)."""
  last = configuration.stage_configs(config)[-1][1]
  if "energy" not in last or "feature_hidden" not in last.energy:
    return None
  if not tuple(last.energy.feature_hidden):
    return None
  try:
    params, _ = common.restore_spen_params(config, dataset, run_dir)
  except common.NotASpenStage:
    return None
  energy = builders.spen_energy(config, dataset)
  encode = lambda x: protocol.as_energy(energy).encode(params, jnp.asarray(x, jnp.float32))
  train_features = np.asarray(encode(dataset.train.x).features)
  test_logits = np.asarray(encode(dataset.test.x).logits)
  return {
    "constant_units": float(constant_units(train_features)),
    "units": float(train_features.shape[1]),
    "local_logit_std": float(test_logits.std(axis=0).mean()),
  }


def run_summary(run_dir: str, data_dir: str = "") -> dict[str, Any]:
  """Everything the table shows for one finished run."""
  with open(os.path.join(run_dir, RESULTS)) as f:
    results = json.load(f)
  path = os.path.join(run_dir, train.PREDICTIONS_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path} is missing: the run saved no test predictions")
  probs = np.load(path)["test"]
  config = common.finished_run_config(run_dir, data_dir)
  dataset = builders.load_data(config)
  y_test = np.asarray(dataset.test.y)
  if probs.shape != y_test.shape:
    raise ValueError(
      f"{path}: predictions of shape {probs.shape} for test labels of shape {y_test.shape}"
    )
  summary = prediction_summary(y_test, probs)
  recorded = results["test/example_f1@0.5"]
  if abs(summary["example_f1"] - recorded) > 1e-6:
    raise ValueError(
      f"{run_dir}: its saved predictions give test example-F1@0.5 "
      f"{summary['example_f1']:.6f}, its results.json {recorded:.6f}"
    )
  return dict(
    summary,
    run=os.path.basename(os.path.normpath(run_dir)),
    local=local_term_summary(run_dir, config, dataset),
  )


def table(rows) -> str:
  lines = [
    "| run | test ex-F1 @0.5 | distinct sets | labels per example | "
    "constant F(x) units | local logit std |",
    "|---|---|---|---|---|---|",
  ]
  for r in rows:
    local = r["local"]
    units = f"{local['constant_units']:.0f} of {local['units']:.0f}" if local else "—"
    std = f"{local['local_logit_std']:.2g}" if local else "—"
    lines.append(
      f"| {r['run']} | {100 * r['example_f1']:.2f} | {r['distinct_sets']:.0f} | "
      f"{r['labels_mean']:.1f} ± {r['labels_std']:.1f} | {units} | {std} |"
    )
  return "\n".join(lines)


def _define_flags():
  # Defined only when run as a program (see benchmarks.label_prior).
  flags.DEFINE_list("runs", None, "finished run directories, or directories of them")
  flags.DEFINE_string("data_dir", "", "data directory of the runs (else their recorded one)")
  flags.DEFINE_string("out", "", "also write the markdown table here (and a .json beside)")
  flags.mark_flag_as_required("runs")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  f = flags.FLAGS
  rows = [run_summary(run, f.data_dir) for run in finished_runs(f.runs)]
  text = table(rows)
  print(text)
  if f.out:
    common.write_report(
      f.out,
      "benchmarks.input_dependence",
      "Test predictions at 0.5 of finished runs: distinct label sets over the test "
      "examples, and what x-dependence the energy's local term has (constant units of "
      "F(x) on the training inputs; std of the local logits over test examples).\n\n" + text,
    )
    with open(os.path.splitext(f.out)[0] + ".json", "w") as handle:
      json.dump(rows, handle, indent=1)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)

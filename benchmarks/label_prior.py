r"""Input-blind floors for multi-label example-F1: predictors that never read x.

Two predictors, both fitted on the training labels alone, evaluated with the protocol of
every multi-label run (`metrics.evaluate_multilabel`: threshold tuned on validation):

- `label prior`: every example gets the training frequency of each label as its
  probability; at 0.5 it predicts the labels present in most training examples, at the
  tuned threshold those above a frequency chosen on validation.
- `top-k frequent`: every example gets the k most frequent training labels, k chosen on
  validation example-F1 (ties: the smaller k).

A method's example-F1 means little until it clears these floors: on a dataset with
dense, skewed labels a constant prediction is already a strong answer (CAL500: 26 of
174 labels per song).

  python -m benchmarks.label_prior --data_dir=DATA \
      --out=results/seal/label_prior.md

`--out` also gets a `.json` beside it in `experiments.compare`'s format (methods
`label_prior` and `top_k_frequent`), so `results/paper_tables.json` can cite the floors.
"""

from collections.abc import Sequence
import json
import os

from absl import app
from absl import flags
import numpy as np

from benchmarks import common
from energynets import metrics
from energynets.train import quiet_library_logs
from experiments import builders
from experiments import cli
from experiments import configuration
from experiments import specs
from experiments import workdirs

# SEAL Table 1's columns, the FunCat ones in SEAL's 500-label setting as there.
DATASETS = (
  "bibtex",
  "delicious",
  "genbase",
  "cal500",
  "expr_fun:data.root_label=True",
  "spo_fun:data.root_label=True",
)


def label_frequencies(y_train: np.ndarray) -> np.ndarray:
  """`[N, L] -> [L]`: the fraction of training examples that carry each label."""
  y = np.asarray(y_train)
  if y.ndim != 2 or y.shape[0] == 0:
    raise ValueError(f"y_train must be a non-empty [N, L] array; got shape {y.shape}")
  return y.astype(np.float64).mean(axis=0)


def prior_probs(frequencies: np.ndarray, num_examples: int) -> np.ndarray:
  """`[L] -> [num_examples, L]`: the same label frequencies for every example."""
  return np.broadcast_to(frequencies, (num_examples, len(frequencies)))


def top_k_prediction(frequencies: np.ndarray, num_examples: int, k: int) -> np.ndarray:
  """`[num_examples, L]` 0/1: the k most frequent labels for every example (stable ties:
  the lower label index first)."""
  if not 0 <= k <= len(frequencies):
    raise ValueError(f"k must be in [0, {len(frequencies)}]; got {k}")
  chosen = np.zeros(len(frequencies), np.float64)
  chosen[np.argsort(-frequencies, kind="stable")[:k]] = 1.0
  return np.broadcast_to(chosen, (num_examples, len(frequencies)))


def select_k(
  frequencies: np.ndarray, y_val: np.ndarray, ks: Sequence[int] | None = None
) -> tuple[int, float]:
  """(k, validation example-F1) of the best `top_k_prediction`; ties go to the smaller
  k. `ks` defaults to 1..L."""
  ks = range(1, len(frequencies) + 1) if ks is None else ks
  best_k, best = None, -1.0
  for k in ks:
    score = metrics.example_f1(y_val, top_k_prediction(frequencies, len(y_val), k))
    if score > best + 1e-12:
      best_k, best = k, score
  if best_k is None:
    raise ValueError("ks is empty")
  return best_k, best


def floors(dataset) -> dict[str, dict[str, float]]:
  """`{method: results}` of both floors on one dataset, each in `results.json`'s keys
  (`metrics.evaluate_multilabel`; fractions). `top_k_frequent`'s prediction is 0/1, so
  every threshold gives it the same scores; its `k` is an extra key."""
  y_train, y_val, y_test = (
    np.asarray(s.y) for s in (dataset.train, dataset.validation, dataset.test)
  )
  freq = label_frequencies(y_train)
  k, _ = select_k(freq, y_val)
  return {
    "label_prior": metrics.evaluate_multilabel(
      val=(y_val, prior_probs(freq, len(y_val))), test=(y_test, prior_probs(freq, len(y_test)))
    ),
    "top_k_frequent": dict(
      metrics.evaluate_multilabel(
        val=(y_val, top_k_prediction(freq, len(y_val), k)),
        test=(y_test, top_k_prediction(freq, len(y_test), k)),
      ),
      k=float(k),
    ),
  }


def _define_flags():
  # Defined only when run as a program: the tests import this module next to other
  # absl programs (experiments.compare) whose flags share these names.
  flags.DEFINE_list(
    "datasets",
    list(DATASETS),
    "multi-label dataset specs, as experiments.compare's (name[:key=value...])",
  )
  flags.DEFINE_string("data_dir", "", "data directory (else $ENERGYNETS_DATA_DIR)")
  flags.DEFINE_string("out", "", "also write the markdown table here")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  f = flags.FLAGS
  revision = workdirs.code_revision()
  lines = [
    "| dataset | labels | labels per train example | label prior @0.5 | "
    "label prior, tuned (threshold) | top-k frequent, k on validation (k) |",
    "|---|---|---|---|---|---|",
  ]
  rows = []
  for spec in specs.rejoin_tuples(f.datasets):
    name, overrides = specs.parse_spec(spec)
    config = configuration.get_config("mlp", name, overrides)
    if f.data_dir:
      config.data.data_dir = f.data_dir
    dataset = builders.load_data(config)
    results = floors(dataset)
    prior, top_k = results["label_prior"], results["top_k_frequent"]
    cardinality = float(np.asarray(dataset.train.y).sum(axis=1).mean())
    lines.append(
      f"| {spec} | {dataset.num_labels} | {cardinality:.2f} | "
      f"{100 * prior['test/example_f1@0.5']:.2f} | {100 * prior['test/example_f1']:.2f} "
      f"({prior['threshold']:.2f}) | {100 * top_k['test/example_f1']:.2f} "
      f"({top_k['k']:.0f}) |"
    )
    meta = {
      "dataset": name,
      "split": dataset.meta.get("split_rule"),
      "code_revision": revision,
      "config": {"data": config.data.to_dict()},
    }
    rows.extend(
      {"dataset": spec, "method": method, "runs": [dict(res, meta=meta)]}
      for method, res in results.items()
    )
  table = "\n".join(lines)
  print(table)
  if f.out:
    common.write_report(
      f.out,
      "benchmarks.label_prior",
      "Test example-F1 (%) of predictors that ignore the input, on the splits every "
      "experiment uses (the `mlp` config's data); thresholds and k are chosen on "
      f"validation.\n\n{table}",
      revision=revision,
    )
    with open(os.path.splitext(f.out)[0] + ".json", "w") as handle:
      json.dump(rows, handle, indent=1)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)

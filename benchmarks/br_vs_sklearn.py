r"""Side-by-side check: our `br` against scikit-learn's one-vs-rest LogisticRegression(C=1).

Same dataset, same train/validation/test split, same threshold grid and tuning rule,
computed in one run:

  python -m benchmarks.br_vs_sklearn --dataset=bibtex --data_dir=DATA \
      --workdir=/tmp/br_vs_sklearn --out=results/spen/br_vs_sklearn.md
"""

import os
import time

from absl import app
from absl import flags

from benchmarks import common
from energynets.train import quiet_library_logs
from experiments import builders
from experiments import cli
from experiments import configuration
from experiments import train

_DATASET = flags.DEFINE_string("dataset", "bibtex", "registered multi-label dataset")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "data directory (else $ENERGYNETS_DATA_DIR)")
_WORKDIR = flags.DEFINE_string("workdir", None, "where our br run writes its results")
_C = flags.DEFINE_float("C", 1.0, "inverse L2 strength, as in scikit-learn")
_SET = flags.DEFINE_multi_string("set", [], "override for our br config, e.g. train.steps=100")
_OUT = flags.DEFINE_string("out", "", "also write the markdown table here")
flags.mark_flags_as_required(["workdir"])

KEYS = (
  "test/example_f1@0.5",
  "test/example_f1",
  "threshold",
  "test/micro_f1",
  "test/macro_f1",
  "test/hamming",
)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  config = configuration.get_config("br", _DATASET.value, _SET.value)
  config.loss.l2_c = _C.value
  if _DATA_DIR.value:
    config.data.data_dir = _DATA_DIR.value
  ours = train.train_and_evaluate(config, os.path.join(_WORKDIR.value, "br"))
  dataset = builders.load_data(config)
  started = time.time()
  theirs = common.sklearn_br_results(dataset, _C.value)
  sk_seconds = time.time() - started

  lines = ["| | " + " | ".join(KEYS) + " | train s |", "|---" * (len(KEYS) + 2) + "|"]
  for name, res, secs in (
    ("energynets br", ours, ours["meta"]["train_seconds"]),
    ("scikit-learn OvR LogisticRegression", theirs, sk_seconds),
  ):
    cells = [f"{res[k]:.2f}" if k == "threshold" else f"{100 * res[k]:.2f}" for k in KEYS]
    lines.append(f"| {name} | " + " | ".join(cells) + f" | {secs:.0f} |")
  diff = {k: 100 * (ours[k] - theirs[k]) for k in ("test/example_f1@0.5", "test/example_f1")}
  lines.append("")
  lines.append(
    "difference (ours − scikit-learn), example-F1 points: "
    + ", ".join(f"{k}: {v:+.2f}" for k, v in diff.items())
  )
  table = "\n".join(lines)
  print(table)
  if _OUT.value:
    common.write_report(
      _OUT.value,
      "benchmarks.br_vs_sklearn",
      f"Dataset {dataset.name}, split: {dataset.meta.get('split_rule')}; C={_C.value}; "
      f"rates in percent; threshold tuned on validation.\n\n{table}",
      revision=ours["meta"]["code_revision"],
    )


if __name__ == "__main__":
  cli.run(main)

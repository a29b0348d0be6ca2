r"""Means of a run's logged training metrics, e.g. how often an infnet hinge is active.

experiments.compare keeps each run's summary, not its history; the training records stay
in `<run>/[stages/<stage>/]metrics.jsonl` (energynets.train.MetricWriter's format). This
averages chosen `train/*` keys over every logged record of one stage:

  python -m benchmarks.train_records \
      --run_dir=/tmp/seq/conll2003_plus/infnet --stage=infnet \
      --keys=train/active_margin,train/active_perceptron
"""

import os

from absl import app
from absl import flags

from benchmarks.reproduction_plots import read_metrics_jsonl
from benchmarks.reproduction_plots import record_means
from experiments import cli

_RUN_DIR = flags.DEFINE_string("run_dir", None, "a run directory of experiments.main/compare")
_STAGE = flags.DEFINE_string("stage", "", "the stage whose records to read (staged runs)")
_KEYS = flags.DEFINE_list(
  "keys", ["train/active_margin", "train/active_perceptron"], "logged metrics to average"
)


def main(argv):
  del argv
  stage_dir = (
    os.path.join(_RUN_DIR.value, "stages", _STAGE.value) if _STAGE.value else _RUN_DIR.value
  )
  path = os.path.join(stage_dir, "metrics.jsonl")
  records = read_metrics_jsonl(path)
  if not records:
    raise app.UsageError(f"{path}: absent or empty (is --run_dir / --stage right?)")
  print(f"{path}")
  print("| metric | mean | logged records |\n|---|---|---|")
  for key, (mean, n) in record_means(records, _KEYS.value).items():
    print(f"| {key} | {mean:.3f} | {n} |")


if __name__ == "__main__":
  flags.mark_flags_as_required(["run_dir"])
  cli.run(main)

r"""Runs one experiment: train, select on validation, evaluate, write results.json.

  python -m experiments.main --config=experiments/configs/mlp.py:bibtex --workdir=/tmp/mlp \
      --config.train.steps=5000 --config.data.data_dir=../shared/data
"""

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from energynets.train import quiet_library_logs
from experiments import train

_CONFIG = config_flags.DEFINE_config_file(
    "config", "experiments/configs/mlp.py", "experiment config file[:dataset]",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "directory for checkpoints, logs and results")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  results = train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  logging.info("results: %s", {k: round(v, 4) for k, v in results.items() if k != "meta"})


if __name__ == "__main__":
  app.run(main)

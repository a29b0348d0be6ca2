r"""Training and inference time of SPEN, DVN and implicit training (Shankar & Piratla,
Table 5), and the cost of the implicit step against K, T_inner and the solver.

Each row is a method's last training stage as its config builds it for bibtex
(experiments/configs/<method>.py:bibtex, with the row's overrides):

- train: one jitted `update` (one parameter update of every group it trains) on a batch
  of the config's batch size, compile excluded, median of `--repeats` calls; seconds
  per epoch = that × updates per epoch (⌈train examples / batch⌉). This is the paper's
  "training time normalized by the number of parameter updates";
- inference: `predict` over the whole test split in the config's eval batches (SPEN and
  DVN: GBI to convergence; implicit: one forward pass of the inference network), median
  of `--repeats`;
- ratios are to the first row, measured in the same run (the rows are timed in turn).

The data are random arrays of bibtex's shapes (1836 binary features, 159 labels, 4880
training and 2515 test examples: MULAN's split), so no data files are needed and cost
does not depend on the values; parameters are the fresh initializations (GBI at test
runs to its iteration cap or tolerance, which for a fresh energy is representative
only roughly; the trained runs' `test/gbi_steps_mean` say how many steps they take).

  python -m benchmarks.implicit_timing --repeats=5 --out=results/implicit_timing.md
"""

import math

from absl import app
from absl import flags
import jax
import numpy as np

from benchmarks import common
from energynets.train import quiet_library_logs
from experiments import builders
from experiments import configuration

DEFAULT_ROWS = (
    "spen_ssvm", "dvn", "implicit",
    "implicit:implicit.primary=ssvm", "implicit:implicit.primary=dvn",
    "implicit:implicit.gradient=explicit",
    "implicit:implicit.inverse_hvp.num_terms=0",
    "implicit:implicit.inverse_hvp.num_terms=5",
    "implicit:implicit.inverse_hvp.num_terms=20",
    "implicit:implicit.inverse_hvp.num_terms=50",
    "implicit:implicit.inverse_hvp.method=cg",
    "implicit:implicit.inner_steps=1",
    "implicit:implicit.inner_steps=10",
    "implicit:implicit.inner_steps=20",
)
_ROWS = flags.DEFINE_list("rows", list(DEFAULT_ROWS),
                          "config[:key=value...] per row (experiments.compare's spec)")
_NUM_TRAIN = flags.DEFINE_integer("num_train", 4880, "training examples (bibtex MULAN)")
_NUM_TEST = flags.DEFINE_integer("num_test", 2515, "test examples (bibtex MULAN)")
_NUM_FEATURES = flags.DEFINE_integer("num_features", 1836, "input features (bibtex)")
_NUM_LABELS = flags.DEFINE_integer("num_labels", 159, "labels (bibtex)")
_REPEATS = flags.DEFINE_integer("repeats", 5, "timed calls per row (median)")
_OUT = flags.DEFINE_string("out", "", "also write the markdown report here")


def _batch(rs, size):
  return common.random_multilabel_batch(rs, size, _NUM_FEATURES.value, _NUM_LABELS.value)


def time_row(spec: str, rs) -> dict:
  name, *overrides = spec.split(":")  # experiments.compare's spec syntax
  config = configuration.get_config(name, "bibtex", overrides)
  _, stage = configuration.stage_configs(config)[-1]
  shapes = common.MultilabelShapes(_NUM_FEATURES.value, _NUM_LABELS.value)
  objective = builders.build_objective(stage, shapes)
  batch = _batch(rs, stage.train.batch_size)
  state = objective.init(jax.random.key(0), batch)
  update = jax.jit(objective.update)
  predict = jax.jit(objective.predict)
  eval_bs = stage.train.eval_batch_size
  test_x = _batch(rs, _NUM_TEST.value)["x"]
  chunks = [test_x[i:i + eval_bs] for i in range(0, len(test_x), eval_bs)]
  seconds = common.median_seconds({
      "update": lambda: update(state, batch, jax.random.key(1))[1]["loss"],
      "inference": lambda: [predict(state, c) for c in chunks],
  }, _REPEATS.value)
  updates_per_epoch = math.ceil(_NUM_TRAIN.value / stage.train.batch_size)
  return dict(spec=spec, method=stage.method, batch=stage.train.batch_size,
              update=seconds["update"], epoch=seconds["update"] * updates_per_epoch,
              inference=seconds["inference"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  rs = np.random.RandomState(0)
  rows = [time_row(spec, rs) for spec in _ROWS.value]
  first = rows[0]
  lines = ["| row | stage method | batch | s / update | train s / epoch | ratio | "
           "inference s (test) | ratio |", "|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['spec']} | {r['method']} | {r['batch']} | {r['update']:.4f} | "
                 f"{r['epoch']:.1f} | {r['epoch'] / first['epoch']:.2f} | "
                 f"{r['inference']:.3f} | {r['inference'] / first['inference']:.2f} |")
  body = (f"Timed on {common.machine_description()}; bibtex shapes ({_NUM_TRAIN.value} "
          f"train / {_NUM_TEST.value} test, {_NUM_FEATURES.value} features, "
          f"{_NUM_LABELS.value} labels), random data, fresh parameters, median of "
          f"{_REPEATS.value}. Ratios are to the first row, same run.\n\n" + "\n".join(lines))
  print(body)
  if _OUT.value:
    common.write_report(_OUT.value, "benchmarks.implicit_timing", body)


if __name__ == "__main__":
  app.run(main)

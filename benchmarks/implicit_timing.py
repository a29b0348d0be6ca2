r"""Training and inference time of SPEN, DVN and implicit training (Shankar & Piratla,
Table 5), and the cost of the implicit step against K, T_inner and the solver.

Each row is a method's last training stage as its config builds it for bibtex
(experiments/configs/<method>.py:bibtex, with the row's overrides):

- train: one jitted `update` (one parameter update of every group it trains) on a batch
  of the config's batch size, compile excluded, median of `--repeats` calls; seconds
  per epoch = that × updates per epoch (⌈train examples / batch⌉). This is one reading
  of the paper's "training time normalized by the number of parameter updates";
- GFLOP: XLA's cost analysis of the compiled `update` (independent of the machine's load).
  It counts a loop body once, so rows with a rolled loop (CG; more than 16 Neumann terms
  or inner steps, `diff.implicit.MAX_UNROLL` per iteration) are lower bounds;
- s / parameter update: the other reading, an implicit update divided by the parameter
  updates it makes (T_inner steps of θ and one of φ; 1 for the other methods);
- inference: `predict` over the whole test split in the config's eval batches (SPEN and
  DVN: GBI to convergence; implicit: one forward pass of the inference network), median
  of `--repeats`;
- ratios are to the first row, measured in the same run: every round times each row's
  `update`, then each row's inference, in turn, and a row's ratio is the median over
  rounds of its time over the first row's time in the same round (so load that other
  jobs put on a shared machine scales both). The header gives the load average before
  and after.

The data are random arrays of bibtex's shapes (1836 binary features, 159 labels, 4880
training and 2515 test examples: MULAN's split), so no data files are needed and cost
does not depend on the values; parameters are the fresh initializations (GBI at test
runs to its iteration cap or tolerance, which for a fresh energy is representative
only roughly; the trained runs' `test/gbi_steps_mean` say how many steps they take).

  python -m benchmarks.implicit_timing --repeats=5 --out=results/implicit/implicit_timing.md
"""

import math
import os
import statistics
import time

from absl import app
from absl import flags
import jax
import numpy as np

from benchmarks import common
from energynets.train import quiet_library_logs
from experiments import builders
from experiments import cli
from experiments import configuration

DEFAULT_ROWS = (
  "spen_ssvm",
  "dvn",
  "implicit",
  "implicit:implicit.primary=ssvm",
  "implicit:implicit.primary=dvn",
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
_ROWS = flags.DEFINE_list(
  "rows", list(DEFAULT_ROWS), "config[:key=value...] per row (experiments.compare's spec)"
)
_NUM_TRAIN = flags.DEFINE_integer("num_train", 4880, "training examples (bibtex MULAN)")
_NUM_TEST = flags.DEFINE_integer("num_test", 2515, "test examples (bibtex MULAN)")
_NUM_FEATURES = flags.DEFINE_integer("num_features", 1836, "input features (bibtex)")
_NUM_LABELS = flags.DEFINE_integer("num_labels", 159, "labels (bibtex)")
_REPEATS = flags.DEFINE_integer("repeats", 5, "timed calls per row (median)")
_OUT = flags.DEFINE_string("out", "", "also write the markdown report here")


def _batch(rs, size):
  return common.random_multilabel_batch(rs, size, _NUM_FEATURES.value, _NUM_LABELS.value)


def build_row(spec: str, rs) -> dict:
  """The compiled `update` and `predict` of one row, with its inputs and FLOP count.

  Args:
    spec: `config[:key=value...]`, experiments.compare's spec.
    rs: the random state the batches are drawn from.

  Returns:
    A dict: `spec`, `method`, `batch`, `gflop`, `param_updates` (per `update`),
    `updates_per_epoch` and `fns` (`update` and `inference`, each a call to time).
  """
  name, *overrides = spec.split(":")  # experiments.compare's spec syntax
  config = configuration.get_config(name, "bibtex", overrides)
  _, stage = configuration.stage_configs(config)[-1]
  shapes = common.MultilabelShapes(_NUM_FEATURES.value, _NUM_LABELS.value)
  objective = builders.build_objective(stage, shapes)
  batch = _batch(rs, stage.train.batch_size)
  state = objective.init(jax.random.key(0), batch)
  rng = jax.random.key(1)
  update = jax.jit(objective.update).lower(state, batch, rng).compile()
  cost = update.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost  # older jax: one per module
  predict = jax.jit(objective.predict)
  eval_bs = stage.train.eval_batch_size
  test_x = _batch(rs, _NUM_TEST.value)["x"]
  chunks = [test_x[i : i + eval_bs] for i in range(0, len(test_x), eval_bs)]
  inner_steps = stage.implicit.inner_steps if stage.method == "implicit" else 0
  return dict(
    spec=spec,
    method=stage.method,
    batch=stage.train.batch_size,
    gflop=(cost or {}).get("flops", float("nan")) / 1e9,
    param_updates=inner_steps + 1,
    updates_per_epoch=math.ceil(_NUM_TRAIN.value / stage.train.batch_size),
    fns={
      "update": lambda: update(state, batch, rng)[1]["loss"],
      "inference": lambda: [predict(state, c) for c in chunks],
    },
  )


def time_rows(rows: list[dict], repeats: int) -> None:
  """Adds each row's median seconds and median per-round ratio to the first row.

  Every round times each row's update in turn, then each row's inference.

  Args:
    rows: `build_row`'s dicts; gains `update`, `inference`, `update_ratio`,
      `inference_ratio`.
    repeats: the rounds.
  """
  for row in rows:
    for fn in row["fns"].values():
      jax.block_until_ready(fn())  # one warm-up call (compiled already)
  for kind in ("update", "inference"):
    seconds: list[list[float]] = [[] for _ in rows]
    for _ in range(repeats):
      for row, times in zip(rows, seconds):
        started = time.perf_counter()
        jax.block_until_ready(row["fns"][kind]())
        times.append(time.perf_counter() - started)
    for row, times in zip(rows, seconds):
      row[kind] = statistics.median(times)
      row[f"{kind}_ratio"] = statistics.median(t / t0 for t, t0 in zip(times, seconds[0]))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  rs = np.random.RandomState(0)
  rows = [build_row(spec, rs) for spec in _ROWS.value]
  load_before = os.getloadavg()
  time_rows(rows, _REPEATS.value)
  load_after = os.getloadavg()
  first = rows[0]
  lines = [
    "| row | stage method | batch | GFLOP / update | s / update | train s / epoch | "
    "ratio | GFLOP ratio | s / parameter update | ratio | inference s (test) | "
    "ratio |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    per_param = r["update"] / r["param_updates"]
    per_param_ratio = r["update_ratio"] / r["param_updates"] * first["param_updates"]
    lines.append(
      f"| {r['spec']} | {r['method']} | {r['batch']} | {r['gflop']:.2f} | "
      f"{r['update']:.4f} | {r['update'] * r['updates_per_epoch']:.1f} | "
      f"{r['update_ratio'] * r['updates_per_epoch'] / first['updates_per_epoch']:.2f} | "
      f"{r['gflop'] / first['gflop']:.2f} | {per_param:.4f} | {per_param_ratio:.2f} | "
      f"{r['inference']:.3f} | {r['inference_ratio']:.2f} |"
    )
  body = (
    f"Timed on {common.machine_description()}; bibtex shapes ({_NUM_TRAIN.value} "
    f"train / {_NUM_TEST.value} test, {_NUM_FEATURES.value} features, "
    f"{_NUM_LABELS.value} labels), random data, fresh parameters, median of "
    f"{_REPEATS.value} rounds (each round times every row in turn), compile excluded; "
    f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after (other jobs "
    f"share the machine when it exceeds the CPU count). Ratios are to the first "
    f"row: medians over rounds of the same round's time ratio. GFLOP: XLA's cost "
    f"analysis of the compiled update, which counts a loop body once (a lower bound "
    f"for CG and for K or T_inner above 16).\n\n" + "\n".join(lines)
  )
  print(body)
  if _OUT.value:
    common.write_report(_OUT.value, "benchmarks.implicit_timing", body)


if __name__ == "__main__":
  cli.run(main)

r"""Test-time speed of a feed-forward task-net against GBI on each dataset (SEAL Table 1).

SEAL's Table 1 ends with the examples per second at test of its feed-forward task-net
and of a SPEN predicting by gradient-based inference (GBI), on each multi-label
dataset (their average ratio: 3.6×). This measures both in one run, on one machine,
on each dataset's whole test split:

- `task-net`: `sigmoid(MLP(x))`, the network SEAL trains (the SPEN local term's MLP,
  sized by `--config`'s `energy` settings for the dataset);
- `GBI`: `gbi_scan` for exactly `--num_steps` steps on the SPENEnergy with that MLP as
  its local term, F(x) computed once, with the test-time GBI options of `--config`'s
  `predict_gbi` (for `spen_gbi`: projected gradient descent with Adam, SEAL's
  "Adam + clamp"). A fixed T makes the cost independent of the weights, so a random
  initialization is timed: the ratio is what any trained model of these shapes pays.

Each function is jitted and compiled first; a timing is the median of `--repeats`
calls (benchmarks.common.median_seconds, the functions called in turn).

  python -m benchmarks.feedforward_vs_gbi --data_dir=DATA \
      --out=results/seal/feedforward_vs_gbi.md
"""

import os

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from energynets.train import quiet_library_logs
from experiments import builders
from experiments import cli
from experiments import configuration
from experiments.choices import gbi as gbi_choices

_DATASETS = flags.DEFINE_list(
  "datasets",
  ["bibtex", "delicious", "genbase", "cal500", "expr_fun", "spo_fun"],
  "registered multi-label datasets (SEAL Table 1's columns)",
)
_DATA_DIR = flags.DEFINE_string("data_dir", "", "data directory (else $ENERGYNETS_DATA_DIR)")
_CONFIG = flags.DEFINE_string(
  "config", "spen_gbi", "experiments/configs module giving energy and predict_gbi"
)
_NUM_STEPS = flags.DEFINE_integer("num_steps", 20, "GBI steps T")
_REPEATS = flags.DEFINE_integer("repeats", 5, "timed calls per function (median)")
_OUT = flags.DEFINE_string("out", "", "also write the markdown report here")


def measure(dataset_name: str) -> dict:
  """Examples/s of the task-net and of T-step GBI on `dataset_name`'s test split."""
  config = configuration.get_config(_CONFIG.value, dataset_name)
  if _DATA_DIR.value:
    config.data.data_dir = _DATA_DIR.value
  dataset = builders.load_data(config)
  x = jnp.asarray(dataset.test.x, jnp.float32)
  energy = builders.spen_energy(config, dataset)
  params = protocol.as_energy(energy).init(jax.random.PRNGKey(0), x[:1], None)
  options = {
    k: config.predict_gbi[k]
    for k in ("method", "optimizer", "learning_rate", "momentum", "entropy_weight")
  }
  gbi_config = gbi_choices.gbi_config(dict(options, num_steps=_NUM_STEPS.value))
  init = config.loss.init
  energy_fn = protocol.as_energy(energy).energy

  @jax.jit
  def task_net(p, x):
    return jax.nn.sigmoid(energy.apply({"params": p}, x, method=SPENEnergy.local_logits))

  @jax.jit
  def gbi(p, x):
    encoding = protocol.as_energy(energy).encode(p, x)
    y_t, _ = gbi_lib.gbi_scan(
      energy_fn,
      p,
      encoding,
      protocol.as_energy(energy).start(encoding, None, init),
      protocol.BOX,
      gbi_config,
    )
    return y_t

  seconds = common.median_seconds(
    {"task_net": lambda: task_net(params, x), "gbi": lambda: gbi(params, x)}, _REPEATS.value
  )
  n = len(dataset.test.x)
  return {
    "dataset": dataset.name,
    "examples": n,
    "labels": dataset.num_labels,
    "features": dataset.num_features,
    "gbi": f"{options}, start {init!r}",
    "task_net_per_s": n / seconds["task_net"],
    "gbi_per_s": n / seconds["gbi"],
    "ratio": seconds["gbi"] / seconds["task_net"],
  }


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  load_before = os.getloadavg()
  rows = [measure(name) for name in _DATASETS.value]
  load_after = os.getloadavg()
  lines = [
    "| dataset | test examples | labels | task-net examples/s | "
    f"GBI (T={_NUM_STEPS.value}) examples/s | GBI time / task-net time |",
    "|---|---|---|---|---|---|",
  ]
  for r in rows:
    lines.append(
      f"| {r['dataset']} | {r['examples']} | {r['labels']} | "
      f"{r['task_net_per_s']:.0f} | {r['gbi_per_s']:.0f} | {r['ratio']:.2f}× |"
    )
  mean_ratio = float(np.mean([r["ratio"] for r in rows]))
  lines.append(f"| mean | | | | | {mean_ratio:.2f}× |")
  table = "\n".join(lines)
  header = (
    f"Config {_CONFIG.value} (energy sizes and GBI options per dataset; GBI "
    f"{rows[0]['gbi']}); "
    f"random initialization (fixed T: the cost does not depend on the weights). "
    f"{common.machine_description()}; median of "
    f"{_REPEATS.value} calls, compile excluded; load average {load_before[0]:.1f} "
    f"before, {load_after[0]:.1f} after. SEAL Table 1 reports an average ratio of "
    f"3.6× (their GPU, their GBI step count).\n"
  )
  print(header)
  print(table)
  if _OUT.value:
    common.write_report(_OUT.value, "benchmarks.feedforward_vs_gbi", header + "\n" + table)


if __name__ == "__main__":
  cli.run(main)

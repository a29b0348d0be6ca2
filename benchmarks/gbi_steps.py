r"""Speed/accuracy of SPEN prediction: test example-F1 and time against the GBI steps T.

SPEN §7.4 trades GBI iterations for accuracy (Figures 3-4: stopping early costs little
F1). For a trained SPEN run of experiments.main / experiments.compare (its last stage's
selected parameters), this predicts the validation and test splits with

- the feed-forward prediction `sigmoid(local_logits)` (T = 0: the SPEN's local term,
  which is GBI's start point when the config starts from `local`);
- `gbi_scan` for each T in `--steps`, with the run's test-time GBI options
  (`predict_gbi`: update rule, optimizer, step size, momentum, entropy) from its start;
- `gbi_while` to per-example convergence, as the run's own test-time prediction,

and reports for each: test example-F1 at the threshold tuned on validation and at 0.5
(`energynets.metrics.evaluate_multilabel`, the results contract), and the median time to
predict the test split in one batch (compiled, `--repeats` calls). Writes a markdown
table (`--out`) and, next to it, the rows as an experiments.compare-format JSON that
`python -m benchmarks.reproduction` plots.

  python -m experiments.compare --workdir=/tmp/energynets_demo
  python -m benchmarks.gbi_steps --run_dir=/tmp/energynets_demo/synthetic/spen_ssvm \
      --out=results/spen/gbi_steps_synthetic.md
"""

import functools
import json
import os

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from benchmarks import common
from energynets import metrics
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from energynets.objectives import ssvm as ssvm_lib
from energynets.train import quiet_library_logs
from experiments import cli
from experiments import workdirs
from experiments.choices import gbi as gbi_choices

_RUN_DIR = flags.DEFINE_string("run_dir", None, "a trained SPEN run of experiments.main")
_DATA_DIR = flags.DEFINE_string(
  "data_dir", "", "data directory (else the run's / $ENERGYNETS_DATA_DIR)"
)
_STEPS = flags.DEFINE_list(
  "steps", ["1", "2", "3", "5", "10", "20", "50", "100"], "the T of the fixed-step rows"
)
_REPEATS = flags.DEFINE_integer("repeats", 5, "timed calls per predictor (median)")
_OUT = flags.DEFINE_string("out", "", "also write the markdown table here (and .json)")
flags.mark_flags_as_required(["run_dir"])


def _row(
  dataset: str,
  label: str,
  kind: str,
  steps: float,
  seconds: float,
  results: dict[str, float],
  source: str,
) -> dict:
  """One predictor as an experiments.compare results row (one run)."""
  run = {
    **results,
    "gbi_steps": float(steps),
    "seconds": float(seconds),
    "meta": {"kind": kind, "parameters": source, "code_revision": workdirs.code_revision()},
  }
  return {"dataset": dataset, "method": label, "runs": [run]}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  _, dataset, energy, params, source, last = common.restore_spen_run(
    _RUN_DIR.value, _DATA_DIR.value
  )
  predict = dict(last.predict_gbi.to_dict())
  init = last.loss.init
  energy_fn = protocol.as_energy(energy).energy
  steps = sorted({int(t) for t in _STEPS.value})
  if not steps or steps[0] < 1:
    raise app.UsageError(f"--steps must be positive integers, got {_STEPS.value}")

  @jax.jit
  def feed_forward(p, x):
    return jax.nn.sigmoid(energy.apply({"params": p}, x, method=SPENEnergy.local_logits))

  @functools.partial(jax.jit, static_argnums=2)
  def scan(p, x, num_steps):
    encoding = protocol.as_energy(energy).encode(p, x)
    options = {
      k: predict[k] for k in ("method", "optimizer", "learning_rate", "momentum", "entropy_weight")
    }
    y_t, _ = gbi_lib.gbi_scan(
      energy_fn,
      p,
      encoding,
      protocol.as_energy(energy).start(encoding, None, init),
      protocol.BOX,
      gbi_choices.gbi_config(dict(options, num_steps=num_steps)),
    )
    return y_t

  @jax.jit
  def converged(p, x):
    result = ssvm_lib.infer(energy, p, x, gbi_choices.gbi_config(predict), init=init)
    return result.y, result.steps

  x_val = jnp.asarray(dataset.validation.x, jnp.float32)
  x_test = jnp.asarray(dataset.test.x, jnp.float32)
  predictors = {
    "feed-forward": lambda x: feed_forward(params, x),
    **{f"GBI, T={t}": functools.partial(scan, params, num_steps=t) for t in steps},
    "GBI to convergence": lambda x: converged(params, x)[0],
  }
  load_before = os.getloadavg()
  seconds = common.median_seconds(
    {k: functools.partial(fn, x_test) for k, fn in predictors.items()}, _REPEATS.value
  )
  load_after = os.getloadavg()
  test_steps = float(jnp.mean(converged(params, x_test)[1]))

  rows = []
  for label, fn in predictors.items():
    results = metrics.evaluate_multilabel(
      val=(dataset.validation.y, fn(x_val)), test=(dataset.test.y, fn(x_test))
    )
    if label == "feed-forward":
      kind, t = "feed_forward", 0.0
    elif label == "GBI to convergence":
      kind, t = "gbi_while", test_steps
    else:
      kind, t = "gbi_scan", float(label.split("=")[1])
    rows.append(_row(dataset.name, label, kind, t, seconds[label], results, source))

  ff = seconds["feed-forward"]
  lines = [
    "| predictor | GBI steps | ms | × feed-forward | ex-F1 (tuned) | ex-F1 @0.5 | threshold |",
    "|---|---|---|---|---|---|---|",
  ]
  for row in rows:
    run = row["runs"][0]
    steps_cell = (
      f"mean {run['gbi_steps']:.1f}"
      if run["meta"]["kind"] == "gbi_while"
      else f"{run['gbi_steps']:.0f}"
    )
    lines.append(
      f"| {row['method']} | {steps_cell} | {1e3 * run['seconds']:.2f} | "
      f"{run['seconds'] / ff:.2f}× | {100 * run['test/example_f1']:.2f} | "
      f"{100 * run['test/example_f1@0.5']:.2f} | {run['threshold']:.2f} |"
    )
  options = ", ".join(f"{k} {v}" for k, v in sorted(predict.items()))
  header = (
    f"Dataset {dataset.name}: {len(dataset.test.x)} test examples, {dataset.num_labels} "
    f"labels; parameters: {source}. GBI starts from {init!r} with the run's test-time "
    f"options ({options}); the fixed-T rows use its update rule for exactly T steps. "
    f"Thresholds are tuned on validation per row (grid 0.05..0.95); rates in percent.\n"
    f"Timing: {common.machine_description()}; the whole test split in one batch, median "
    f"of {_REPEATS.value} calls, compile excluded; load average {load_before[0]:.1f} "
    f"before, {load_after[0]:.1f} after (other jobs share the machine when it exceeds "
    f"the CPU count).\n"
  )
  table = "\n".join(lines)
  print(header)
  print(table)
  if _OUT.value:
    common.write_report(_OUT.value, "benchmarks.gbi_steps", header + "\n" + table)
    with open(os.path.splitext(_OUT.value)[0] + ".json", "w") as f:
      json.dump(rows, f, indent=1)


if __name__ == "__main__":
  cli.run(main)

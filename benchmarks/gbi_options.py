r"""Tune a trained SPEN's test-time GBI on validation: example-F1 over a grid of options.

Test-time inference is part of the model a SPEN run selects, and its options (step
size, momentum, entropy, entropy annealing) can be chosen without retraining. For the
run at `--run_dir` (its last stage's selected parameters), this predicts the validation
split with `ssvm.infer` under the run's own `predict_gbi` updated by every combination
of `--grid` values, and reports validation example-F1 at the tuned threshold and at 0.5,
and the mean GBI steps. Only validation is evaluated: choose on this table, then put the
choice in the config and retrain or re-evaluate.

  python -m benchmarks.gbi_options --run_dir=/tmp/syn1500/synthetic/spen_ssvm \
      --grid=entropy_anneal_init=1,3,10 --grid=entropy_anneal_steps=100,300 \
      --grid=learning_rate=0.02,0.1 --grid=momentum=0.9,0.95 --set=max_steps=400
"""

import itertools

from absl import app
from absl import flags
import jax.numpy as jnp
import numpy as np

from benchmarks import common
from energynets import metrics
from energynets.inference import GBIConfig
from energynets.objectives import ssvm as ssvm_lib
from energynets.train import quiet_library_logs
from experiments import cli
from experiments.choices import gbi as gbi_choices

_RUN_DIR = flags.DEFINE_string("run_dir", None, "a trained SPEN run of experiments.main")
_DATA_DIR = flags.DEFINE_string(
  "data_dir", "", "data directory (else the run's / $ENERGYNETS_DATA_DIR)"
)
_GRID = flags.DEFINE_multi_string(
  "grid",
  [],
  "KEY=V1,V2,...: values of one GBIConfig option; every combination of the flags is evaluated",
)
_SET = flags.DEFINE_multi_string(
  "set", [], "KEY=VALUE: a GBIConfig option fixed for every grid row (not for the run's own row)"
)
_OUT = flags.DEFINE_string("out", "", "also write the markdown table here")
flags.mark_flags_as_required(["run_dir"])


def _value(key: str, text: str):
  """A GBI option's value from text (a config's GBI block key), typed like its default."""
  if key not in gbi_choices.KEYS or key == "step_sizes":
    raise app.UsageError(
      f"{key!r} is not a GBI option; expected one of "
      f"{[k for k in gbi_choices.KEYS if k != 'step_sizes']}"
    )
  # The names (method, optimizer, pick) are text; the numbers are typed like their default.
  defaults = dict(GBIConfig._field_defaults)  # pylint: disable=protected-access
  defaults.update(gbi_choices.DIRECTION_OPTIONS)
  default = defaults.get(key, "")
  if isinstance(default, str):
    return text
  if isinstance(default, bool):
    if text.lower() not in ("0", "1", "false", "true"):
      raise app.UsageError(f"{key} takes true or false, got {text!r}")
    return text.lower() in ("1", "true")
  kind = int if isinstance(default, int) else float
  try:
    return kind(text)
  except ValueError:
    raise app.UsageError(f"{key} takes {kind.__name__} values, got {text!r}") from None


def parse_options(specs: list[str], multi: bool) -> dict:
  """`['k=v1,v2', ...]` -> `{k: [v1, v2]}` (`multi`) or `['k=v']` -> `{k: v}`."""
  options = {}
  for spec in specs:
    key, sep, values = spec.partition("=")
    if not sep or not values:
      raise app.UsageError(f"expected KEY=VALUE{',...' if multi else ''}, got {spec!r}")
    parsed = [_value(key, v) for v in values.split(",")]
    if not multi and len(parsed) > 1:
      raise app.UsageError(f"--set takes one value: {spec!r}")
    options[key] = parsed if multi else parsed[0]
  return options


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  grid = parse_options(_GRID.value, multi=True)
  fixed = parse_options(_SET.value, multi=False)
  _, dataset, energy, params, source, last = common.restore_spen_run(
    _RUN_DIR.value, _DATA_DIR.value
  )
  own = dict(last.predict_gbi.to_dict())
  x = jnp.asarray(dataset.validation.x, jnp.float32)
  gold = np.asarray(dataset.validation.y)

  def evaluate(options: dict) -> tuple[float, float, float]:
    result = ssvm_lib.infer(energy, params, x, gbi_choices.gbi_config(options), init=last.loss.init)
    y = np.asarray(result.y)
    threshold = metrics.tune_threshold(gold, y)
    return (
      100 * metrics.example_f1(gold, metrics.binarize(y, threshold)),
      100 * metrics.example_f1(gold, metrics.binarize(y)),
      float(np.mean(np.asarray(result.steps))),
    )

  keys = sorted(grid)
  width = max(len(keys), 1)
  lines = [
    "| " + " | ".join(keys or ["options"]) + " | val ex-F1 (tuned) | val ex-F1 @0.5 "
    "| mean GBI steps |",
    "|" + "---|" * (width + 3),
  ]
  rows = [(["the run's predict_gbi"] + [""] * (width - 1), own)]
  for values in itertools.product(*(grid[k] for k in keys)):
    rows.append(
      ([str(v) for v in values] or ["--set options"], {**own, **fixed, **dict(zip(keys, values))})
    )
  for cells, options in rows:
    tuned, at_half, steps = evaluate(options)
    lines.append(f"| {' | '.join(cells)} | {tuned:.2f} | {at_half:.2f} | {steps:.1f} |")
    print(lines[-1], flush=True)
  own_text = ", ".join(f"{k} {v}" for k, v in sorted(own.items()))
  header = (
    f"Run {_RUN_DIR.value} (parameters: {source}), {dataset.name}: validation "
    f"split, {len(gold)} examples; GBI starts from {last.loss.init!r}. The run's "
    f"own test-time options: {own_text}; grid rows change them by "
    f"{', '.join(f'{k}={v}' for k, v in sorted(fixed.items())) or 'nothing else'} "
    f"and the row's values. Tuned threshold: the validation-best of 0.05..0.95.\n"
  )
  if _OUT.value:
    common.write_report(_OUT.value, "benchmarks.gbi_options", header + "\n" + "\n".join(lines))


if __name__ == "__main__":
  cli.run(main)

r"""Speed of SPEN prediction: gradient-based inference against the feed-forward MLP.

SPEN §7.4 compares the time to classify the 2515 Bibtex test examples with the MLP
and with SPEN's gradient-based inference (GBI). This measures, in one run, on one
machine and on one batch (the test split, all of it by default):

- the feed-forward prediction `sigmoid(SPENEnergy.local_logits(x))`: the MLP baseline,
  the same network as the SPEN local term;
- `encode` alone, F(x) and the local logits: the part every GBI row shares;
- GBI by `gbi_scan` for a fixed `T = --num_steps`, with projected gradient descent in
  y-space, entropic mirror descent and descent in logit space (momentum and step size
  of the config's test-time `predict_gbi`), F(x) computed once by `encode` and only
  `energy_from_encoding` inside the loop (what `energynets.objectives.ssvm` does);
- the same T steps by a `fori_loop` over `gbi.gbi_step` that keeps no trace (its y_T
  is checked to be bitwise equal to `gbi_scan`'s): how much of `gbi_scan`'s time is
  its per-iterate trace, which prediction does not use;
- (`--naive`) mirror descent with the full `SPENEnergy.__call__` as the energy, i.e.
  F(x) written inside the loop body: what precomputing F(x) saves (under jit, XLA's
  loop-invariant code motion hoists the feature network out of the loop, so on CPU
  this row matches the encode-once one; precomputing still matters outside jit);
- test-time prediction as `ssvm` runs it: `gbi_while` to per-example convergence
  (`predict_gbi`: at most `--max_steps` steps, its tolerances), with the mean and
  largest number of steps, and `ssvm.search_statistics` on the same batch.

Each function is jitted and compiled before timing (compile time excluded); a timing is
one call up to `block_until_ready`, the functions are called in turn `--repeats`
times and the median is reported. Parameters are a random initialization of the
config's SPENEnergy unless `--workdir` names a trained run of experiments.main (the
selected state of its last stage is loaded): timings per step do not depend on the
weights, but the number of steps to convergence and the search error do.

  python -m benchmarks.gbi --dataset=bibtex --data_dir=DATA --repeats=5 \
      --out=results/spen/gbi_bibtex.md
"""

import functools
import os

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from benchmarks import common
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from energynets.objectives import ssvm as ssvm_lib
from energynets.train import quiet_library_logs
from experiments import builders
from experiments import cli
from experiments import configuration
from experiments.choices import gbi as gbi_choices

_DATASET = flags.DEFINE_string("dataset", "bibtex", "registered multi-label dataset")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "data directory (else $ENERGYNETS_DATA_DIR)")
_CONFIG = flags.DEFINE_string(
  "config", "spen_ssvm", "experiments/configs module of the SPEN config"
)
_SET = flags.DEFINE_multi_string("set", [], "config override, e.g. predict_gbi.rel_tol=1e-3")
_WORKDIR = flags.DEFINE_string(
  "workdir",
  "",
  "workdir of a trained experiments.main SPEN run; its last stage's "
  "selected parameters are used (else a random initialization)",
)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 0, "first N test examples (0: all)")
_REPEATS = flags.DEFINE_integer("repeats", 10, "timed calls per function (median)")
_NUM_STEPS = flags.DEFINE_integer("num_steps", 20, "T of the fixed-step gbi_scan rows")
_MAX_STEPS = flags.DEFINE_integer("max_steps", 100, "max_steps of the gbi_while row")
_INIT = flags.DEFINE_string("init", "", "GBI start, uniform or local (default: config)")
_NAIVE = flags.DEFINE_bool("naive", True, "also time GBI with F(x) recomputed every step")
_SEED = flags.DEFINE_integer("seed", 0, "seed of the random parameter initialization")
_OUT = flags.DEFINE_string("out", "", "also write the markdown report here")

METHODS = ("projected", "mirror", "logit")


def _run_config(workdir: str) -> ml_collections.ConfigDict:
  """The trained run's config (results.json), else the SPEN config with --set applied."""
  if workdir and os.path.exists(os.path.join(workdir, "results.json")):
    config = common.finished_run_config(workdir)
    configuration.apply_overrides(config, _SET.value)
    return config
  return configuration.get_config(_CONFIG.value, _DATASET.value, _SET.value)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  config = _run_config(_WORKDIR.value)
  if _DATA_DIR.value:
    config.data.data_dir = _DATA_DIR.value
  dataset = builders.load_data(config)
  n = _BATCH_SIZE.value or len(dataset.test.x)
  x = jnp.asarray(dataset.test.x[:n], jnp.float32)
  y = jnp.asarray(dataset.test.y[:n], jnp.float32)
  energy = builders.spen_energy(config, dataset)
  if _WORKDIR.value:
    params, source = common.restore_spen_params(config, dataset, _WORKDIR.value)
  else:
    params = protocol.as_energy(energy).init(jax.random.PRNGKey(_SEED.value), x[:1], None)
    source = (
      f"random initialization (seed {_SEED.value}): step counts and search error "
      "are not those of a trained energy"
    )
  init = _INIT.value or config.loss.init
  energy_fn = protocol.as_energy(energy).energy
  box = protocol.BOX
  predict = dict(config.predict_gbi.to_dict())
  predict["max_steps"] = _MAX_STEPS.value
  while_config = gbi_choices.gbi_config(predict)
  step_options = {
    k: predict[k] for k in ("optimizer", "learning_rate", "momentum", "entropy_weight")
  }
  num_steps = _NUM_STEPS.value

  def scan_config(method):
    return gbi_choices.gbi_config(dict(step_options, method=method, num_steps=num_steps))

  @jax.jit
  def feed_forward(p, x):
    return jax.nn.sigmoid(energy.apply({"params": p}, x, method=SPENEnergy.local_logits))

  @jax.jit
  def encode_only(p, x):
    return protocol.as_energy(energy).encode(p, x)

  @functools.partial(jax.jit, static_argnums=2)
  def scan(p, x, method):
    encoding = protocol.as_energy(energy).encode(p, x)
    y_t, _ = gbi_lib.gbi_scan(
      energy_fn,
      p,
      encoding,
      protocol.as_energy(energy).start(encoding, None, init),
      box,
      scan_config(method),
    )
    return y_t

  @functools.partial(jax.jit, static_argnums=2)
  def fori(p, x, method):
    cfg = scan_config(method)
    encoding = protocol.as_energy(energy).encode(p, x)
    state = gbi_lib.init_state(
      energy_fn, p, encoding, protocol.as_energy(energy).start(encoding, None, init), box, cfg
    )
    state = jax.lax.fori_loop(
      0,
      num_steps,
      lambda _, s: gbi_lib.gbi_step(energy_fn, p, encoding, s, cfg.learning_rate, box, cfg),
      state,
    )
    return box.from_logits(state.z) if method == "logit" else state.z

  @jax.jit
  def naive(p, x):
    full = lambda p_, x_, y_: energy.apply({"params": p_}, x_, y_)
    y0 = box.uniform_init((x.shape[0], energy.num_labels), x.dtype)
    if init == "local":
      y0 = feed_forward(p, x)
    y_t, _ = gbi_lib.gbi_scan(full, p, x, y0, box, scan_config("mirror"))
    return y_t

  @jax.jit
  def converged(p, x):
    result = ssvm_lib.infer(energy, p, x, while_config, init=init)
    return result.y, result.steps

  fns = {"feed_forward": lambda: feed_forward(params, x), "encode": lambda: encode_only(params, x)}
  for m in METHODS:
    fns[f"scan_{m}"] = functools.partial(scan, params, x, m)
    fns[f"fori_{m}"] = functools.partial(fori, params, x, m)
  if _NAIVE.value:
    fns["naive_mirror"] = lambda: naive(params, x)
  fns["while"] = lambda: converged(params, x)

  identical = {m: bool(jnp.array_equal(scan(params, x, m), fori(params, x, m))) for m in METHODS}
  if _NAIVE.value:
    naive_gap = float(jnp.max(jnp.abs(naive(params, x) - scan(params, x, "mirror"))))
  _, steps = converged(params, x)
  steps = np.asarray(steps)
  stats = {
    k: float(v)
    for k, v in jax.jit(
      functools.partial(ssvm_lib.search_statistics, energy, config=while_config, init=init)
    )(params, x, y).items()
  }
  load_before = os.getloadavg()
  seconds = common.median_seconds(fns, _REPEATS.value)
  load_after = os.getloadavg()

  ff = seconds["feed_forward"]
  enc = seconds["encode"]

  def row(label, key, steps_cell="", per_step=None):
    ms = 1e3 * seconds[key]
    per = "" if per_step is None else f"{1e3 * (seconds[key] - enc) / per_step:.2f}"
    return f"| {label} | {steps_cell} | {ms:.1f} | {seconds[key] / ff:.2f}× | {per} |"

  names = {
    "projected": "projected GD (y-space)",
    "mirror": "entropic mirror descent",
    "logit": "logit-space descent",
  }
  lines = [
    "| prediction | GBI steps | ms | × feed-forward | ms per GBI step |",
    "|---|---|---|---|---|",
    row("feed-forward MLP: sigmoid(local_logits)", "feed_forward"),
    row("encode only: F(x) and local logits (shared by GBI)", "encode"),
  ]
  for m in METHODS:
    lines.append(row(f"gbi_scan, {names[m]}", f"scan_{m}", str(num_steps), num_steps))
  for m in METHODS:
    lines.append(
      row(f"fori_loop of gbi_step (no trace), {names[m]}", f"fori_{m}", str(num_steps), num_steps)
    )
  if _NAIVE.value:
    lines.append(
      row(
        "gbi_scan, mirror, F(x) recomputed every step (naive)",
        "naive_mirror",
        str(num_steps),
        num_steps,
      )
    )
  while_method = gbi_choices.gbi_block(while_config)["method"]
  lines.append(
    row(
      f"gbi_while (predict_gbi, {while_method}), to convergence",
      "while",
      f"mean {steps.mean():.1f}, max {steps.max()}",
      int(steps.max()),
    )
  )
  table = "\n".join(lines)

  target = 2.0
  verdict = ", ".join(f"{m} {seconds[f'scan_{m}'] / ff:.2f}×" for m in METHODS)
  notes = [
    f"Target (GBI ≤ {target:g}× feed-forward at T={num_steps}), gbi_scan: {verdict}; "
    f"without the trace: "
    + ", ".join(f"{m} {seconds[f'fori_{m}'] / ff:.2f}×" for m in METHODS)
    + ".",
    "fori_loop y_T bitwise equal to gbi_scan's y_T: "
    + ", ".join(f"{m} {v}" for m, v in identical.items())
    + ".",
  ]
  if _NAIVE.value:
    notes.append(
      f"naive (F(x) inside the loop) vs encode-once mirror y_T: max |Δ| {naive_gap:.2g}."
    )
  notes.append(
    f"gbi_while steps per example: mean {steps.mean():.2f}, median {np.median(steps):.0f}, "
    f"max {steps.max()}; converged {100 * stats['gbi_converged_fraction']:.1f}%; "
    f"search error (E(x, ŷ) > E(x, y), relaxed ŷ) {100 * stats['search_error']:.1f}%, "
    f"rounded at 0.5 {100 * stats['search_error_rounded']:.1f}%; mean E(ŷ) − E(y) "
    f"{stats['energy_gap_mean']:.3g}."
  )
  notes.append(
    "'ms per GBI step' = (row − encode) / steps (for gbi_while: / its loop "
    "iterations, the max steps)."
  )
  report = "\n".join([table, ""] + [f"- {n}" for n in notes])

  header = (
    f"Dataset {dataset.name}, test split, batch {n} × {dataset.num_features} features, "
    f"{dataset.num_labels} labels; energy {energy.feature_hidden} features, "
    f"{energy.num_measurements} measurements ({config.energy.activation}); parameters: {source}.\n"
    f"GBI: start {init!r}, optimizer {step_options['optimizer']}, η "
    f"{step_options['learning_rate']}, μ {step_options['momentum']}, τ "
    f"{step_options['entropy_weight']}; gbi_while: max_steps {while_config.max_steps}, "
    f"rel_tol {while_config.rel_tol}, abs_tol {while_config.abs_tol}, stop_fraction "
    f"{while_config.stop_fraction}.\n"
    f"Timing: {common.machine_description()}; median of {_REPEATS.value} calls "
    f"each, compile excluded; load average {load_before[0]:.1f} before, "
    f"{load_after[0]:.1f} after (other jobs share the machine when it exceeds the CPU "
    f"count).\n"
  )
  print(header)
  print(report)
  if _OUT.value:
    common.write_report(_OUT.value, "benchmarks.gbi", header + "\n" + report)


if __name__ == "__main__":
  cli.run(main)

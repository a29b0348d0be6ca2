r"""Cost of the gradient through T unrolled GBI steps: scan vs remat vs adjoint.

End-to-end SPEN training (energynets/objectives/e2e.py) differentiates a loss on every
iterate of T GBI steps. `energynets.inference.unrolled` offers three strategies (reverse
mode through `lax.scan`, the same with `jax.checkpoint` per step, and an explicit
adjoint built from Hessian- and cross-Hessian-vector products). This measures, in one
run, for T = `--num_steps` (default 5, 20, 50, 100), the gradient of the e2e training
loss (`e2e_losses(...).loss_fn`: encode x, start at σ(local logits), T steps, weighted
BCE on every iterate, l2) w.r.t. the energy parameters and the learned step sizes:

- time: one jitted gradient call up to `block_until_ready`, compile excluded, median of
  `--repeats` calls (the strategies called in turn, so they share the machine's load);
- memory: XLA's own accounting of the compiled gradient program
  (`jax.jit(...).lower(...).compile().memory_analysis()`): `temp` is the scratch the
  program allocates (peak of its buffer assignment: the saved residuals live here),
  `args` its inputs (parameters and batch, the same for every strategy);
- agreement: the largest difference of each strategy's gradient from scan's, relative
  to the largest entry of scan's gradient.

Ratios are to 'scan' at the same T, measured in the same run. The energy is the
`SPENEnergy` of experiments/configs/e2e.py:bibtex (feature network, 15 softplus
measurements) and GBI its config's (logit-space descent, learned step sizes); the data
are random arrays of bibtex's shapes (1836 binary features, 159 labels, batch 32), so
no data files are needed: cost does not depend on the values.

  python -m benchmarks.e2e_gradients --repeats=5 --out=results/e2e/e2e_gradients.md
"""

import os

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common
from energynets.energies import SPENEnergy
from energynets.objectives import e2e
from energynets.train import quiet_library_logs
from experiments import cli
from experiments.choices import gbi as gbi_choices
from experiments.choices import networks as network_choices
from experiments.choices import objectives as objective_choices
from experiments.configs import e2e as e2e_config

_NUM_STEPS = flags.DEFINE_list("num_steps", ["5", "20", "50", "100"], "values of T")
_STRATEGIES = flags.DEFINE_list(
  "strategies", ["scan", "remat", "adjoint"], "gradient strategies; 'scan' is the reference"
)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 32, "examples per gradient")
_NUM_FEATURES = flags.DEFINE_integer("num_features", 1836, "input features (bibtex: 1836)")
_NUM_LABELS = flags.DEFINE_integer("num_labels", 159, "labels (bibtex: 159)")
_FEATURE_HIDDEN = flags.DEFINE_list(
  "feature_hidden", None, "feature network widths (default: the e2e config's)"
)
_METHOD = flags.DEFINE_string("method", "", "GBI method (default: the e2e config's)")
_OPTIMIZER = flags.DEFINE_string("optimizer", "", "GBI optimizer (default: the config's)")
_REPEATS = flags.DEFINE_integer("repeats", 5, "timed calls per strategy and T (median)")
_SEED = flags.DEFINE_integer("seed", 0, "seed of the parameters and the random batch")
_OUT = flags.DEFINE_string("out", "", "also write the markdown report here")

MIB = 2.0**20


def _energy_and_gbi():
  config = e2e_config.get_config("bibtex")
  e = config.energy
  hidden = (
    tuple(int(h) for h in _FEATURE_HIDDEN.value)
    if _FEATURE_HIDDEN.value is not None
    else tuple(e.feature_hidden)
  )
  energy = SPENEnergy(
    num_labels=_NUM_LABELS.value,
    feature_hidden=hidden,
    feature_activation=network_choices.activation(e.feature_activation),
    num_measurements=e.num_measurements,
    activation=network_choices.activation(e.activation),
    num_conditional=e.num_conditional,
    dropout=e.dropout,
    input_dropout=e.input_dropout,
  )
  gbi = dict(config.gbi.to_dict())
  if _METHOD.value:
    gbi["method"] = _METHOD.value
  if _OPTIMIZER.value:
    gbi["optimizer"] = _OPTIMIZER.value
  return energy, gbi_choices.gbi_config(gbi), config


def _memory(compiled) -> tuple[float, float]:
  """(temp, argument) bytes of a compiled program, from XLA's buffer assignment."""
  stats = compiled.memory_analysis()
  if stats is None:
    return float("nan"), float("nan")
  return float(stats.temp_size_in_bytes), float(stats.argument_size_in_bytes)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  strategies = list(_STRATEGIES.value)
  if strategies[0] != "scan":
    raise app.UsageError("--strategies must start with 'scan', the reference")
  energy, gbi_base, config = _energy_and_gbi()
  rs = np.random.RandomState(_SEED.value)
  batch = {
    "x": jnp.asarray(rs.uniform(size=(_BATCH_SIZE.value, _NUM_FEATURES.value)) < 0.05, jnp.float32),
    "y": jnp.asarray(rs.uniform(size=(_BATCH_SIZE.value, _NUM_LABELS.value)) < 0.02, jnp.float32),
  }
  rng = jax.random.PRNGKey(_SEED.value + 1)
  e = config.e2e
  rows, notes = [], []
  load_before = os.getloadavg()
  for num_steps in (int(t) for t in _NUM_STEPS.value):
    gbi = gbi_base._replace(num_steps=num_steps)
    calls, memory, grads = {}, {}, {}
    for strategy in strategies:
      options = objective_choices.e2e_options(
        dict(e.to_dict(), gradient=strategy, learn_step_sizes=True), gbi=gbi, l2=config.loss.l2
      )
      fns = e2e.e2e_losses(energy, options=options)
      params = (
        fns.model.init_params(jax.random.PRNGKey(_SEED.value), batch["x"], batch["y"]),
        {"step_sizes": fns.initial_step_sizes},
      )
      grad_fn = jax.grad(lambda p, b, r, f=fns: f.loss_fn(p, b, r)[0])
      compiled = jax.jit(grad_fn).lower(params, batch, rng).compile()
      memory[strategy] = _memory(compiled)
      calls[strategy] = lambda c=compiled, p=params: c(p, batch, rng)
      grads[strategy] = calls[strategy]()
    seconds = common.median_seconds(calls, _REPEATS.value)
    ref = grads["scan"]
    scale = max(float(jnp.max(jnp.abs(a))) for a in jax.tree.leaves(ref))
    for strategy in strategies:
      diff = max(
        float(jnp.max(jnp.abs(a - b)))
        for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(grads[strategy]))
      )
      temp, args = memory[strategy]
      rows.append(
        f"| {num_steps} | {strategy} | {1e3 * seconds[strategy]:.2f} | "
        f"{seconds[strategy] / seconds['scan']:.2f}× | {temp / MIB:.3f} | "
        f"{temp / memory['scan'][0]:.2f}× | {args / MIB:.2f} | {diff / scale:.1e} |"
      )
  load_after = os.getloadavg()

  table = "\n".join(
    [
      "| T | gradient | ms | time × scan | temp MiB | temp × scan | args MiB | grad difference |",
      "|---|---|---|---|---|---|---|---|",
    ]
    + rows
  )
  hidden = energy.feature_hidden
  notes.append(
    "temp: XLA's scratch allocation of the compiled gradient program "
    "(`memory_analysis().temp_size_in_bytes`), which holds everything the "
    "backward pass saves; args: its inputs (the same for every strategy)."
  )
  notes.append(
    "grad difference: max over all gradient entries of |g − g_scan|, divided "
    "by max |g_scan| (float32; the strategies compute the same derivative in a "
    "different order)."
  )
  notes.append("Ratios are to 'scan' at the same T, from the same run.")
  names = gbi_choices.gbi_block(gbi_base)
  header = (
    f"Gradient of the e2e training loss (per-iterate BCE, w_t = 1/(T−t+1), l2 "
    f"{config.loss.l2}) w.r.t. the SPENEnergy parameters and the T learned step sizes. "
    f"Energy: {_NUM_FEATURES.value} features → feature network {hidden} "
    f"({config.energy.feature_activation}, dropout {energy.dropout}) → {_NUM_LABELS.value} "
    f"labels, {energy.num_measurements} {config.energy.activation} measurements; batch "
    f"{_BATCH_SIZE.value} of random binary data with bibtex's shapes. GBI: method "
    f"{names['method']}, optimizer {names['optimizer']}, start {e.init!r}, initial η "
    f"{gbi_base.learning_rate}, τ {gbi_base.entropy_weight}.\n"
    f"Timing: {common.machine_description()}; median of {_REPEATS.value} calls, compile "
    f"excluded; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
    f"(other jobs share the machine when it exceeds the CPU count).\n"
  )
  report = "\n".join([table, ""] + [f"- {n}" for n in notes])
  print(header)
  print(report)
  if _OUT.value:
    common.write_report(_OUT.value, "benchmarks.e2e_gradients", header + "\n" + report)


if __name__ == "__main__":
  cli.run(main)

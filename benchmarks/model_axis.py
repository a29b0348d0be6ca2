r"""Memory and time of a SPEN train step with its label dimension split over devices.

For each label count L (`--num_labels`) and model parallelism M (`--model_parallelism`)
this builds the mesh `make_mesh(D, model_parallelism=M)` over D = `--devices` devices
(M = 1: the 1-D data-parallel mesh, state replicated; M > 1: `('data', 'model')` of
shape (D/M, M), every state leaf with a label axis split M ways) and jits one SSVM
training step of a SPEN energy (feature network, local head `[H, L]`, `K` measurements
`[L, K]`, loss-augmented GBI over `[B, L]`) with `build_train_step`, exactly as `fit`
does. It reports, per device:

- state MiB: the bytes of the state's shards on one device (parameters and momentum,
  read off `addressable_shards`), and what the label-dependent leaves of it take;
- peak MiB: XLA's accounting of the compiled step (`memory_analysis()`: arguments +
  outputs + temporaries − the outputs aliased to the donated state), which for a
  partitioned program is that of one device's program;
- step ms: the median wall time of `--steps` steps after a warm-up step (compile
  excluded), and the loss of every step (it must stay finite).

The data are synthetic and sparse: binary features (`--active_features` of
`--num_features` on per row) and `--active_labels` positive labels per row. On forced
CPU devices (the default: `--devices=4` on the host platform) the "devices" share the
machine's cores, so the step times say what the partitioned program costs there, not
what D accelerators would take; the memory columns are per device either way.

  python -m benchmarks.model_axis --out=results/model_axis/summary.md
"""

import json
import os
import statistics
import sys
import time

if __name__ == "__main__" and "--xla_force_host_platform_device_count" not in os.environ.get(
  "XLA_FLAGS", ""
):
  # Forced host devices must be set before JAX starts (a real multi-device backend
  # ignores the host platform's count).
  _count = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--devices=")), "4")
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={_count}"
  ).strip()

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import jax
import numpy as np
import optax

from benchmarks import common
import energynets as en
from energynets import train as train_lib
from experiments import cli

_NUM_LABELS = flags.DEFINE_list(
  "num_labels", ["1000", "10000", "30000", "100000"], "label counts L"
)
_MODEL_PARALLELISM = flags.DEFINE_list(
  "model_parallelism", ["1", "2", "4"], "values of M (each must divide --devices)"
)
_DEVICES = flags.DEFINE_integer("devices", 4, "devices of every mesh")
_NUM_FEATURES = flags.DEFINE_integer("num_features", 5000, "binary input features")
_ACTIVE_FEATURES = flags.DEFINE_integer("active_features", 50, "features on per row")
_ACTIVE_LABELS = flags.DEFINE_integer("active_labels", 10, "positive labels per row")
_HIDDEN = flags.DEFINE_integer("hidden", 64, "width of the feature network's layer")
_MEASUREMENTS = flags.DEFINE_integer("num_measurements", 15, "K, rows of C1")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 16, "global batch size B")
_GBI_STEPS = flags.DEFINE_integer("gbi_steps", 5, "loss-augmented GBI steps per update")
_STEPS = flags.DEFINE_integer("steps", 3, "timed training steps (after one warm-up)")
_SEED = flags.DEFINE_integer("seed", 0, "seed of the data and the parameters")
_OUT = flags.DEFINE_string("out", "", "also write the markdown report here (and .json)")

MIB = 2.0**20


def _sparse_batch(rs: np.random.RandomState, num_labels: int) -> dict[str, np.ndarray]:
  """`{"x": [B, F], "y": [B, L]}`: 0/1 rows with a fixed number of ones each."""
  b = _BATCH_SIZE.value

  def rows(width, ones):
    out = np.zeros((b, width), np.float32)
    for row in out:
      row[rs.choice(width, size=ones, replace=False)] = 1.0
    return out

  return {
    "x": rows(_NUM_FEATURES.value, _ACTIVE_FEATURES.value),
    "y": rows(num_labels, _ACTIVE_LABELS.value),
  }


def _objective(num_labels: int) -> en.objectives.Objective:
  energy = en.energies.SPENEnergy(
    num_labels=num_labels,
    feature_hidden=(_HIDDEN.value,),
    num_measurements=_MEASUREMENTS.value,
    activation=en.nets.softplus,
  )
  # SPEN A.5's optimizer: SGD with momentum (one moment per parameter).
  return en.objectives.ssvm_hinge(
    energy,
    optax.sgd(1e-2, momentum=0.9),
    options=en.objectives.SSVMOptions(
      init="local",
      loss_aug_gbi=en.inference.GBIConfig(num_steps=_GBI_STEPS.value),
      predict_gbi=en.inference.GBIConfig(max_steps=_GBI_STEPS.value),
    ),
  )


def _per_device_bytes(state, num_labels: int) -> tuple[int, int]:
  """(all, label-dependent) bytes of the state's shards on the first device."""
  total = label = 0
  for leaf in jax.tree.leaves(state):
    nbytes = leaf.addressable_shards[0].data.nbytes
    total += nbytes
    label += nbytes if num_labels in leaf.shape else 0
  return total, label


def measure(num_labels: int, model: int) -> dict:
  """One (L, M) cell: per-device state and peak bytes, step times and losses."""
  mesh = train_lib.make_mesh(_DEVICES.value, model_parallelism=model)
  objective = _objective(num_labels)
  rs = np.random.RandomState(_SEED.value)
  batch = train_lib.shard_batch(_sparse_batch(rs, num_labels), mesh)
  sharding = train_lib.step.state_sharding_for(objective, mesh, batch, num_labels)
  state = train_lib.build_init(objective, mesh, sharding)(jax.random.PRNGKey(_SEED.value), batch)
  state_bytes, label_bytes = _per_device_bytes(state, num_labels)
  step = train_lib.build_train_step(objective, mesh, sharding)
  key = jax.random.PRNGKey(_SEED.value + 1)
  started = time.perf_counter()
  compiled = step.lower(state, batch, key).compile()
  compile_seconds = time.perf_counter() - started
  stats = compiled.memory_analysis()
  losses, seconds = [], []
  for t in range(_STEPS.value + 1):
    started = time.perf_counter()
    state, metrics = compiled(state, batch, jax.random.fold_in(key, t))
    loss = float(jax.block_until_ready(metrics["loss"]))
    if t:  # the first call is a warm-up
      seconds.append(time.perf_counter() - started)
    losses.append(loss)
  return {
    "num_labels": num_labels,
    "model_parallelism": model,
    "mesh": dict(mesh.shape),
    "state_bytes_per_device": state_bytes,
    "label_state_bytes_per_device": label_bytes,
    "argument_bytes": int(stats.argument_size_in_bytes),
    "output_bytes": int(stats.output_size_in_bytes),
    "temp_bytes": int(stats.temp_size_in_bytes),
    "alias_bytes": int(stats.alias_size_in_bytes),
    "peak_bytes_per_device": common.peak_bytes(compiled),
    "step_seconds_median": statistics.median(seconds),
    "step_seconds": seconds,
    "compile_seconds": compile_seconds,
    "losses": losses,
    "losses_finite": bool(np.all(np.isfinite(losses))),
  }


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  train_lib.quiet_library_logs()
  if jax.device_count() < _DEVICES.value:
    raise app.UsageError(f"--devices={_DEVICES.value} but {jax.device_count()} are visible")
  load_before = os.getloadavg()
  cells = []
  for num_labels in (int(v) for v in _NUM_LABELS.value):
    for model in (int(v) for v in _MODEL_PARALLELISM.value):
      cell = measure(num_labels, model)
      cells.append(cell)
      print(json.dumps({k: v for k, v in cell.items() if k != "step_seconds"}), flush=True)
  load_after = os.getloadavg()

  by_key = {(c["num_labels"], c["model_parallelism"]): c for c in cells}
  rows = []
  for c in cells:
    base = by_key.get((c["num_labels"], 1))
    ratio = f"{base['peak_bytes_per_device'] / c['peak_bytes_per_device']:.2f}×" if base else ""
    rows.append(
      f"| {c['num_labels']} | {c['model_parallelism']} | "
      f"{' × '.join(f'{k} {v}' for k, v in c['mesh'].items())} | "
      f"{c['state_bytes_per_device'] / MIB:.2f} | "
      f"{c['label_state_bytes_per_device'] / MIB:.2f} | "
      f"{c['temp_bytes'] / MIB:.2f} | {c['peak_bytes_per_device'] / MIB:.2f} | {ratio} | "
      f"{1e3 * c['step_seconds_median']:.1f} | "
      f"{', '.join(f'{v:.3g}' for v in c['losses'])} |"
    )
  table = "\n".join(
    [
      "| L | M | mesh | state MiB/device | label part MiB | temp MiB | peak MiB/device | "
      "peak M=1 / this | step ms | losses (warm-up, timed) |",
      "|---|---|---|---|---|---|---|---|---|---|",
    ]
    + rows
  )
  header = (
    f"One SSVM train step (`build_train_step`, state donated) of a SPENEnergy: "
    f"{_NUM_FEATURES.value} binary features ({_ACTIVE_FEATURES.value} on per row) → "
    f"hidden {_HIDDEN.value} (relu) → L local logits, {_MEASUREMENTS.value} softplus "
    f"measurements; {_GBI_STEPS.value} loss-augmented GBI steps (mirror, momentum) from "
    f"σ(local logits); SGD momentum 0.9; batch {_BATCH_SIZE.value} with "
    f"{_ACTIVE_LABELS.value} positive labels per row. Mesh: {_DEVICES.value} devices, "
    f"M = 1 the 1-D data mesh (state replicated), M > 1 ('data', 'model') with every "
    f"label-axis leaf split M ways.\n"
    f"Machine: {common.machine_description()}, {jax.device_count()} devices; step ms is "
    f"the median of {_STEPS.value} steps after a warm-up, compile excluded; load "
    f"average {load_before[0]:.1f} before, {load_after[0]:.1f} after (other jobs share "
    f"the machine when it exceeds the CPU count).\n"
  )
  notes = [
    "state MiB/device: parameters + optimizer state held by one device (its shards); "
    "label part: the leaves with an axis of size L (local head kernel and bias, "
    "measurement matrix, their momenta).",
    "temp / peak: XLA's `memory_analysis()` of the compiled step, which for a "
    "partitioned program is one device's; peak = arguments + outputs + temp − "
    "outputs aliased to the donated state (`benchmarks.common.peak_bytes`).",
    "The forced CPU devices share the machine's cores: step ms is the partitioned "
    "program's cost on this CPU, not a speed-up estimate for M accelerators.",
  ]
  report = "\n".join([table, ""] + [f"- {n}" for n in notes])
  print(header)
  print(report)
  if _OUT.value:
    common.write_report(_OUT.value, "benchmarks.model_axis", header + "\n" + report)
    with open(os.path.splitext(_OUT.value)[0] + ".json", "w") as f:
      json.dump(
        {
          "command": "python -m benchmarks.model_axis " + " ".join(sys.argv[1:]),
          "machine": common.machine_description(),
          "cells": cells,
        },
        f,
        indent=1,
      )


if __name__ == "__main__":
  cli.run(main)

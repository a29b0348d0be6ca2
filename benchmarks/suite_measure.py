"""What the benchmark suite's sections measure with (`benchmarks.suite`).

A method's config, objective and state, built through its stages as the trainer builds
them; the time and peak memory of one training update (the trainer's donated step), of
`predict` over a test split, and of T-step GBI prediction; and the CSV and plot helpers
of the suite's outputs.
"""

from collections.abc import Callable
import csv
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from energynets.train import step as step_lib
from experiments import builders
from experiments import configuration
from experiments.choices import gbi as gbi_choices


class Sizes(NamedTuple):
  """The shapes of a run (bibtex's by default, tiny with --quick)."""

  num_test: int
  num_features: int
  num_labels: int
  batch_sizes: tuple[int, ...]
  label_counts: tuple[int, ...]
  gbi_steps: tuple[int, ...]
  neumann_terms: tuple[int, ...]
  repeats: int
  quick: bool


# ---------------------------------------------------------------------------------------
# Building a method's objective and state from its config.


def shrink(config) -> None:
  """--quick: tiny networks and loops, so every compilation takes about a second."""
  common.shrink_networks(config)
  config.train.batch_size, config.train.eval_batch_size = 16, 32
  if "predict_gbi" in config:
    config.predict_gbi.max_steps = min(config.predict_gbi.max_steps, 5)
  if "implicit" in config:
    config.implicit.inner_steps = 2
    config.implicit.inverse_hvp.num_terms = 2
  if "infnet" in config:
    config.infnet.num_inner_steps = 1


def method_config(spec: str, sizes: Sizes, extra: tuple[str, ...] = ()):
  """`(stage config, [stage configs])` of `name[:key=value...]` on bibtex (the last
  stage is the method's own objective); --quick shrinks it before the overrides."""
  name, *overrides = spec.split(":")  # experiments.compare's spec syntax
  config = configuration.get_config(name, "bibtex")
  if sizes.quick:
    shrink(config)
  configuration.apply_overrides(config, list(overrides) + list(extra))
  stages = [stage for _, stage in configuration.stage_configs(config)]
  return stages[-1], stages


# ---------------------------------------------------------------------------------------
# Measuring.


def device_peak() -> int | None:
  """The GPU/TPU allocator's peak bytes so far (None on CPU, which keeps no statistics)."""
  stats = jax.devices()[0].memory_stats() if jax.default_backend() != "cpu" else None
  return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def compile_fn(fn: Callable, *args) -> Any:
  """`fn` jitted and compiled for `args`."""
  return jax.jit(fn).lower(*args).compile()


def donated_step(objective, state, batch) -> tuple[Any, Callable[[], Any]]:
  """`(compiled, run)`: the trainer's step (`build_train_step`: jitted, state donated)
  compiled for these shapes, and `run()`, which advances a private copy of `state` by
  one update per call (on the same batch and key), as the training loop does."""
  key = jax.random.key(1)
  step = step_lib.build_train_step(objective, step_lib.make_mesh(1))
  compiled = step.lower(state, batch, key).compile()
  holder = [jax.tree.map(jnp.copy, state)]

  def run():
    holder[0], metrics = compiled(holder[0], batch, key)
    return metrics

  return compiled, run


def train_step_row(objective, state, batch, repeats: int) -> dict:
  """Time and peak memory of one training update."""
  compiled, run = donated_step(objective, state, batch)
  seconds = common.median_seconds({"u": run}, repeats)["u"]
  n = len(batch["x"])
  return dict(
    batch=n, ms=1e3 * seconds, examples_per_s=n / seconds, peak_bytes=common.peak_bytes(compiled)
  )


def predict_row(objective, state, x, batch_size: int, repeats: int) -> dict:
  """Time and peak memory of `predict` over all rows of x in batches of `batch_size`
  (the last padded, as `energynets.train.predict_in_batches` does)."""
  n = len(x)
  batch_size = min(batch_size, n)
  padded = jnp.concatenate([x, jnp.zeros((-n % batch_size,) + x.shape[1:], x.dtype)])
  chunks = [padded[i : i + batch_size] for i in range(0, len(padded), batch_size)]
  compiled = compile_fn(objective.predict, state, chunks[0])
  seconds = common.median_seconds({"p": lambda: [compiled(state, c) for c in chunks]}, repeats)["p"]
  return dict(
    batch=batch_size,
    ms=1e3 * seconds,
    examples_per_s=n / seconds,
    peak_bytes=common.peak_bytes(compiled),
  )


def spen_gbi_fn(num_labels: int, num_steps: int, sizes: Sizes, overrides=(), **options):
  """`(params, x) -> y_T`: the SPEN energy of spen_ssvm's config (bibtex sizes, with
  `num_labels`; `overrides` of its keys, e.g. `train.compute_dtype=bfloat16`) and
  `num_steps` GBI steps by `gbi_scan` with its test-time options (`options` override
  them), F(x) once; and its params."""
  stage, _ = method_config("spen_ssvm", sizes, tuple(overrides))
  energy = builders.spen_energy(stage, common.MultilabelShapes(sizes.num_features, num_labels))
  gbi_options = {
    k: stage.predict_gbi[k]
    for k in ("method", "optimizer", "learning_rate", "momentum", "entropy_weight")
  }
  gbi_options.update(options)
  config = gbi_choices.gbi_config(dict(gbi_options, num_steps=num_steps))
  energy_fn = protocol.as_energy(energy).energy

  def gbi(params, x):
    encoding = protocol.as_energy(energy).encode(params, x)
    y_t, _ = gbi_lib.gbi_scan(
      energy_fn,
      params,
      encoding,
      protocol.as_energy(energy).start(encoding, None, "uniform"),
      protocol.BOX,
      config,
    )
    return y_t

  params = protocol.as_energy(energy).init(
    jax.random.key(0), jnp.zeros((1, sizes.num_features), jnp.float32), None
  )
  return gbi, params, energy, config


def feed_forward_point(num_labels, batch_size, sizes, repeats, extra=()):
  """`predict_row` of the mlp config on `batch_size` rows with `num_labels` labels."""
  stage, stages = method_config("mlp", sizes, extra)
  rs = np.random.RandomState(0)
  data = common.random_multilabel_batch(rs, batch_size, sizes.num_features, num_labels)
  objective, state = common.build_state(
    stages, common.MultilabelShapes(sizes.num_features, num_labels), data
  )
  return predict_row(objective, state, data["x"], batch_size, repeats)


def gbi_point(num_labels, batch_size, num_steps, sizes, repeats, extra=()):
  """Time and peak memory of `num_steps`-step GBI prediction (`spen_gbi_fn`)."""
  gbi, params, _, _ = spen_gbi_fn(num_labels, num_steps, sizes, extra)
  x = common.random_multilabel_batch(
    np.random.RandomState(0), batch_size, sizes.num_features, num_labels
  )["x"]
  compiled = compile_fn(gbi, params, x)
  seconds = common.median_seconds({"g": lambda: compiled(params, x)}, repeats)["g"]
  return dict(
    batch=batch_size,
    ms=1e3 * seconds,
    examples_per_s=batch_size / seconds,
    peak_bytes=common.peak_bytes(compiled),
  )


def train_point(spec, num_labels, batch_size, sizes, repeats, extra=()):
  """`train_step_row` of config `spec` (batch_size None: the config's)."""
  stage, stages = method_config(spec, sizes, extra)
  batch_size = batch_size or stage.train.batch_size
  data = common.random_multilabel_batch(
    np.random.RandomState(0), batch_size, sizes.num_features, num_labels
  )
  objective, state = common.build_state(
    stages, common.MultilabelShapes(sizes.num_features, num_labels), data
  )
  return train_step_row(objective, state, data, repeats)


def feature_gflop(energy: SPENEnergy, num_features: int, rows: int) -> float:
  """Multiply-adds ×2 of F(x) and the local head for `rows` inputs: the dense layers
  that dominate a forward pass."""
  widths = [num_features, *energy.feature_hidden, energy.num_labels]
  return 2 * rows * sum(a * b for a, b in zip(widths[:-1], widths[1:])) / 1e9


def seal_step_gflop(stage, sizes: Sizes, n: int) -> float:
  """Dense-layer GFLOP of one SEAL-dynamic NCE update on `n` rows: the loss-net step
  (task-net forward for the noise, loss-net forward and backward, the energies of the
  1+K samples) and the task-net step (task-net forward and backward, loss-net forward);
  a backward pass costs a forward for the weights plus one for the activations, except
  into the input layer (x needs no gradient)."""

  def net(widths):
    layers = [a * b for a, b in zip(widths[:-1], widths[1:])]
    return 2 * n * sum(layers), 2 * n * layers[0]

  task, task_first = net([sizes.num_features, *stage.model.hidden, sizes.num_labels])
  loss, loss_first = net([sizes.num_features, *stage.energy.feature_hidden, sizes.num_labels])
  samples = 2 * n * (1 + stage.seal.num_samples) * sizes.num_labels * stage.energy.num_measurements
  loss_step = task + loss + (2 * loss - loss_first) + 2 * samples
  task_step = task + (2 * task - task_first) + loss
  return (loss_step + task_step) / 1e9


def e2e_step_gflop(stage, sizes: Sizes, n: int) -> float:
  """Dense-layer GFLOP of one e2e update on `n` rows: the feature network and local head
  forward and backward (the unroll's matmuls, `n × L × measurements` per step, are
  negligible next to them); costs as in `seal_step_gflop`."""
  widths = [sizes.num_features, *stage.energy.feature_hidden, sizes.num_labels]
  layers = [a * b for a, b in zip(widths[:-1], widths[1:])]
  forward, first = 2 * n * sum(layers), 2 * n * layers[0]
  return (forward + 2 * forward - first) / 1e9


# ---------------------------------------------------------------------------------------
# Output helpers: CSV, matplotlib, MiB.


def write_csv(path: str, rows: list[dict]) -> None:
  """`rows` as CSV (floats to 6 significant digits, None empty); nothing if empty."""
  if not rows:
    return
  columns = list(rows[0])
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, columns)
    writer.writeheader()
    for row in rows:
      writer.writerow(
        {
          k: (
            "" if row.get(k) is None else f"{row[k]:.6g}" if isinstance(row[k], float) else row[k]
          )
          for k in columns
        }
      )


def pyplot():
  """matplotlib.pyplot on the Agg backend (imported on first use)."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  return plt


def mib(b) -> str:
  """Bytes as MiB to one decimal, "" for None."""
  return "" if b is None else f"{b / 2**20:.1f}"

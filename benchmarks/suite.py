r"""The benchmark suite: speed and memory of every method, scaling curves, JAX vs PyTorch.

One run measures, on random arrays of bibtex's shapes (1836 binary features, 159
labels, 2515 test examples; no data files, and cost does not depend on the values):

- methods (`methods.csv`, `methods.png`): for each method's config
  (`experiments/configs/<method>.py:bibtex`, its last training stage, the state built
  through its earlier stages as the trainer does), one update by the trainer's step
  (`build_train_step`: jitted, state donated) on a batch of the config's size (train
  examples/s) and `predict` over the test split in the config's eval batches, the
  last one padded as the evaluation loop pads it (inference examples/s), with each
  compiled function's peak memory;
- scaling curves (`scaling.csv`, `scaling_*.png`): time and peak memory against batch
  size, label count, GBI steps T and Neumann terms K, for feed-forward prediction,
  T-step GBI prediction, and the SEAL-dynamic, E2E and implicit training steps;
- JAX against eager and `torch.compile`d PyTorch (`torch.csv`, `jax_vs_torch.png`):
  the SPEN energy with 20-step GBI (F(x) once, then the loop; SPEN's entropic mirror
  descent with momentum, and SEAL's projected Adam) on the 2515 test rows, the
  feed-forward pass alone, the loop alone, one SEAL-dynamic NCE update (loss-net step +
  task-net step) and one E2E-SPEN update (backprop through 20 unrolled GBI steps) on a
  training batch, timed in one process from the same weights
  (`benchmarks/torch_reference.py`, checked against the library by
  `tests/test_benchmark_suite.py`; gradients by autograd eagerly and `torch.func` when
  compiled, never hand-derived); speedup = PyTorch time / JAX time, compile time in
  its own column;
- bfloat16 (`bf16.csv`): the feed-forward pass, GBI prediction and the SPEN-SSVM and
  SEAL-dynamic training steps with `train.compute_dtype=bfloat16` against float32,
  each pair measured one after the other in the same run (speed-up = float32 time /
  bfloat16 time; peak-memory ratio bfloat16 / float32);
- profiles (`profile.csv`): which ops take the time in each row, from `jax.profiler`
  (self time of each XLA op, summed over threads) and `torch.profiler` (self CPU time
  of each aten op; compiled code outside aten calls counts as inductor's fused
  kernels);
- `summary.md`: the command, the machine, the ratios against their targets, the
  GBI / feed-forward ratios, the tables, and the top ops where a target is missed.

Timing: each function is compiled (or, in PyTorch, run) once before timing; a time is
the median of `--repeats` calls up to `block_until_ready`
(benchmarks.common.median_seconds); a JAX / PyTorch pair is timed in alternating
blocks of calls (`interleaved_medians`: JAX, eager, compiled), so that a load change
on a shared machine hits all alike. Peak memory: XLA's `memory_analysis()` of the compiled
function (arguments + outputs + temporaries − donated aliases), which is what the
function needs on any backend; on a GPU also the allocator's `peak_bytes_in_use`
after the row (cumulative over the process: an upper bound).

PyTorch is optional: without it the JAX parts run and the summary says how to install
it (`pip install -e ".[bench]"`; a CPU-only torch build is enough).

  python -m benchmarks.suite --out_dir=results/suite
  python -m benchmarks.suite --quick --out_dir=/tmp/suite      # seconds; what the tests run
"""

import atexit
import collections
import csv
import glob
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, NamedTuple, Optional

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import RESULTS_DIR
from benchmarks import common
from energynets.energies import SPENEnergy
from energynets.inference import gbi as gbi_lib
from energynets.energies import protocol
from energynets.train import quiet_library_logs
from energynets.train import step as step_lib
from experiments import builders
from experiments import configuration

DEFAULT_METHODS = ("br", "mlp", "dmf", "spen_ssvm", "spen_gbi", "e2e", "infnet", "dvn",
                   "seal_dynamic", "seal_static", "seal_ranking", "implicit")
SECTIONS = ("methods", "scaling", "torch", "bf16")
# JAX / eager PyTorch targets (speedup = PyTorch time / JAX time) on CPU: no slower on
# the GBI loop, 2× on the SEAL-dynamic step; on a GPU 2× on these three.
CPU_TARGETS = {"gbi20_spen_loop_only": 1.0, "gbi20_seal_loop_only": 1.0,
               "seal_dynamic_nce_step": 2.0}
# JAX / compiled PyTorch (`torch.compile`): no slower on any row.
COMPILED_TARGET = 1.0
TORCH_INSTALL = ('pip install -e ".[bench]"  (or any torch build: the CPU-only wheel is '
                 "enough)")

_OUT_DIR = flags.DEFINE_string("out_dir", os.path.join(RESULTS_DIR, "suite"),
                               "where the CSVs, PNGs and summary.md go")
_QUICK = flags.DEFINE_bool("quick", False, "tiny shapes and networks, one repeat: a smoke "
                           "test of the whole pipeline in seconds (numbers meaningless)")
_METHODS = flags.DEFINE_list("methods", list(DEFAULT_METHODS),
                             "config[:key=value...] per methods-table row")
_SECTIONS = flags.DEFINE_list("sections", list(SECTIONS), f"which of {SECTIONS} to run")
_REPEATS = flags.DEFINE_integer("repeats", 5, "timed calls per function (median)")
_NUM_TEST = flags.DEFINE_integer("num_test", 2515, "test rows (bibtex)")
_NUM_FEATURES = flags.DEFINE_integer("num_features", 1836, "input features (bibtex)")
_NUM_LABELS = flags.DEFINE_integer("num_labels", 159, "labels (bibtex)")
_BATCH_SIZES = flags.DEFINE_list("batch_sizes", ["32", "128", "512", "2048"],
                                 "batch-size curve")
_LABEL_COUNTS = flags.DEFINE_list("label_counts", ["50", "159", "500", "1000"],
                                  "label-count curve")
_GBI_STEPS = flags.DEFINE_list("gbi_steps", ["5", "10", "20", "40", "80"], "GBI-steps curve")
_NEUMANN_TERMS = flags.DEFINE_list("neumann_terms", ["0", "5", "10", "20"],
                                   "Neumann-terms curve (implicit training)")
_PROFILE = flags.DEFINE_bool("profile", True, "profile each JAX / PyTorch pair by op")
_TORCH_OMP_PASSIVE = flags.DEFINE_bool(
    "torch_omp_passive", True, "OMP_WAIT_POLICY=PASSIVE for PyTorch's OpenMP threads "
    "(unless set): the fair setting on a machine shared with other jobs")
_TORCH_COMPILE = flags.DEFINE_bool("torch_compile", True, "also time `torch.compile`d "
                                   "PyTorch (compile time reported separately)")
_TORCH_COMPILE_MODE = flags.DEFINE_string("torch_compile_mode", "default",
                                          "torch.compile's mode ('default', "
                                          "'reduce-overhead', 'max-autotune', ...)")
_TORCH_THREADS = flags.DEFINE_integer("torch_threads", 0,
                                      "torch.set_num_threads (0: torch's default)")


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


def _sizes() -> Sizes:
  ints = lambda values: tuple(int(v) for v in values)
  if _QUICK.value:
    return Sizes(48, 40, 12, (16,), (12,), (2,), (1,), 1, True)
  return Sizes(_NUM_TEST.value, _NUM_FEATURES.value, _NUM_LABELS.value,
               ints(_BATCH_SIZES.value), ints(_LABEL_COUNTS.value), ints(_GBI_STEPS.value),
               ints(_NEUMANN_TERMS.value), _REPEATS.value, False)


# ---------------------------------------------------------------------------------------
# Building a method's objective and state from its config.


def _shrink(config) -> None:
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
    _shrink(config)
  configuration.apply_overrides(config, list(overrides) + list(extra))
  stages = [stage for _, stage in configuration.stage_configs(config)]
  return stages[-1], stages


# ---------------------------------------------------------------------------------------
# Measuring.


def _device_peak() -> Optional[int]:
  """The GPU/TPU allocator's peak bytes so far (None on CPU, which keeps no statistics)."""
  stats = jax.devices()[0].memory_stats() if jax.default_backend() != "cpu" else None
  return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def compile_fn(fn: Callable, *args) -> Any:
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
  return dict(batch=n, ms=1e3 * seconds, examples_per_s=n / seconds,
              peak_bytes=common.peak_bytes(compiled))


def predict_row(objective, state, x, batch_size: int, repeats: int) -> dict:
  """Time and peak memory of `predict` over all rows of x in batches of `batch_size`
  (the last padded, as `energynets.train.predict_in_batches` does)."""
  n = len(x)
  batch_size = min(batch_size, n)
  padded = jnp.concatenate([x, jnp.zeros((-n % batch_size,) + x.shape[1:], x.dtype)])
  chunks = [padded[i:i + batch_size] for i in range(0, len(padded), batch_size)]
  compiled = compile_fn(objective.predict, state, chunks[0])
  seconds = common.median_seconds(
      {"p": lambda: [compiled(state, c) for c in chunks]}, repeats)["p"]
  return dict(batch=batch_size, ms=1e3 * seconds, examples_per_s=n / seconds,
              peak_bytes=common.peak_bytes(compiled))


# ---------------------------------------------------------------------------------------
# Section 1: every method.


def methods_section(sizes: Sizes, specs) -> list[dict]:
  rows = []
  shapes = common.MultilabelShapes(sizes.num_features, sizes.num_labels)
  for spec in specs:
    started = time.perf_counter()
    rs = np.random.RandomState(0)
    stage, stages = method_config(spec, sizes)
    batch = common.random_multilabel_batch(rs, stage.train.batch_size, sizes.num_features,
                                           sizes.num_labels)
    objective, state = common.build_state(stages, shapes, batch)
    test_x = common.random_multilabel_batch(rs, sizes.num_test, sizes.num_features,
                                            sizes.num_labels)["x"]
    t = train_step_row(objective, state, batch, sizes.repeats)
    p = predict_row(objective, state, test_x, stage.train.eval_batch_size, sizes.repeats)
    rows.append(dict(
        method=spec, stage_method=stage.method, train_batch=t["batch"],
        train_ms=t["ms"], train_examples_per_s=t["examples_per_s"],
        train_peak_bytes=t["peak_bytes"], inference_examples=sizes.num_test,
        inference_batch=p["batch"], inference_ms=p["ms"],
        inference_examples_per_s=p["examples_per_s"], inference_peak_bytes=p["peak_bytes"],
        device_peak_bytes=_device_peak()))
    print(f"  {spec}: train {t['ms']:.1f} ms / {t['batch']}, inference {p['ms']:.1f} ms / "
          f"{sizes.num_test} ({time.perf_counter() - started:.0f} s with compilation)",
          flush=True)
  return rows


# ---------------------------------------------------------------------------------------
# Section 2: scaling curves.


def spen_gbi_fn(num_labels: int, num_steps: int, sizes: Sizes, overrides=(), **options):
  """`(params, x) -> y_T`: the SPEN energy of spen_ssvm's config (bibtex sizes, with
  `num_labels`; `overrides` of its keys, e.g. `train.compute_dtype=bfloat16`) and
  `num_steps` GBI steps by `gbi_scan` with its test-time options (`options` override
  them), F(x) once; and its params."""
  stage, _ = method_config("spen_ssvm", sizes, tuple(overrides))
  energy = builders.spen_energy(stage, common.MultilabelShapes(sizes.num_features, num_labels))
  gbi_options = {k: stage.predict_gbi[k] for k in ("method", "optimizer", "learning_rate",
                                                    "momentum", "entropy_weight")}
  gbi_options.update(options)
  config = gbi_lib.GBIConfig(num_steps=num_steps, **gbi_options)
  energy_fn = protocol.as_energy(energy).energy

  def gbi(params, x):
    encoding = protocol.as_energy(energy).encode(params, x)
    y_t, _ = gbi_lib.gbi_scan(energy_fn, params, encoding,
                              protocol.as_energy(energy).start(encoding, None, "uniform"),
                              protocol.BOX, config)
    return y_t

  params = protocol.as_energy(energy).init(
      jax.random.key(0), jnp.zeros((1, sizes.num_features), jnp.float32), None)
  return gbi, params, energy, config


def _feed_forward_point(num_labels, batch_size, sizes, repeats, extra=()):
  stage, stages = method_config("mlp", sizes, extra)
  rs = np.random.RandomState(0)
  data = common.random_multilabel_batch(rs, batch_size, sizes.num_features, num_labels)
  objective, state = common.build_state(stages, common.MultilabelShapes(sizes.num_features,
                                                                 num_labels), data)
  return predict_row(objective, state, data["x"], batch_size, repeats)


def _gbi_point(num_labels, batch_size, num_steps, sizes, repeats, extra=()):
  gbi, params, _, _ = spen_gbi_fn(num_labels, num_steps, sizes, extra)
  x = common.random_multilabel_batch(np.random.RandomState(0), batch_size,
                                     sizes.num_features, num_labels)["x"]
  compiled = compile_fn(gbi, params, x)
  seconds = common.median_seconds({"g": lambda: compiled(params, x)}, repeats)["g"]
  return dict(batch=batch_size, ms=1e3 * seconds, examples_per_s=batch_size / seconds,
              peak_bytes=common.peak_bytes(compiled))


def _train_point(spec, num_labels, batch_size, sizes, repeats, extra=()):
  stage, stages = method_config(spec, sizes, extra)
  batch_size = batch_size or stage.train.batch_size
  data = common.random_multilabel_batch(np.random.RandomState(0), batch_size,
                                        sizes.num_features, num_labels)
  objective, state = common.build_state(
      stages, common.MultilabelShapes(sizes.num_features, num_labels), data)
  return train_step_row(objective, state, data, repeats)


def scaling_section(sizes: Sizes) -> list[dict]:
  """Rows `curve, value, row, batch, ms, examples_per_s, peak_bytes`."""
  repeats = sizes.repeats
  labels, test = sizes.num_labels, sizes.num_test
  train_batch = None  # the config's
  t_default = 20 if not sizes.quick else sizes.gbi_steps[-1]
  points = []

  def shape_points(curve, value, num_labels, rows, batch):
    """The four rows measured at each point of the batch-size and label-count curves."""
    return [
        (curve, value, "feed-forward predict", lambda: _feed_forward_point(
            num_labels, rows, sizes, repeats)),
        (curve, value, f"GBI predict (T={t_default})", lambda: _gbi_point(
            num_labels, rows, t_default, sizes, repeats)),
        (curve, value, "seal_dynamic train step", lambda: _train_point(
            "seal_dynamic", num_labels, batch, sizes, repeats)),
        (curve, value, "e2e train step", lambda: _train_point(
            "e2e", num_labels, batch, sizes, repeats)),
    ]

  for b in sizes.batch_sizes:
    points += shape_points("batch_size", b, labels, b, b)
  for n in sizes.label_counts:
    points += shape_points("labels", n, n, test, train_batch)
  for t in sizes.gbi_steps:
    points += [
        ("gbi_steps", t, "GBI predict", lambda t=t: _gbi_point(labels, test, t, sizes,
                                                                repeats)),
        ("gbi_steps", t, "e2e train step (backprop through T steps)",
         lambda t=t: _train_point("e2e", labels, train_batch, sizes, repeats,
                                  (f"gbi.num_steps={t}",))),
    ]
  for k in sizes.neumann_terms:
    points.append(("neumann_terms", k, "implicit train step", lambda k=k: _train_point(
        "implicit", labels, train_batch, sizes, repeats,
        (f"implicit.inverse_hvp.num_terms={k}",))))
  rows = []
  for curve, value, row, measure in points:
    result = measure()
    rows.append(dict(curve=curve, value=value, row=row, **result))
    print(f"  {curve}={value} {row}: {result['ms']:.1f} ms ({result['batch']} rows), "
          f"{result['peak_bytes'] / 2**20:.1f} MiB", flush=True)
  return rows


BFLOAT16 = ("train.compute_dtype=bfloat16",)


def bf16_section(sizes: Sizes) -> list[dict]:
  """Rows `row, rows, float32_ms, bfloat16_ms, speedup, float32_peak_bytes,
  bfloat16_peak_bytes, memory_ratio`: four of the scaling rows at bibtex's shapes, each
  built and timed with the configs' float32 and then with `train.compute_dtype=bfloat16`
  (the networks in bfloat16, state, GBI iterates and losses float32)."""
  labels, test, repeats = sizes.num_labels, sizes.num_test, sizes.repeats
  t = 20 if not sizes.quick else sizes.gbi_steps[-1]
  points = [
      ("feed-forward predict", lambda extra: _feed_forward_point(
          labels, test, sizes, repeats, extra)),
      (f"GBI predict (T={t})", lambda extra: _gbi_point(labels, test, t, sizes, repeats,
                                                        extra)),
      ("spen_ssvm train step", lambda extra: _train_point(
          "spen_ssvm", labels, None, sizes, repeats, extra)),
      ("seal_dynamic train step", lambda extra: _train_point(
          "seal_dynamic", labels, None, sizes, repeats, extra)),
  ]
  rows = []
  for name, measure in points:
    full, half = measure(()), measure(BFLOAT16)
    rows.append(dict(row=name, rows=full["batch"], float32_ms=full["ms"],
                     bfloat16_ms=half["ms"], speedup=full["ms"] / half["ms"],
                     float32_peak_bytes=full["peak_bytes"],
                     bfloat16_peak_bytes=half["peak_bytes"],
                     memory_ratio=half["peak_bytes"] / full["peak_bytes"]))
    print(f"  {name}: float32 {full['ms']:.1f} ms, bfloat16 {half['ms']:.1f} ms "
          f"({rows[-1]['speedup']:.2f}x), peak {_mib(full['peak_bytes'])} -> "
          f"{_mib(half['peak_bytes'])} MiB", flush=True)
  return rows


# ---------------------------------------------------------------------------------------
# Section 3: JAX against eager PyTorch, with op profiles.


def _torch():
  """(torch, benchmarks.torch_reference), or (None, None) when torch is missing."""
  if _TORCH_OMP_PASSIVE.value and "torch" not in sys.modules:
    # OpenMP threads that spin while waiting collapse when other jobs take the cores
    # (the 20-step loop: 586 ms spinning vs 93 ms passive at load 7 on 2 cores); set
    # before torch loads its OpenMP runtime.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
  if "torch" not in sys.modules and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    # A fresh inductor cache, so the compile times are those of a first run: the default
    # on-disk cache would cut them to a few seconds on a rerun with the same shapes.
    cache = tempfile.mkdtemp(prefix="inductor_")
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
  try:
    import torch  # pylint: disable=g-import-not-at-top
    from benchmarks import torch_reference  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None, None
  return torch, torch_reference


def _feature_gflop(energy: SPENEnergy, num_features: int, rows: int) -> float:
  """Multiply-adds ×2 of F(x) and the local head for `rows` inputs: the dense layers
  that dominate a forward pass."""
  widths = [num_features, *energy.feature_hidden, energy.num_labels]
  return 2 * rows * sum(a * b for a, b in zip(widths[:-1], widths[1:])) / 1e9


def _seal_step_gflop(stage, sizes: Sizes, n: int) -> float:
  """Dense-layer GFLOP of one SEAL-dynamic NCE update on `n` rows: the loss-net step
  (task-net forward for the noise, loss-net forward and backward, the energies of the
  1+K samples) and the task-net step (task-net forward and backward, loss-net forward);
  a backward pass costs a forward for the weights plus one for the activations, except
  into the input layer (x needs no gradient)."""
  def net(widths):
    layers = [a * b for a, b in zip(widths[:-1], widths[1:])]
    return 2 * n * sum(layers), 2 * n * layers[0]
  task, task_first = net([sizes.num_features, *stage.model.hidden, sizes.num_labels])
  loss, loss_first = net([sizes.num_features, *stage.energy.feature_hidden,
                          sizes.num_labels])
  samples = 2 * n * (1 + stage.seal.num_samples) * sizes.num_labels * \
      stage.energy.num_measurements
  loss_step = task + loss + (2 * loss - loss_first) + 2 * samples
  task_step = task + (2 * task - task_first) + loss
  return (loss_step + task_step) / 1e9


def _e2e_step_gflop(stage, sizes: Sizes, n: int) -> float:
  """Dense-layer GFLOP of one e2e update on `n` rows: the feature network and local head
  forward and backward (the unroll's matmuls, `n × L × measurements` per step, are
  negligible next to them); costs as in `_seal_step_gflop`."""
  widths = [sizes.num_features, *stage.energy.feature_hidden, sizes.num_labels]
  layers = [a * b for a, b in zip(widths[:-1], widths[1:])]
  forward, first = 2 * n * sum(layers), 2 * n * layers[0]
  return (forward + 2 * forward - first) / 1e9


class TorchSide(NamedTuple):
  """The PyTorch side of a benchmark row: eager and compiled callables (either None)."""
  eager: Optional[Callable]
  compiled: Optional[Callable]


def _timed_first_call(fn: Callable, sync: Callable[[], None]) -> float:
  """Seconds of `fn`'s first call (for a `torch.compile`d function: tracing, inductor's
  code generation and C++/Triton compilation, and one run)."""
  started = time.perf_counter()
  fn()
  sync()
  return time.perf_counter() - started


def torch_section(sizes: Sizes, torch, ref) -> tuple[list[dict], list[dict]]:
  """Rows of torch.csv and of profile.csv; without torch (None) the JAX side alone.

  Each row times JAX (jit), eager PyTorch and `torch.compile`d PyTorch on the same
  shapes and weights, in alternating blocks (`interleaved_medians`); compilation is
  timed separately (JAX: `lower().compile()`; PyTorch: the compiled function's first
  call)."""
  device = "cpu"
  if torch is not None:
    if _TORCH_THREADS.value:
      torch.set_num_threads(_TORCH_THREADS.value)
    torch.manual_seed(0)
    if jax.default_backend() == "gpu" and torch.cuda.is_available():
      device = "cuda"
  sync = (torch.cuda.synchronize if device == "cuda" else lambda: None)
  synced = lambda fn: None if fn is None else (lambda: (fn(), sync())[0])
  compile_options = dict(mode=_TORCH_COMPILE_MODE.value)
  use_compile = torch is not None and _TORCH_COMPILE.value
  to_torch = lambda a: torch.from_numpy(np.array(a)).to(device)
  rs = np.random.RandomState(0)
  x = common.random_multilabel_batch(rs, sizes.num_test, sizes.num_features,
                                     sizes.num_labels)["x"]
  x_torch = to_torch(x) if torch is not None else None
  rows, profiles, pairs = [], [], {}
  jax_compile_s, torch_compile_s = {}, {}

  def jax_compiled(name, fn, *args):
    started = time.perf_counter()
    compiled = compile_fn(fn, *args)
    jax_compile_s[name] = time.perf_counter() - started
    return compiled

  # The SPEN energy and 20-step GBI, in SPEN's form and in SEAL's (Adam + clamp): the
  # whole prediction (F(x), then the loop), F(x) alone (the feed-forward prediction of
  # the same network) and the loop alone from a precomputed F(x). The compiled whole
  # prediction is the compiled feed-forward pass followed by the compiled loop.
  num_steps = 20 if not sizes.quick else 3  # --quick: compiles in seconds, not minutes
  variants = {"gbi20_spen": {},
              "gbi20_seal": dict(method="projected", optimizer="adam", learning_rate=0.05)}
  torch_encode = None
  for name, options in variants.items():
    gbi, params, energy, config = spen_gbi_fn(sizes.num_labels, num_steps, sizes, **options)
    gflop = _feature_gflop(energy, sizes.num_features, sizes.num_test)
    torch_energy = ref and ref.load_flax_spen(ref.SPENEnergy(
        sizes.num_features, sizes.num_labels, energy.feature_hidden,
        energy.feature_activation, energy.num_measurements, energy.activation),
                                              params).to(device)
    torch_options = dict(num_steps=num_steps, method=config.method,
                         optimizer=config.optimizer, learning_rate=config.learning_rate,
                         momentum=config.momentum)
    encode_fn = lambda p, x_: protocol.as_energy(energy).encode(p, x_)
    compiled_encode = jax_compiled("feed_forward", encode_fn, params, x)
    encoding = compiled_encode(params, x)
    compiled = jax_compiled(name, gbi, params, x)
    loop = jax_compiled(f"{name}_loop_only", lambda p, enc, c=config: gbi_lib.gbi_scan(
        protocol.as_energy(energy).energy, p, enc,
        protocol.as_energy(energy).start(enc, None, "uniform"), protocol.BOX, c)[0],
                        params, encoding)
    ff = whole = loop_only = TorchSide(None, None)
    if torch is not None:
      with torch.no_grad():
        logits_torch = torch_energy.encode(x_torch)

      def eager_ff(e=torch_energy):
        with torch.no_grad():
          return e.encode(x_torch)

      eager_gbi = lambda e=torch_energy, o=torch_options: ref.gbi(e, x_torch, **o)
      eager_loop = lambda e=torch_energy, o=torch_options, lg=logits_torch: ref.gbi(
          e, x_torch, logits=lg, **o)
      compiled_ff = compiled_gbi = compiled_loop = None
      if use_compile:
        if torch_encode is None:  # both variants share the network
          torch_encode = ref.compiled_encode(torch_energy, **compile_options)

          def compiled_ff(c=torch_encode):
            with torch.no_grad():
              return c(x_torch)

          torch_compile_s["feed_forward"] = _timed_first_call(compiled_ff, sync)
        loop_fn = ref.compiled_gbi_loop(torch_energy, compile_options=compile_options,
                                        **torch_options)

        def compiled_loop(f=loop_fn, lg=logits_torch):
          with torch.no_grad():
            return f(lg)

        def compiled_gbi(f=loop_fn, c=torch_encode):
          with torch.no_grad():
            return f(c(x_torch))

        torch_compile_s[f"{name}_loop_only"] = _timed_first_call(compiled_loop, sync)
        torch_compile_s[name] = (torch_compile_s["feed_forward"] +
                                 torch_compile_s[f"{name}_loop_only"])
      ff = TorchSide(eager_ff, compiled_ff)
      whole = TorchSide(eager_gbi, compiled_gbi)
      loop_only = TorchSide(eager_loop, compiled_loop)
    if not pairs:
      pairs["feed_forward"] = (lambda c=compiled_encode, p=params: c(p, x), ff,
                               compiled_encode)
      rows.append(dict(benchmark="feed_forward", what="F(x) and the local logits (the "
                       "MLP's prediction)", rows=sizes.num_test, gflop_dense=gflop,
                       jax_peak_bytes=common.peak_bytes(compiled_encode)))
    steps = f"{num_steps} GBI steps ({config.method}, {config.optimizer})"
    pairs[name] = (lambda c=compiled, p=params: c(p, x), whole, compiled)
    rows.append(dict(benchmark=name, what=f"F(x) + {steps}", rows=sizes.num_test,
                     gflop_dense=gflop, jax_peak_bytes=common.peak_bytes(compiled)))
    pairs[f"{name}_loop_only"] = (lambda c=loop, p=params, enc=encoding: c(p, enc),
                                  loop_only, loop)
    rows.append(dict(benchmark=f"{name}_loop_only", what=f"{steps} from a precomputed F(x)",
                     rows=sizes.num_test, gflop_dense=0.0,
                     jax_peak_bytes=common.peak_bytes(loop)))

  # One SEAL-dynamic update with the NCE loss-net objective, at the config's batch.
  stage, stages = method_config("seal_dynamic", sizes)
  shapes = common.MultilabelShapes(sizes.num_features, sizes.num_labels)
  batch = common.random_multilabel_batch(rs, stage.train.batch_size, sizes.num_features,
                                         sizes.num_labels)
  objective, state = common.build_state(stages, shapes, batch)
  started = time.perf_counter()
  update, run_update = donated_step(objective, state, batch)
  jax_compile_s["seal_dynamic_nce_step"] = time.perf_counter() - started
  e, s = stage.energy, stage.seal
  seal_side = TorchSide(None, None)
  if torch is not None:
    task_net = ref.load_flax_mlp(ref.MLP(
        sizes.num_features, stage.model.hidden, sizes.num_labels, stage.model.activation,
        stage.model.dropout, stage.model.input_dropout), state["task_net"].params).to(device)
    loss_net = ref.load_flax_spen(ref.SPENEnergy(
        sizes.num_features, sizes.num_labels, e.feature_hidden, e.feature_activation,
        e.num_measurements, e.activation, e.dropout, e.input_dropout),
                                  state["loss_net"].params).to(device)
    seal_options = dict(num_samples=s.num_samples, energy_weight=s.energy_weight,
                        bce_weight=s.bce_weight,
                        task_learning_rate=stage.optimizer.learning_rate,
                        loss_learning_rate=stage.loss_net_optimizer.learning_rate,
                        task_clip_norm=stage.optimizer.clip_norm)
    compiled_seal = (ref.SealDynamicFunctional(task_net, loss_net, compile=True,
                                               compile_options=compile_options,
                                               **seal_options)
                     if use_compile else None)  # copies the weights before any eager step
    seal = ref.SealDynamic(task_net, loss_net, **seal_options)
    batch_torch = {k: to_torch(v) for k, v in batch.items()}
    seal_side = TorchSide(lambda: seal.step(batch_torch["x"], batch_torch["y"]),
                          compiled_seal and (lambda: compiled_seal.step(batch_torch["x"],
                                                                        batch_torch["y"])))
    if compiled_seal is not None:
      torch_compile_s["seal_dynamic_nce_step"] = _timed_first_call(seal_side.compiled, sync)
  pairs["seal_dynamic_nce_step"] = (run_update, seal_side, update)
  n = stage.train.batch_size
  rows.append(dict(benchmark="seal_dynamic_nce_step", what=f"loss-net NCE step (K="
                   f"{s.num_samples}) + task-net step, Adam", rows=n,
                   gflop_dense=_seal_step_gflop(stage, sizes, n),
                   jax_peak_bytes=common.peak_bytes(update)))

  # One E2E-SPEN update (the e2e config's last stage, `joint`): backprop through the
  # unrolled logit-space GBI with learned step sizes.
  stage, stages = method_config("e2e", sizes)
  batch = common.random_multilabel_batch(rs, stage.train.batch_size, sizes.num_features,
                                         sizes.num_labels)
  objective, state = common.build_state(stages, shapes, batch)
  started = time.perf_counter()
  update, run_update = donated_step(objective, state, batch)
  jax_compile_s["e2e_step"] = time.perf_counter() - started
  e, g = stage.energy, stage.gbi
  e2e_side = TorchSide(None, None)
  if torch is not None:
    e2e_energy = ref.load_flax_spen(ref.SPENEnergy(
        sizes.num_features, sizes.num_labels, e.feature_hidden, e.feature_activation,
        e.num_measurements, e.activation, e.dropout, e.input_dropout),
                                    state["energy"].params).to(device)
    e2e_options = dict(num_steps=g.num_steps, step_size=g.learning_rate,
                       l2=stage.loss.l2, learning_rate=stage.optimizer.learning_rate,
                       step_size_learning_rate=stage.step_size_optimizer.learning_rate,
                       loss_eps=stage.e2e.loss_eps)
    eager_e2e = ref.E2EStep(e2e_energy, mode="eager", **e2e_options)
    compiled_e2e = (ref.E2EStep(e2e_energy, mode="compiled",
                                compile_options=compile_options, **e2e_options)
                    if use_compile else None)
    batch_torch = {k: to_torch(v) for k, v in batch.items()}
    e2e_side = TorchSide(lambda: eager_e2e.step(batch_torch["x"], batch_torch["y"]),
                         compiled_e2e and (lambda: compiled_e2e.step(batch_torch["x"],
                                                                     batch_torch["y"])))
    if compiled_e2e is not None:
      torch_compile_s["e2e_step"] = _timed_first_call(e2e_side.compiled, sync)
  pairs["e2e_step"] = (run_update, e2e_side, update)
  n = stage.train.batch_size
  rows.append(dict(benchmark="e2e_step", what=f"E2E-SPEN update: backprop through "
                   f"{g.num_steps} unrolled GBI steps ({g.method}, learned step sizes), "
                   f"Adam", rows=n, gflop_dense=_e2e_step_gflop(stage, sizes, n),
                   jax_peak_bytes=common.peak_bytes(update)))

  on_gpu = jax.default_backend() == "gpu"
  for row in rows:
    name = row["benchmark"]
    jax_fn, side, _ = pairs[name]
    jax_s, eager_s, compiled_s = interleaved_medians(
        [jax_fn, synced(side.eager), synced(side.compiled)], sizes.repeats)
    eager_target = (2.0 if on_gpu else CPU_TARGETS[name]) if name in CPU_TARGETS else None
    row.update(jax_ms=1e3 * jax_s, torch_ms=None, speedup=None, target=None, met=None,
               compiled_ms=None, speedup_vs_compiled=None, target_vs_compiled=None,
               met_vs_compiled=None, jax_compile_s=jax_compile_s.get(name),
               torch_compile_s=torch_compile_s.get(name))
    line = f"  {name}: JAX {1e3 * jax_s:.1f} ms"
    if eager_s is not None:
      row.update(torch_ms=1e3 * eager_s, speedup=eager_s / jax_s, target=eager_target,
                 met=None if eager_target is None else eager_s / jax_s >= eager_target)
      line += f", eager PyTorch {1e3 * eager_s:.1f} ms ({eager_s / jax_s:.2f}×)"
    if compiled_s is not None:
      row.update(compiled_ms=1e3 * compiled_s, speedup_vs_compiled=compiled_s / jax_s,
                 target_vs_compiled=COMPILED_TARGET,
                 met_vs_compiled=compiled_s / jax_s >= COMPILED_TARGET)
      line += f", compiled PyTorch {1e3 * compiled_s:.1f} ms ({compiled_s / jax_s:.2f}×)"
    print(line if eager_s is not None else line + " (no PyTorch)", flush=True)
  if _PROFILE.value:
    for row in rows:
      name = row["benchmark"]
      jax_fn, side, compiled = pairs[name]
      profiles += [dict(benchmark=name, framework="jax", **r)
                   for r in jax_op_profile(jax_fn, compiled)]
      for framework, fn in (("torch", side.eager), ("torch_compiled", side.compiled)):
        if fn is not None:
          profiles += [dict(benchmark=name, framework=framework, **r)
                       for r in torch_op_profile(torch, synced(fn))]
  return rows, profiles


def interleaved_medians(fns: list[Optional[Callable]], repeats: int, rounds: int = 3
                        ) -> list[Optional[float]]:
  """Median seconds per call of each function (JAX / eager PyTorch / compiled PyTorch),
  timed in alternating blocks (`rounds` × (a warm-up call and `repeats` calls of each in
  turn)): in blocks, neither runtime's threads or allocator disturb the other's calls,
  and alternating spreads a load change on a shared machine over all. A None function
  gets None."""
  times = [[] for _ in fns]
  for _ in range(rounds):
    for fn, out in zip(fns, times):
      if fn is None:
        continue
      jax.block_until_ready(fn())
      for _ in range(repeats):
        started = time.perf_counter()
        jax.block_until_ready(fn())
        out.append(time.perf_counter() - started)
  return [statistics.median(t) if t else None for t in times]


# PyTorch ops that only re-index (views) or move data, by name.
_TORCH_DATA = {"t", "transpose", "permute", "view", "reshape", "expand", "expand_as",
               "squeeze", "unsqueeze", "as_strided", "select", "slice", "copy_", "clone",
               "contiguous", "cat", "stack", "detach", "empty", "empty_like", "zeros_like",
               "full_like", "fill_", "zero_", "to", "_to_copy", "resolve_conj", "alias"}
_TORCH_OPTIMIZER = {"_fused_adam_", "lerp_", "addcmul_", "addcdiv_", "sqrt", "_foreach_add_",
                    "_foreach_mul_", "_foreach_lerp_", "_foreach_addcmul_", "_foreach_sqrt",
                    "_foreach_div_", "_foreach_addcdiv_", "_foreach_norm", "clamp_",
                    "linalg_vector_norm", "mul_", "add_", "div_"}
_RANDOM = ("random_bits", "_bernoulli", "_uniform", "threefry", "_normal", "rng", "philox")
_HLO_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")


# torch.profiler events of compiled code: inductor's generated kernels (recorded only as
# the time of the enclosing region outside aten calls), and the wrappers that guard
# and dispatch each call.
_INDUCTOR_REGION = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph",
                    "cpp_fused", "triton_", "## ")
_COMPILED_DISPATCH = ("TorchDynamo Cache Lookup", "Pregraph bytecode", "AOTDispatcher",
                      "AOTDispatcher Runtime Wrapper")


def _torch_category(op: str) -> str:
  if op.startswith(_INDUCTOR_REGION):
    return "fused kernels (inductor)"
  if op.startswith(_COMPILED_DISPATCH):
    return "compiled-call dispatch (guards, wrappers)"
  if op in ("mm", "addmm", "bmm", "matmul", "linear", "addmv", "mv", "dot"):
    return "matmul"
  if "bernoulli" in op or "rand" in op or "dropout" in op:
    return "random (PRNG, dropout masks)"
  if op in _TORCH_OPTIMIZER:  # the in-place updates of torch.optim and grad clipping
    return "optimizer update"
  if op in _TORCH_DATA:
    return "data movement / views"
  return "elementwise/reduction"


def hlo_categories(hlo_text: str) -> dict[str, str]:
  """A coarse class of each instruction of an XLA module, from its HLO text: matmuls
  (dots, and XLA:CPU's YNNPACK/XNNPACK/oneDNN fusions around them), PRNG (its JAX op
  path names jax.random), optimizer updates (ops reading the optimizer state, or the
  parameters outside the model's forward/backward), control flow, data movement, and
  the rest (elementwise/reduction fusions)."""
  categories = {}
  for line in hlo_text.splitlines():
    match = _HLO_LINE.match(line)
    if not match:
      continue
    name, rest = match.groups()
    opcode = re.search(r"(?:^|[\s)])([a-z][\w\-]*)\(", rest)
    opcode = opcode.group(1) if opcode else ""
    op_name = re.search(r'op_name="([^"]*)"', rest)
    op_name = op_name.group(1) if op_name else ""
    in_model = "jvp(" in op_name or "transpose(" in op_name
    if opcode == "dot" or name.startswith(("ynn", "xnn", "onednn")) or (
        opcode == "custom-call" and re.search("gemm|matmul|cublas", rest)):
      category = "matmul"
    elif any(k in op_name for k in _RANDOM):
      category = "random (PRNG, dropout masks)"
    elif "opt_state" in rest or (not in_model and re.search(r"%state\S*params", rest)):
      category = "optimizer update"
    elif opcode in ("while", "conditional", "call"):
      category = "control"
    elif opcode in ("copy", "transpose", "concatenate", "slice", "dynamic-slice",
                    "dynamic-update-slice", "bitcast", "broadcast", "tuple",
                    "get-tuple-element", "parameter", "constant") or name.startswith(
                        ("copy", "transpose", "concatenate", "bitcast")):
      category = "data movement / views"
    else:
      category = "elementwise/reduction"
    categories[name] = category
  return categories


def _ranked(totals: dict[str, float], calls: int, category: Callable[[str], str]
            ) -> list[dict]:
  """Ops by decreasing time: ms per call and share of the profiled total."""
  whole = sum(totals.values()) or 1.0
  ranked = sorted(((op, t) for op, t in totals.items() if t > 0), key=lambda kv: -kv[1])
  return [dict(op=op, category=category(op), ms_per_call=t / calls / 1e6,
               share=t / whole) for op, t in ranked]


def jax_op_profile(fn: Callable, compiled, calls: int = 3) -> list[dict]:
  """Self time (summed over threads) of each XLA op of `fn`, which calls the compiled
  function `compiled`, from a jax.profiler trace: events carrying an `hlo_op`, minus
  the events nested inside them; categories from `compiled`'s HLO."""
  categories = hlo_categories(compiled.as_text())
  jax.block_until_ready(fn())
  with tempfile.TemporaryDirectory() as directory:
    jax.profiler.start_trace(directory)
    for _ in range(calls):
      jax.block_until_ready(fn())
    jax.profiler.stop_trace()
    paths = glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True)
    if not paths:
      return []
    data = jax.profiler.ProfileData.from_file(paths[0])
    totals = collections.defaultdict(float)
    for plane in data.planes:
      for line in plane.lines:
        # (start, end, op) of this thread's op events; nested ones are subtracted.
        events = []
        for event in line.events:
          op = next((v for k, v in event.stats if k == "hlo_op"), None)
          if op is not None and event.duration_ns > 0:
            events.append((event.start_ns, event.start_ns + event.duration_ns, str(op)))
        events.sort(key=lambda e: (e[0], -e[1]))
        stack = []  # enclosing events: [end, op]
        for start, end, op in events:
          while stack and stack[-1][0] <= start:
            stack.pop()
          if stack:
            totals[stack[-1][1]] -= end - start
          totals[op] += end - start
          stack.append([end, op])
  return _ranked(totals, calls, lambda op: categories.get(op, "elementwise/reduction"))


def torch_op_profile(torch, fn: Callable, calls: int = 3) -> list[dict]:
  """Self CPU time of each aten op of `fn`, from torch.profiler."""
  fn()
  with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    for _ in range(calls):
      fn()
  totals = {e.key: 1e3 * e.self_cpu_time_total for e in prof.key_averages()}  # us -> ns
  return _ranked(totals, calls, lambda op: _torch_category(op.removeprefix("aten::")))


# ---------------------------------------------------------------------------------------
# Output: CSV, PNG, markdown.


def write_csv(path: str, rows: list[dict]) -> None:
  if not rows:
    return
  columns = list(rows[0])
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, columns)
    writer.writeheader()
    for row in rows:
      writer.writerow({k: ("" if row.get(k) is None else
                           f"{row[k]:.6g}" if isinstance(row[k], float) else row[k])
                       for k in columns})


def _plt():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


CURVES = {"batch_size": ("batch size", "examples / s", "examples_per_s"),
          "labels": ("labels L", "ms per call", "ms"),
          "gbi_steps": ("GBI steps T", "ms per call", "ms"),
          "neumann_terms": ("Neumann terms K", "ms per call", "ms")}


def plot_scaling(out_dir: str, rows: list[dict]) -> list[str]:
  """One PNG per curve: time (or throughput) and peak memory against the variable."""
  plt = _plt()
  written = []
  for curve, (xlabel, ylabel, key) in CURVES.items():
    points = [r for r in rows if r["curve"] == curve]
    if not points:
      continue
    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(11, 4))
    for name in dict.fromkeys(r["row"] for r in points):
      series = [r for r in points if r["row"] == name]
      xs = [r["value"] for r in series]
      ax_time.plot(xs, [r[key] for r in series], "o-", label=name)
      ax_mem.plot(xs, [r["peak_bytes"] / 2**20 for r in series], "o-", label=name)
    for ax, label in ((ax_time, ylabel), (ax_mem, "peak memory (MiB)")):
      ax.set_xlabel(xlabel)
      ax.set_ylabel(label)
      if curve == "batch_size" or curve == "labels":
        ax.set_xscale("log")
      ax.set_yscale("log")
      ax.grid(True, which="both", alpha=0.3)
    ax_time.legend(fontsize=8)
    fig.suptitle(f"scaling with {xlabel}")
    fig.tight_layout()
    path = os.path.join(out_dir, f"scaling_{curve}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)
  return written


def plot_methods(out_dir: str, rows: list[dict]) -> str:
  plt = _plt()
  fig, ax = plt.subplots(figsize=(11, 4.5))
  names = [r["method"] for r in rows]
  xs = np.arange(len(rows))
  ax.bar(xs - 0.2, [r["train_examples_per_s"] for r in rows], 0.4, label="train examples/s")
  ax.bar(xs + 0.2, [r["inference_examples_per_s"] for r in rows], 0.4,
         label="inference examples/s")
  ax.set_xticks(xs, names, rotation=30, ha="right")
  ax.set_yscale("log")
  ax.set_ylabel("examples / s")
  ax.legend()
  ax.grid(True, axis="y", which="both", alpha=0.3)
  fig.tight_layout()
  path = os.path.join(out_dir, "methods.png")
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def plot_torch(out_dir: str, rows: list[dict]) -> str:
  """Bars of JAX, eager and compiled PyTorch ms per row, with the JAX speedups."""
  plt = _plt()
  fig, ax = plt.subplots(figsize=(11, 4.5))
  xs = np.arange(len(rows))
  series = [("jax_ms", "JAX (jit)"), ("torch_ms", "PyTorch (eager)"),
            ("compiled_ms", "PyTorch (torch.compile)")]
  for i, (key, label) in enumerate(series):
    ax.bar(xs + (i - 1) * 0.27, [r[key] or 0.0 for r in rows], 0.27, label=label)
  for x, r in zip(xs, rows):
    top = max(r[k] or 0.0 for k, _ in series)
    text = f"{r['speedup']:.2f}× eager"
    if r["speedup_vs_compiled"] is not None:
      text += f"\n{r['speedup_vs_compiled']:.2f}× compiled"
    ax.annotate(text, (x, top), ha="center", va="bottom", fontsize=7)
  ax.set_xticks(xs, [r["benchmark"] for r in rows], rotation=15, ha="right")
  ax.set_ylabel("ms per call")
  ax.set_yscale("log")
  ax.legend(fontsize=8)
  ax.grid(True, axis="y", alpha=0.3)
  fig.tight_layout()
  path = os.path.join(out_dir, "jax_vs_torch.png")
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def _mib(b) -> str:
  return "" if b is None else f"{b / 2**20:.1f}"


def _category_shares(profiles: list[dict], name: str, framework: str
                     ) -> collections.Counter:
  shares = collections.Counter()
  for p in profiles:
    if p["benchmark"] == name and p["framework"] == framework:
      shares[p["category"]] += p["share"]
  return shares


def _verdicts(torch_rows: list[dict], profiles: list[dict]) -> list[str]:
  """For each row with a target or where JAX is slower: the ratios against their
  targets; where one is missed, why: each framework's time by op class (from the
  profiles), and the matmul time of each, which bounds the speedup (Amdahl: the
  PyTorch time over JAX's matmul time alone, were everything else free)."""
  lines = ["", "Targets (and every row where JAX is slower):", ""]
  top = lambda c: ", ".join(f"{k} {100 * v:.0f}%" for k, v in c.most_common(4))
  for r in torch_rows:
    name = r["benchmark"]
    checks = [("eager", r["speedup"], r["target"], r["met"], r["torch_ms"]),
              ("compiled", r["speedup_vs_compiled"], r["target_vs_compiled"],
               r["met_vs_compiled"], r["compiled_ms"])]
    parts, missed = [], []
    for label, speedup, target, met, other_ms in checks:
      if speedup is None:
        continue
      if target is None:
        parts.append(f"{speedup:.2f}× {label} (no target)")
      else:
        parts.append(f"{speedup:.2f}× {label} against ≥ {target:g}×: "
                     f"{'met' if met else '**missed**'}")
      if (target is not None and not met) or speedup < 1:
        missed.append((label, other_ms))
    if not missed and r["target"] is None and r["target_vs_compiled"] is None:
      continue
    verdict = f"- {name}: " + "; ".join(parts) + "."
    jax_shares = _category_shares(profiles, name, "jax")
    if missed and jax_shares:
      jax_matmul = jax_shares["matmul"] * r["jax_ms"]
      verdict += f" JAX time by op class: {top(jax_shares)} (matmuls ~{jax_matmul:.1f} ms)"
      for label, other_ms in missed:
        framework = "torch" if label == "eager" else "torch_compiled"
        shares = _category_shares(profiles, name, framework)
        if not shares:
          continue
        verdict += (f"; {label} PyTorch: {top(shares)} (matmuls "
                    f"~{shares['matmul'] * other_ms:.1f} ms; with every non-matmul op of "
                    f"JAX free the speedup would be at most "
                    f"{other_ms / max(jax_matmul, 1e-9):.2f}×)")
      verdict += "."
    lines.append(verdict)
  return lines


def summary_markdown(sizes, methods, scaling, torch_rows, profiles, torch_version, notes,
                     bf16=()):
  lines = []
  with_torch = any(r["torch_ms"] is not None for r in torch_rows)
  if torch_rows and not with_torch:
    lines += ["## GBI vs feed-forward (JAX only: PyTorch is not installed)", "",
              "| benchmark | what | rows | JAX ms | JAX peak MiB |", "|---|---|---|---|---|"]
    lines += [f"| {r['benchmark']} | {r['what']} | {r['rows']} | {r['jax_ms']:.1f} | "
              f"{_mib(r['jax_peak_bytes'])} |" for r in torch_rows]
    by = {r["benchmark"]: r for r in torch_rows}
    lines += ["", ", ".join(f"{name} / feed-forward: "
                            f"{by[name]['jax_ms'] / by['feed_forward']['jax_ms']:.2f}×"
                            for name in ("gbi20_spen", "gbi20_seal")) + "."]
  if with_torch:
    with_compiled = any(r["compiled_ms"] is not None for r in torch_rows)
    lines += ["## JAX vs PyTorch (eager and torch.compile)", "",
              f"Same shapes, same weights, one process; each row timed in alternating "
              f"blocks (3 × (a warm-up call and the repeats of each of JAX, eager "
              f"PyTorch, compiled PyTorch)); PyTorch {torch_version}. Speedup = PyTorch "
              f"time / JAX time (above 1: JAX is faster). Compile s: JAX's "
              f"`lower().compile()` / the `torch.compile`d function's first call "
              f"(tracing, code generation, C++ compilation and one run; the whole GBI "
              f"rows: the feed-forward's plus the loop's), excluded from the times.", "",
              "| benchmark | what | rows | JAX ms | eager ms | compiled ms | vs eager | "
              "vs compiled | compile s (JAX / compiled) | targets | met |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v, f: "" if v is None else f.format(v)
    for r in torch_rows:
      targets = [f"≥ {t:g}× {label}" for t, label in ((r["target"], "eager"),
                                                        (r["target_vs_compiled"],
                                                         "compiled")) if t is not None]
      met = [m for m in (r["met"], r["met_vs_compiled"]) if m is not None]
      met = "" if not met else ("yes" if all(met) else "**no**")
      lines.append(
          f"| {r['benchmark']} | {r['what']} | {r['rows']} | {r['jax_ms']:.1f} | "
          f"{r['torch_ms']:.1f} | {fmt(r['compiled_ms'], '{:.1f}')} | "
          f"{r['speedup']:.2f}× | {fmt(r['speedup_vs_compiled'], '{:.2f}×')} | "
          f"{fmt(r['jax_compile_s'], '{:.1f}')} / {fmt(r['torch_compile_s'], '{:.1f}')} | "
          f"{', '.join(targets)} | {met} |")
    if not with_compiled:
      lines += ["", "No compiled PyTorch column in this run (--notorch_compile)."]
    by = {r["benchmark"]: r for r in torch_rows}
    rate = lambda r, key: ("" if r[key] is None else
                           f", {key.split('_')[0].replace('torch', 'eager')} "
                           f"{r['gflop_dense'] / r[key] * 1e3:.0f} GFLOP/s")
    lines += ["", "Dense layers (analytic FLOPs of the networks' hidden layers and heads) "
              "per second of wall time: " + "; ".join(
                  f"{r['benchmark']} {r['gflop_dense']:.2f} GFLOP: JAX "
                  f"{r['gflop_dense'] / r['jax_ms'] * 1e3:.0f} GFLOP/s"
                  f"{rate(r, 'torch_ms')}{rate(r, 'compiled_ms')}"
                  for r in torch_rows if r["gflop_dense"]) + ". The feed-forward row is "
              "almost only these matmuls: it is each framework's matmul speed here."]
    lines += _verdicts(torch_rows, profiles)
    lines += ["", "## GBI vs feed-forward", "",
              "| | JAX | eager PyTorch | compiled PyTorch |", "|---|---|---|---|"]
    ff = by["feed_forward"]
    ratio = lambda name, key: ("" if by[name][key] is None or ff[key] is None else
                               f"{by[name][key] / ff[key]:.2f}×")
    for name in ("gbi20_spen", "gbi20_seal"):
      lines.append(f"| {name} / feed-forward (time ratio) | {ratio(name, 'jax_ms')} | "
                   f"{ratio(name, 'torch_ms')} | {ratio(name, 'compiled_ms')} |")
    lines.append("")
  if methods:
    by_method = {r["method"]: r for r in methods}
    if "mlp" in by_method:
      lines += ["", "Inference of each method against the MLP's feed-forward pass (methods "
                "table, eval batches):", ""]
      base = by_method["mlp"]["inference_ms"]
      lines.append(", ".join(f"{r['method']} {r['inference_ms'] / base:.2f}×"
                             for r in methods) + ".")
    lines += ["", "## Every method (train step and inference)", "",
              "| method | stage objective | train batch | train ms | train examples/s | "
              "train peak MiB | inference ms (all test rows) | inference examples/s | "
              "inference peak MiB |", "|---|---|---|---|---|---|---|---|---|"]
    for r in methods:
      lines.append(f"| {r['method']} | {r['stage_method']} | {r['train_batch']} | "
                   f"{r['train_ms']:.1f} | {r['train_examples_per_s']:.0f} | "
                   f"{_mib(r['train_peak_bytes'])} | {r['inference_ms']:.1f} | "
                   f"{r['inference_examples_per_s']:.0f} | {_mib(r['inference_peak_bytes'])} |")
    lines += ["", "![methods](methods.png)"]
  if scaling:
    lines += ["", "## Scaling", ""]
    for curve, (xlabel, _, _) in CURVES.items():
      points = [r for r in scaling if r["curve"] == curve]
      if not points:
        continue
      values = list(dict.fromkeys(r["value"] for r in points))
      lines += [f"### {xlabel}", "", "| row | " + " | ".join(str(v) for v in values) + " |",
                "|---|" + "---|" * len(values)]
      for name in dict.fromkeys(r["row"] for r in points):
        cells = {r["value"]: r for r in points if r["row"] == name}
        lines.append(f"| {name} (ms / peak MiB) | " + " | ".join(
            f"{cells[v]['ms']:.1f} / {_mib(cells[v]['peak_bytes'])}" if v in cells else ""
            for v in values) + " |")
      lines += ["", f"![{curve}](scaling_{curve}.png)", ""]
  if bf16:
    lines += ["", "## bfloat16 compute against float32", "",
              "`train.compute_dtype=bfloat16`: the networks' matmuls and activations in "
              "bfloat16, parameters, optimizer state, GBI iterates and losses float32; "
              "each row measured in float32, then bfloat16, in this run. Speed-up = "
              "float32 time / bfloat16 time; memory = bfloat16 peak / float32 peak. "
              "XLA:CPU computes bfloat16 dots in float32 (with conversions), so on CPU "
              "this is no speed-up; it is meant for GPUs and TPUs.", "",
              "| row | rows | float32 ms | bfloat16 ms | speed-up | float32 peak MiB | "
              "bfloat16 peak MiB | memory |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['row']} | {r['rows']} | {r['float32_ms']:.1f} | {r['bfloat16_ms']:.1f} | "
              f"{r['speedup']:.2f}× | {_mib(r['float32_peak_bytes'])} | "
              f"{_mib(r['bfloat16_peak_bytes'])} | {r['memory_ratio']:.2f}× |" for r in bf16]
    lines.append("")
  if profiles:
    lines += ["## Where the time goes (op profiles)", "",
              "Self time per call of each op (JAX: XLA ops from jax.profiler, summed over "
              "the threads that ran them, so up to threads × wall time; PyTorch: aten ops "
              "from torch.profiler, on the calling thread), as shares of each framework's "
              "profiled total, by category and the top ops (all ops: profile.csv):", ""]
    for name in dict.fromkeys(p["benchmark"] for p in profiles):
      lines += [f"### {name}", ""]
      categories = sorted({p["category"] for p in profiles if p["benchmark"] == name})
      lines += ["| framework | " + " | ".join(categories) + " |",
                "|---|" + "---|" * len(categories)]
      frameworks = list(dict.fromkeys(p["framework"] for p in profiles))
      for framework in frameworks:
        ops = [p for p in profiles if p["benchmark"] == name and p["framework"] == framework]
        shares = collections.Counter()
        for p in ops:
          shares[p["category"]] += p["share"]
        lines.append(f"| {framework} | " + " | ".join(
            f"{100 * shares[c]:.0f}%" for c in categories) + " |")
      lines += ["", "| framework | op | category | ms / call | share |",
                "|---|---|---|---|---|"]
      for framework in frameworks:
        ops = [p for p in profiles if p["benchmark"] == name and p["framework"] == framework]
        for p in ops[:6]:
          lines.append(f"| {framework} | `{p['op']}` | {p['category']} | "
                       f"{p['ms_per_call']:.2f} | {100 * p['share']:.0f}% |")
      lines.append("")
  lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
  return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))  # one blank line between blocks


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  unknown = set(_SECTIONS.value) - set(SECTIONS)
  if unknown:
    raise app.UsageError(f"unknown sections {sorted(unknown)}; expected some of {SECTIONS}")
  sizes = _sizes()
  out_dir = _OUT_DIR.value
  os.makedirs(out_dir, exist_ok=True)
  started, load_before = time.perf_counter(), os.getloadavg()
  other_load = common.OtherLoad()
  methods, scaling, torch_rows, profiles, bf16 = [], [], [], [], []
  notes = []
  torch, ref = _torch()
  if "methods" in _SECTIONS.value:
    print("methods:", flush=True)
    methods = methods_section(sizes, _METHODS.value)
    write_csv(os.path.join(out_dir, "methods.csv"), methods)
    plot_methods(out_dir, methods)
  if "bf16" in _SECTIONS.value:
    print("bfloat16 against float32:", flush=True)
    bf16 = bf16_section(sizes)
    write_csv(os.path.join(out_dir, "bf16.csv"), bf16)
  if "scaling" in _SECTIONS.value:
    print("scaling:", flush=True)
    scaling = scaling_section(sizes)
    write_csv(os.path.join(out_dir, "scaling.csv"), scaling)
    plot_scaling(out_dir, scaling)
  if "torch" in _SECTIONS.value:
    if torch is None:
      message = ("PyTorch is not installed: the JAX side of the JAX vs PyTorch section ran "
                 f"alone. Install PyTorch with `{TORCH_INSTALL}`.")
      print(message, flush=True)
      notes.append(message)
      print("JAX (GBI vs feed-forward):", flush=True)
    else:
      print("JAX vs PyTorch:", flush=True)
    torch_rows, profiles = torch_section(sizes, torch, ref)
    write_csv(os.path.join(out_dir, "torch.csv" if torch else "gbi_vs_feed_forward.csv"),
              torch_rows)
    write_csv(os.path.join(out_dir, "profile.csv"), profiles)
    if torch is not None:
      plot_torch(out_dir, torch_rows)
  elapsed, load_after = time.perf_counter() - started, os.getloadavg()
  other_share = other_load.describe()
  torch_note = ""
  if torch is not None and torch_rows:
    torch_note = (f", PyTorch {torch.__version__} with {torch.get_num_threads()} threads and "
                  f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")
  device_note = ("; device_peak_bytes: the allocator's peak so far"
                 if jax.default_backend() != "cpu" else "")
  header = (
      f"Shapes: bibtex's ({sizes.num_test} test rows, {sizes.num_features} binary features, "
      f"{sizes.num_labels} labels), random arrays, fresh parameters"
      f"{' (--quick: tiny networks; numbers meaningless)' if sizes.quick else ''}. "
      f"Timed on {common.machine_description()}{torch_note}; median of {sizes.repeats} "
      f"calls (JAX / eager / compiled PyTorch: of 3 blocks of {sizes.repeats} each), compile "
      f"excluded. Load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
      f"(other jobs share the machine when it exceeds the CPU count; a one-minute "
      f"average, so it still counts jobs paused just before)"
      f"{'; ' + other_share if other_share else ''}; whole run "
      f"{elapsed / 60:.1f} min. Peak "
      f"memory: XLA memory_analysis() of each compiled function (arguments + outputs + "
      f"temporaries − donated aliases){device_note}.\n")
  if torch is not None and torch_rows:
    notes.append(
        "The PyTorch reference is eager and idiomatic but not naive: F(x) computed once "
        "for GBI, the loss-net frozen (no parameter gradients) during the task-net step, "
        "fused Adam kernels (faster than the default per-tensor Adam on CPU), and "
        "OMP_WAIT_POLICY=PASSIVE (--torch_omp_passive; with spinning OpenMP threads and "
        "other jobs on the cores, its 20-step loop took 586 ms instead of 93 ms). JAX runs "
        "the library's jitted functions: `gbi_scan` of `energynets.inference.gbi` and the "
        "trainer's donated train step (`energynets.train.build_train_step`).")
  if torch is not None and torch_rows and _TORCH_COMPILE.value:
    notes.append(
        f"Compiled PyTorch: `torch.compile(mode={_TORCH_COMPILE_MODE.value!r})` of the "
        "same computations written as functions of tensors, so that each compiles to one "
        "graph: the GBI loop with ∇_y E by `torch.func.grad` (Python loops unrolled by "
        "the tracer), the feed-forward pass, and the whole SEAL and E2E updates "
        "(`torch.func.grad_and_value`, nested for E2E; Adam and gradient clipping "
        "written out, as torch.optim computes them; noise and dropout drawn inside). "
        "The eager E2E reference differentiates the unroll with autograd "
        "(`create_graph=True`) and fused `torch.optim.Adam`. Compile time is the "
        "compiled function's first call with an empty inductor cache (a fresh "
        "TORCHINDUCTOR_CACHE_DIR unless it is set).")
  notes.append("GBI at test for spen_ssvm / dvn (methods table) runs to its tolerances "
               "or max_steps on a fresh energy; trained energies converge in other step "
               "counts (results/gbi_bibtex.md: mean 34.6 of at most 100).")
  body = summary_markdown(sizes, methods, scaling, torch_rows, profiles,
                          getattr(torch, "__version__", None), notes, bf16)
  common.write_report(os.path.join(out_dir, "summary.md"), "benchmarks.suite",
                      header + "\n" + body)
  print(f"wrote {out_dir} in {elapsed / 60:.1f} min", flush=True)


if __name__ == "__main__":
  app.run(main)

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

This module is the command line (flags, `main`, the summary's header and notes); what
each section measures is a module of its own: `suite_methods` (every method),
`suite_curves` (scaling curves), `suite_bf16` (bfloat16), `suite_torch` (JAX vs
PyTorch), `suite_profiles` (op profiles), on the builders and timers of
`suite_measure`.

  python -m benchmarks.suite --out_dir=results/suite
  python -m benchmarks.suite --quick --out_dir=/tmp/suite      # seconds; what the tests run
"""

import os
import re
import time

from absl import app
from absl import flags
import jax

from benchmarks import RESULTS_DIR
from benchmarks import common
from benchmarks import suite_bf16
from benchmarks import suite_curves
from benchmarks import suite_methods
from benchmarks import suite_profiles
from benchmarks import suite_torch
from benchmarks.suite_measure import Sizes
from benchmarks.suite_measure import write_csv
from energynets.train import quiet_library_logs
from experiments import cli

DEFAULT_METHODS = (
  "br",
  "mlp",
  "dmf",
  "spen_ssvm",
  "spen_gbi",
  "e2e",
  "infnet",
  "dvn",
  "seal_dynamic",
  "seal_static",
  "seal_ranking",
  "implicit",
)
SECTIONS = ("methods", "scaling", "torch", "bf16")

_OUT_DIR = flags.DEFINE_string(
  "out_dir", os.path.join(RESULTS_DIR, "suite"), "where the CSVs, PNGs and summary.md go"
)
_QUICK = flags.DEFINE_bool(
  "quick",
  False,
  "tiny shapes and networks, one repeat: a smoke "
  "test of the whole pipeline in seconds (numbers meaningless)",
)
_METHODS = flags.DEFINE_list(
  "methods", list(DEFAULT_METHODS), "config[:key=value...] per methods-table row"
)
_SECTIONS = flags.DEFINE_list("sections", list(SECTIONS), f"which of {SECTIONS} to run")
_REPEATS = flags.DEFINE_integer("repeats", 5, "timed calls per function (median)")
_NUM_TEST = flags.DEFINE_integer("num_test", 2515, "test rows (bibtex)")
_NUM_FEATURES = flags.DEFINE_integer("num_features", 1836, "input features (bibtex)")
_NUM_LABELS = flags.DEFINE_integer("num_labels", 159, "labels (bibtex)")
_BATCH_SIZES = flags.DEFINE_list("batch_sizes", ["32", "128", "512", "2048"], "batch-size curve")
_LABEL_COUNTS = flags.DEFINE_list("label_counts", ["50", "159", "500", "1000"], "label-count curve")
_GBI_STEPS = flags.DEFINE_list("gbi_steps", ["5", "10", "20", "40", "80"], "GBI-steps curve")
_NEUMANN_TERMS = flags.DEFINE_list(
  "neumann_terms", ["0", "5", "10", "20"], "Neumann-terms curve (implicit training)"
)
_PROFILE = flags.DEFINE_bool("profile", True, "profile each JAX / PyTorch pair by op")
_TORCH_OMP_PASSIVE = flags.DEFINE_bool(
  "torch_omp_passive",
  True,
  "OMP_WAIT_POLICY=PASSIVE for PyTorch's OpenMP threads "
  "(unless set): the fair setting on a machine shared with other jobs",
)
_TORCH_COMPILE = flags.DEFINE_bool(
  "torch_compile", True, "also time `torch.compile`d PyTorch (compile time reported separately)"
)
_TORCH_COMPILE_MODE = flags.DEFINE_string(
  "torch_compile_mode",
  "default",
  "torch.compile's mode ('default', 'reduce-overhead', 'max-autotune', ...)",
)
_TORCH_THREADS = flags.DEFINE_integer(
  "torch_threads", 0, "torch.set_num_threads (0: torch's default)"
)


def _sizes() -> Sizes:
  ints = lambda values: tuple(int(v) for v in values)
  if _QUICK.value:
    return Sizes(48, 40, 12, (16,), (12,), (2,), (1,), 1, True)
  return Sizes(
    _NUM_TEST.value,
    _NUM_FEATURES.value,
    _NUM_LABELS.value,
    ints(_BATCH_SIZES.value),
    ints(_LABEL_COUNTS.value),
    ints(_GBI_STEPS.value),
    ints(_NEUMANN_TERMS.value),
    _REPEATS.value,
    False,
  )


def summary_markdown(sizes, methods, scaling, torch_rows, profiles, torch_version, notes, bf16=()):
  """The summary's body: each section's tables in turn, then the notes."""
  del sizes  # the header describes them
  lines = (
    suite_torch.torch_markdown(torch_rows, profiles, torch_version)
    + suite_methods.methods_markdown(methods)
    + suite_curves.scaling_markdown(scaling)
    + suite_bf16.bf16_markdown(bf16)
    + suite_profiles.profiles_markdown(profiles)
  )
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
  settings = suite_torch.TorchOptions(
    _TORCH_OMP_PASSIVE.value,
    _TORCH_COMPILE.value,
    _TORCH_COMPILE_MODE.value,
    _TORCH_THREADS.value,
    _PROFILE.value,
  )
  torch, ref = suite_torch.load_torch(settings.omp_passive)
  if "methods" in _SECTIONS.value:
    print("methods:", flush=True)
    methods = suite_methods.methods_section(sizes, _METHODS.value)
    write_csv(os.path.join(out_dir, "methods.csv"), methods)
    suite_methods.plot_methods(out_dir, methods)
  if "bf16" in _SECTIONS.value:
    print("bfloat16 against float32:", flush=True)
    bf16 = suite_bf16.bf16_section(sizes)
    write_csv(os.path.join(out_dir, "bf16.csv"), bf16)
  if "scaling" in _SECTIONS.value:
    print("scaling:", flush=True)
    scaling = suite_curves.scaling_section(sizes)
    write_csv(os.path.join(out_dir, "scaling.csv"), scaling)
    suite_curves.plot_scaling(out_dir, scaling)
  if "torch" in _SECTIONS.value:
    if torch is None:
      message = (
        "PyTorch is not installed: the JAX side of the JAX vs PyTorch section ran "
        f"alone. Install PyTorch with `{suite_torch.TORCH_INSTALL}`."
      )
      print(message, flush=True)
      notes.append(message)
      print("JAX (GBI vs feed-forward):", flush=True)
    else:
      print("JAX vs PyTorch:", flush=True)
    torch_rows, profiles = suite_torch.torch_section(sizes, torch, ref, settings)
    write_csv(
      os.path.join(out_dir, "torch.csv" if torch else "gbi_vs_feed_forward.csv"), torch_rows
    )
    write_csv(os.path.join(out_dir, "profile.csv"), profiles)
    if torch is not None:
      suite_torch.plot_torch(out_dir, torch_rows)
  elapsed, load_after = time.perf_counter() - started, os.getloadavg()
  other_share = other_load.describe()
  torch_note = ""
  if torch is not None and torch_rows:
    torch_note = (
      f", PyTorch {torch.__version__} with {torch.get_num_threads()} threads and "
      f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}"
    )
  device_note = (
    "; device_peak_bytes: the allocator's peak so far" if jax.default_backend() != "cpu" else ""
  )
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
    f"temporaries − donated aliases){device_note}.\n"
  )
  if torch is not None and torch_rows:
    notes.append(
      "The PyTorch reference is eager and idiomatic but not naive: F(x) computed once "
      "for GBI, the loss-net frozen (no parameter gradients) during the task-net step, "
      "fused Adam kernels (faster than the default per-tensor Adam on CPU), and "
      "OMP_WAIT_POLICY=PASSIVE (--torch_omp_passive; with spinning OpenMP threads and "
      "other jobs on the cores, its 20-step loop took 586 ms instead of 93 ms). JAX runs "
      "the library's jitted functions: `gbi_scan` of `energynets.inference.gbi` and the "
      "trainer's donated train step (`energynets.train.build_train_step`)."
    )
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
      "TORCHINDUCTOR_CACHE_DIR unless it is set)."
    )
  notes.append(
    "GBI at test for spen_ssvm / dvn (methods table) runs to its tolerances "
    "or max_steps on a fresh energy; trained energies converge in other step "
    "counts (results/spen/gbi_bibtex.md: mean 34.6 of at most 100)."
  )
  body = summary_markdown(
    sizes, methods, scaling, torch_rows, profiles, getattr(torch, "__version__", None), notes, bf16
  )
  common.write_report(os.path.join(out_dir, "summary.md"), "benchmarks.suite", header + "\n" + body)
  print(f"wrote {out_dir} in {elapsed / 60:.1f} min", flush=True)


if __name__ == "__main__":
  cli.run(main)

"""The suite's JAX vs PyTorch section: the same computations timed in JAX, eager PyTorch
and `torch.compile`d PyTorch, from the same weights (`torch.csv`, `jax_vs_torch.png`;
`benchmarks.suite`); without PyTorch, the JAX side alone."""

import atexit
from collections.abc import Callable
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any
from typing import NamedTuple

import jax
import numpy as np

from benchmarks import common
from benchmarks.suite_measure import Sizes
from benchmarks.suite_measure import compile_fn
from benchmarks.suite_measure import donated_step
from benchmarks.suite_measure import e2e_step_gflop
from benchmarks.suite_measure import feature_gflop
from benchmarks.suite_measure import method_config
from benchmarks.suite_measure import mib
from benchmarks.suite_measure import pyplot
from benchmarks.suite_measure import seal_step_gflop
from benchmarks.suite_measure import spen_gbi_fn
from benchmarks.suite_profiles import jax_op_profile
from benchmarks.suite_profiles import torch_op_profile
from benchmarks.suite_profiles import verdicts
from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from experiments import choices
from experiments.choices import gbi as gbi_choices
from experiments.choices import networks as network_choices

# JAX / eager PyTorch targets (speedup = PyTorch time / JAX time) on CPU: no slower on
# the GBI loop, 2× on the SEAL-dynamic step; on a GPU 2× on these three.
CPU_TARGETS = {
  "gbi20_spen_loop_only": 1.0,
  "gbi20_seal_loop_only": 1.0,
  "seal_dynamic_nce_step": 2.0,
}
# JAX / compiled PyTorch (`torch.compile`): no slower on any row.
COMPILED_TARGET = 1.0
TORCH_INSTALL = 'pip install -e ".[bench]"  (or any torch build: the CPU-only wheel is enough)'


class TorchOptions(NamedTuple):
  """How the PyTorch side runs (the suite's --torch_* and --profile flags)."""

  omp_passive: bool = True  # OMP_WAIT_POLICY=PASSIVE unless set
  compile: bool = True  # also time `torch.compile`d PyTorch
  compile_mode: str = "default"  # torch.compile's mode
  threads: int = 0  # torch.set_num_threads (0: torch's default)
  profile: bool = True  # profile each JAX / PyTorch pair by op


def load_torch(omp_passive: bool = True):
  """(torch, benchmarks.torch_reference), or (None, None) when torch is missing;
  `omp_passive`: OMP_WAIT_POLICY=PASSIVE (unless set) before torch loads."""
  if omp_passive and "torch" not in sys.modules:
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


class TorchSide(NamedTuple):
  """The PyTorch side of a benchmark row: eager and compiled callables (either None)."""

  eager: Callable | None
  compiled: Callable | None


def timed_first_call(fn: Callable, sync: Callable[[], None]) -> float:
  """Seconds of `fn`'s first call (for a `torch.compile`d function: tracing, inductor's
  code generation and C++/Triton compilation, and one run)."""
  started = time.perf_counter()
  fn()
  sync()
  return time.perf_counter() - started


def torch_section(
  sizes: Sizes, torch, ref, settings: TorchOptions = TorchOptions()
) -> tuple[list[dict], list[dict]]:
  """Rows of torch.csv and of profile.csv; without torch (None) the JAX side alone.

  Each row times JAX (jit), eager PyTorch and `torch.compile`d PyTorch on the same
  shapes and weights, in alternating blocks (`interleaved_medians`); compilation is
  timed separately (JAX: `lower().compile()`; PyTorch: the compiled function's first
  call)."""
  device = "cpu"
  if torch is not None:
    if settings.threads:
      torch.set_num_threads(settings.threads)
    torch.manual_seed(0)
    if jax.default_backend() == "gpu" and torch.cuda.is_available():
      device = "cuda"
  sync = torch.cuda.synchronize if device == "cuda" else lambda: None
  synced = lambda fn: None if fn is None else (lambda: (fn(), sync())[0])
  compile_options = dict(mode=settings.compile_mode)
  use_compile = torch is not None and settings.compile
  to_torch = lambda a: torch.from_numpy(np.array(a)).to(device)
  rs = np.random.RandomState(0)
  x = common.random_multilabel_batch(rs, sizes.num_test, sizes.num_features, sizes.num_labels)["x"]
  x_torch = to_torch(x) if torch is not None else None
  rows: list[dict[str, Any]] = []
  profiles: list[dict] = []
  # row -> (the JAX call, the PyTorch side, the compiled JAX program)
  pairs: dict[str, tuple[Callable[[], Any], TorchSide, Any]] = {}
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
  variants = {
    "gbi20_spen": {},
    "gbi20_seal": dict(method="projected", optimizer="adam", learning_rate=0.05),
  }
  torch_encode = None
  for name, options in variants.items():
    gbi, params, energy, config = spen_gbi_fn(sizes.num_labels, num_steps, sizes, **options)
    gflop = feature_gflop(energy, sizes.num_features, sizes.num_test)
    torch_energy = ref and ref.load_flax_spen(
      ref.SPENEnergy(
        sizes.num_features,
        sizes.num_labels,
        energy.feature_hidden,
        choices.name_of("activation", network_choices.ACTIVATIONS, energy.feature_activation),
        energy.num_measurements,
        choices.name_of("activation", network_choices.ACTIVATIONS, energy.activation),
      ),
      params,
    ).to(device)
    names = gbi_choices.gbi_block(config)
    torch_options = dict(
      num_steps=num_steps,
      method=names["method"],
      optimizer=names["optimizer"],
      learning_rate=config.learning_rate,
      momentum=names.get("momentum", 0.95),
    )
    encode_fn = lambda p, x_, e=energy: protocol.as_energy(e).encode(p, x_)
    compiled_encode = jax_compiled("feed_forward", encode_fn, params, x)
    encoding = compiled_encode(params, x)
    compiled = jax_compiled(name, gbi, params, x)
    loop = jax_compiled(
      f"{name}_loop_only",
      lambda p, enc, c=config, e=energy: gbi_lib.gbi_scan(
        protocol.as_energy(e).energy,
        p,
        enc,
        # The encoded module's starts read the encoding alone, not x.
        protocol.as_energy(e).start(enc, None, "uniform"),  # type: ignore[arg-type]
        protocol.BOX,
        c,
      )[0],
      params,
      encoding,
    )
    ff = whole = loop_only = TorchSide(None, None)
    if torch is not None:
      with torch.no_grad():
        logits_torch = torch_energy.encode(x_torch)

      def eager_ff(e=torch_energy):
        with torch.no_grad():
          return e.encode(x_torch)

      eager_gbi = functools.partial(ref.gbi, torch_energy, x_torch, **torch_options)
      eager_loop = functools.partial(
        ref.gbi, torch_energy, x_torch, logits=logits_torch, **torch_options
      )
      compiled_ff: Callable | None = None
      compiled_gbi: Callable | None = None
      compiled_loop: Callable | None = None
      if use_compile:
        if torch_encode is None:  # both variants share the network
          torch_encode = ref.compiled_encode(torch_energy, **compile_options)

          def compiled_ff_call(c=torch_encode):
            with torch.no_grad():
              return c(x_torch)

          compiled_ff = compiled_ff_call
          torch_compile_s["feed_forward"] = timed_first_call(compiled_ff_call, sync)
        loop_fn = ref.compiled_gbi_loop(
          torch_energy, compile_options=compile_options, **torch_options
        )

        def compiled_loop_call(f=loop_fn, lg=logits_torch):
          with torch.no_grad():
            return f(lg)

        def compiled_gbi_call(f=loop_fn, c=torch_encode):
          with torch.no_grad():
            return f(c(x_torch))

        compiled_loop, compiled_gbi = compiled_loop_call, compiled_gbi_call
        torch_compile_s[f"{name}_loop_only"] = timed_first_call(compiled_loop_call, sync)
        torch_compile_s[name] = (
          torch_compile_s["feed_forward"] + torch_compile_s[f"{name}_loop_only"]
        )
      ff = TorchSide(eager_ff, compiled_ff)
      whole = TorchSide(eager_gbi, compiled_gbi)
      loop_only = TorchSide(eager_loop, compiled_loop)
    if not pairs:
      pairs["feed_forward"] = (functools.partial(compiled_encode, params, x), ff, compiled_encode)
      rows.append(
        dict(
          benchmark="feed_forward",
          what="F(x) and the local logits (the MLP's prediction)",
          rows=sizes.num_test,
          gflop_dense=gflop,
          jax_peak_bytes=common.peak_bytes(compiled_encode),
        )
      )
    steps = f"{num_steps} GBI steps ({names['method']}, {names['optimizer']})"
    pairs[name] = (functools.partial(compiled, params, x), whole, compiled)
    rows.append(
      dict(
        benchmark=name,
        what=f"F(x) + {steps}",
        rows=sizes.num_test,
        gflop_dense=gflop,
        jax_peak_bytes=common.peak_bytes(compiled),
      )
    )
    pairs[f"{name}_loop_only"] = (functools.partial(loop, params, encoding), loop_only, loop)
    rows.append(
      dict(
        benchmark=f"{name}_loop_only",
        what=f"{steps} from a precomputed F(x)",
        rows=sizes.num_test,
        gflop_dense=0.0,
        jax_peak_bytes=common.peak_bytes(loop),
      )
    )

  # One SEAL-dynamic update with the NCE loss-net objective, at the config's batch.
  stage, stages = method_config("seal_dynamic", sizes)
  shapes = common.MultilabelShapes(sizes.num_features, sizes.num_labels)
  batch = common.random_multilabel_batch(
    rs, stage.train.batch_size, sizes.num_features, sizes.num_labels
  )
  objective, state = common.build_state(stages, shapes, batch)
  started = time.perf_counter()
  update, run_update = donated_step(objective, state, batch)
  jax_compile_s["seal_dynamic_nce_step"] = time.perf_counter() - started
  e, s = stage.energy, stage.seal
  seal_side = TorchSide(None, None)
  if torch is not None:
    task_net = ref.load_flax_mlp(
      ref.MLP(
        sizes.num_features,
        stage.model.hidden,
        sizes.num_labels,
        stage.model.activation,
        stage.model.dropout,
        stage.model.input_dropout,
      ),
      state["task_net"].params,
    ).to(device)
    loss_net = _torch_spen(ref, sizes, e, state["loss_net"].params, device)
    seal_options = dict(
      num_samples=s.num_samples,
      energy_weight=s.energy_weight,
      bce_weight=s.bce_weight,
      task_learning_rate=stage.optimizer.learning_rate,
      loss_learning_rate=stage.loss_net_optimizer.learning_rate,
      task_clip_norm=stage.optimizer.clip_norm,
    )
    compiled_seal = (
      ref.SealDynamicFunctional(
        task_net, loss_net, compile=True, compile_options=compile_options, **seal_options
      )
      if use_compile
      else None
    )  # copies the weights before any eager step
    seal = ref.SealDynamic(task_net, loss_net, **seal_options)
    batch_torch = {k: to_torch(v) for k, v in batch.items()}
    seal_side = TorchSide(
      lambda: seal.step(batch_torch["x"], batch_torch["y"]),
      compiled_seal and (lambda: compiled_seal.step(batch_torch["x"], batch_torch["y"])),
    )
    if compiled_seal is not None:
      assert seal_side.compiled is not None
      torch_compile_s["seal_dynamic_nce_step"] = timed_first_call(seal_side.compiled, sync)
  pairs["seal_dynamic_nce_step"] = (run_update, seal_side, update)
  n = stage.train.batch_size
  rows.append(
    dict(
      benchmark="seal_dynamic_nce_step",
      what=f"loss-net NCE step (K={s.num_samples}) + task-net step, Adam",
      rows=n,
      gflop_dense=seal_step_gflop(stage, sizes, n),
      jax_peak_bytes=common.peak_bytes(update),
    )
  )

  # One E2E-SPEN update (the e2e config's last stage, `joint`): backprop through the
  # unrolled logit-space GBI with learned step sizes.
  stage, stages = method_config("e2e", sizes)
  batch = common.random_multilabel_batch(
    rs, stage.train.batch_size, sizes.num_features, sizes.num_labels
  )
  objective, state = common.build_state(stages, shapes, batch)
  started = time.perf_counter()
  update, run_update = donated_step(objective, state, batch)
  jax_compile_s["e2e_step"] = time.perf_counter() - started
  e, g = stage.energy, stage.gbi
  e2e_side = TorchSide(None, None)
  if torch is not None:
    e2e_energy = _torch_spen(ref, sizes, e, state["energy"].params, device)
    e2e_options = dict(
      num_steps=g.num_steps,
      step_size=g.learning_rate,
      l2=stage.loss.l2,
      learning_rate=stage.optimizer.learning_rate,
      step_size_learning_rate=stage.step_size_optimizer.learning_rate,
      loss_eps=stage.e2e.loss_eps,
    )
    eager_e2e = ref.E2EStep(e2e_energy, mode="eager", **e2e_options)
    compiled_e2e = (
      ref.E2EStep(e2e_energy, mode="compiled", compile_options=compile_options, **e2e_options)
      if use_compile
      else None
    )
    batch_torch = {k: to_torch(v) for k, v in batch.items()}
    e2e_side = TorchSide(
      lambda: eager_e2e.step(batch_torch["x"], batch_torch["y"]),
      compiled_e2e and (lambda: compiled_e2e.step(batch_torch["x"], batch_torch["y"])),
    )
    if compiled_e2e is not None:
      assert e2e_side.compiled is not None
      torch_compile_s["e2e_step"] = timed_first_call(e2e_side.compiled, sync)
  pairs["e2e_step"] = (run_update, e2e_side, update)
  n = stage.train.batch_size
  rows.append(
    dict(
      benchmark="e2e_step",
      what=f"E2E-SPEN update: backprop through "
      f"{g.num_steps} unrolled GBI steps ({g.method}, learned step sizes), "
      f"Adam",
      rows=n,
      gflop_dense=e2e_step_gflop(stage, sizes, n),
      jax_peak_bytes=common.peak_bytes(update),
    )
  )

  on_gpu = jax.default_backend() == "gpu"
  for row in rows:
    name = row["benchmark"]
    jax_fn, side, _ = pairs[name]
    jax_s, eager_s, compiled_s = interleaved_medians(
      [jax_fn, synced(side.eager), synced(side.compiled)], sizes.repeats
    )
    assert jax_s is not None, "every row has its JAX call"
    eager_target = (2.0 if on_gpu else CPU_TARGETS[name]) if name in CPU_TARGETS else None
    row.update(
      jax_ms=1e3 * jax_s,
      torch_ms=None,
      speedup=None,
      target=None,
      met=None,
      compiled_ms=None,
      speedup_vs_compiled=None,
      target_vs_compiled=None,
      met_vs_compiled=None,
      jax_compile_s=jax_compile_s.get(name),
      torch_compile_s=torch_compile_s.get(name),
    )
    line = f"  {name}: JAX {1e3 * jax_s:.1f} ms"
    if eager_s is not None:
      row.update(
        torch_ms=1e3 * eager_s,
        speedup=eager_s / jax_s,
        target=eager_target,
        met=None if eager_target is None else eager_s / jax_s >= eager_target,
      )
      line += f", eager PyTorch {1e3 * eager_s:.1f} ms ({eager_s / jax_s:.2f}×)"
    if compiled_s is not None:
      row.update(
        compiled_ms=1e3 * compiled_s,
        speedup_vs_compiled=compiled_s / jax_s,
        target_vs_compiled=COMPILED_TARGET,
        met_vs_compiled=compiled_s / jax_s >= COMPILED_TARGET,
      )
      line += f", compiled PyTorch {1e3 * compiled_s:.1f} ms ({compiled_s / jax_s:.2f}×)"
    print(line if eager_s is not None else line + " (no PyTorch)", flush=True)
  if settings.profile:
    for row in rows:
      name = row["benchmark"]
      jax_fn, side, compiled = pairs[name]
      profiles += [
        dict(benchmark=name, framework="jax", **r) for r in jax_op_profile(jax_fn, compiled)
      ]
      for framework, fn in (("torch", side.eager), ("torch_compiled", side.compiled)):
        timed = synced(fn)
        if timed is not None:
          profiles += [
            dict(benchmark=name, framework=framework, **r) for r in torch_op_profile(torch, timed)
          ]
  return rows, profiles


def interleaved_medians(
  fns: list[Callable | None], repeats: int, rounds: int = 3
) -> list[float | None]:
  """Median seconds per call of each function (JAX / eager PyTorch / compiled PyTorch),
  timed in alternating blocks (`rounds` × (a warm-up call and `repeats` calls of each in
  turn)): in blocks, neither runtime's threads or allocator disturb the other's calls,
  and alternating spreads a load change on a shared machine over all. A None function
  gets None."""
  times: list[list[float]] = [[] for _ in fns]
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


def plot_torch(out_dir: str, rows: list[dict]) -> str:
  """Bars of JAX, eager and compiled PyTorch ms per row, with the JAX speedups."""
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(11, 4.5))
  xs = np.arange(len(rows))
  series = [
    ("jax_ms", "JAX (jit)"),
    ("torch_ms", "PyTorch (eager)"),
    ("compiled_ms", "PyTorch (torch.compile)"),
  ]
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


def torch_markdown(torch_rows: list[dict], profiles: list[dict], torch_version) -> list[str]:
  """The summary's JAX vs PyTorch tables, or the JAX-only GBI table without it."""
  lines = []
  with_torch = any(r["torch_ms"] is not None for r in torch_rows)
  if torch_rows and not with_torch:
    lines += [
      "## GBI vs feed-forward (JAX only: PyTorch is not installed)",
      "",
      "| benchmark | what | rows | JAX ms | JAX peak MiB |",
      "|---|---|---|---|---|",
    ]
    lines += [
      f"| {r['benchmark']} | {r['what']} | {r['rows']} | {r['jax_ms']:.1f} | "
      f"{mib(r['jax_peak_bytes'])} |"
      for r in torch_rows
    ]
    by = {r["benchmark"]: r for r in torch_rows}
    lines += [
      "",
      ", ".join(
        f"{name} / feed-forward: {by[name]['jax_ms'] / by['feed_forward']['jax_ms']:.2f}×"
        for name in ("gbi20_spen", "gbi20_seal")
      )
      + ".",
    ]
  if with_torch:
    with_compiled = any(r["compiled_ms"] is not None for r in torch_rows)
    lines += [
      "## JAX vs PyTorch (eager and torch.compile)",
      "",
      f"Same shapes, same weights, one process; each row timed in alternating "
      f"blocks (3 × (a warm-up call and the repeats of each of JAX, eager "
      f"PyTorch, compiled PyTorch)); PyTorch {torch_version}. Speedup = PyTorch "
      f"time / JAX time (above 1: JAX is faster). Compile s: JAX's "
      f"`lower().compile()` / the `torch.compile`d function's first call "
      f"(tracing, code generation, C++ compilation and one run; the whole GBI "
      f"rows: the feed-forward's plus the loop's), excluded from the times.",
      "",
      "| benchmark | what | rows | JAX ms | eager ms | compiled ms | vs eager | "
      "vs compiled | compile s (JAX / compiled) | targets | met |",
      "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    fmt = lambda v, f: "" if v is None else f.format(v)
    for r in torch_rows:
      targets = [
        f"≥ {t:g}× {label}"
        for t, label in ((r["target"], "eager"), (r["target_vs_compiled"], "compiled"))
        if t is not None
      ]
      met_flags = [m for m in (r["met"], r["met_vs_compiled"]) if m is not None]
      met = "" if not met_flags else ("yes" if all(met_flags) else "**no**")
      lines.append(
        f"| {r['benchmark']} | {r['what']} | {r['rows']} | {r['jax_ms']:.1f} | "
        f"{r['torch_ms']:.1f} | {fmt(r['compiled_ms'], '{:.1f}')} | "
        f"{r['speedup']:.2f}× | {fmt(r['speedup_vs_compiled'], '{:.2f}×')} | "
        f"{fmt(r['jax_compile_s'], '{:.1f}')} / {fmt(r['torch_compile_s'], '{:.1f}')} | "
        f"{', '.join(targets)} | {met} |"
      )
    if not with_compiled:
      lines += ["", "No compiled PyTorch column in this run (--notorch_compile)."]
    by = {r["benchmark"]: r for r in torch_rows}
    rate = lambda r, key: (
      ""
      if r[key] is None
      else f", {key.split('_')[0].replace('torch', 'eager')} "
      f"{r['gflop_dense'] / r[key] * 1e3:.0f} GFLOP/s"
    )
    lines += [
      "",
      "Dense layers (analytic FLOPs of the networks' hidden layers and heads) "
      "per second of wall time: "
      + "; ".join(
        f"{r['benchmark']} {r['gflop_dense']:.2f} GFLOP: JAX "
        f"{r['gflop_dense'] / r['jax_ms'] * 1e3:.0f} GFLOP/s"
        f"{rate(r, 'torch_ms')}{rate(r, 'compiled_ms')}"
        for r in torch_rows
        if r["gflop_dense"]
      )
      + ". The feed-forward row is "
      "almost only these matmuls: it is each framework's matmul speed here.",
    ]
    lines += verdicts(torch_rows, profiles)
    lines += [
      "",
      "## GBI vs feed-forward",
      "",
      "| | JAX | eager PyTorch | compiled PyTorch |",
      "|---|---|---|---|",
    ]
    ff = by["feed_forward"]
    ratio = lambda name, key: (
      "" if by[name][key] is None or ff[key] is None else f"{by[name][key] / ff[key]:.2f}×"
    )
    for name in ("gbi20_spen", "gbi20_seal"):
      lines.append(
        f"| {name} / feed-forward (time ratio) | {ratio(name, 'jax_ms')} | "
        f"{ratio(name, 'torch_ms')} | {ratio(name, 'compiled_ms')} |"
      )
    lines.append("")
  return lines


def _torch_spen(ref, sizes, e, params, device):
  """The torch reference (module `ref`)'s SPEN energy of an `energy` config block `e`, holding the
  trained flax `params`."""
  spen = ref.SPENEnergy(
    sizes.num_features,
    sizes.num_labels,
    e.feature_hidden,
    e.feature_activation,
    e.num_measurements,
    e.activation,
    e.dropout,
    e.input_dropout,
  )
  return ref.load_flax_spen(spen, params).to(device)

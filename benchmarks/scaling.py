r"""Data-parallel scaling: step time against device count, bytes all-reduced, a pod model.

For each method (its config on bibtex's shapes: 1836 binary features, 159 labels, random
rows, so no data files; the state built through the config's earlier stages as the
trainer builds it) and each device count D, the trainer's step (`build_train_step` over
a `('data',)` mesh of the first D devices: replicated state, sharded batch, state
donated) is compiled and timed:

- strong scaling: a fixed global batch (`--strong_batch`) split over D devices;
- weak scaling: a fixed per-device batch (`--weak_batch`), global batch D times it.

Timing: every device count of one (method, scaling) pair is compiled and warmed up
first, then timed in interleaved blocks (block k runs D = 1, 2, 4, 8 in turn, the
starting D rotating), `--steps_per_block` chained steps up to `block_until_ready` per
block; a step time is the median block / steps per block. All device counts live in one
process (a mesh over the first D devices), so a load change on a shared machine hits
every D alike and the ratios (speed-up, efficiency) are measured in the same run.

Bytes all-reduced per step are read from the compiled program
(`compiled.as_text()`: the operand bytes of every all-reduce / reduce-scatter /
all-gather / all-to-all / collective-permute, `collective_bytes`) and set beside the
trained parameters' bytes (every `ParamGroup.params` of the state): with a replicated
state and a sharded batch the gradient all-reduce moves one gradient-sized buffer per
parameter, plus rank-0 scalars (the loss and metric means).

A ring all-reduce model predicts the step time on P devices (`ring_step_seconds`):

    T(P, b) = c0 + c1 * b  +  n_ops * latency * log2(P)  +  bytes * 2 (P - 1) / P / bandwidth

with c0 (fixed cost per step) and c1 (cost per example) fitted to the one-device steps
at the weak and strong batch sizes measured here, `bytes` and `n_ops` (collective ops
per step) from the compiled program, and a link's bandwidth and latency assumed
(`LINKS`). Weak efficiency on P devices is T(1, b) / T(P, b); strong is
T(1, B) / (P T(P, B / P)).

On CPU the D devices are forced host devices (`jax_num_cpu_devices`) sharing the
machine's physical cores: strong scaling then measures the partitioning overhead (the
same work on the same cores; ideal speed-up 1), not a speed-up, and weak scaling does D
times the work on the same cores. What a CPU run measures that carries over is the
bytes all-reduced, the overhead, and the model's inputs. On an accelerator the same
command with `--platform=auto` uses the real devices (device counts above the number
visible are skipped).

  python -m benchmarks.scaling                                 # CPU, 1/2/4/8 devices
  python -m benchmarks.scaling --platform=auto                 # a GPU / TPU host
  python -m benchmarks.scaling --quick --device_counts=1,2 --out_dir=/tmp/scaling
"""

import json
import math
import os
import re
import shlex
import statistics
import sys
import time
from typing import Any
from typing import NamedTuple

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import RESULTS_DIR
from benchmarks import common
from energynets.objectives import base as objectives_base
from energynets.train import quiet_library_logs
from energynets.train import step as step_lib
from experiments import cli
from experiments import configuration
from experiments import workdirs


def _define_flags() -> None:
  """The command line's flags, defined only when this module runs as the program, so
  that importing it (tests do) adds no flags to the importer's, e.g. a `--methods`
  of its own."""
  flags.DEFINE_string(
    "out_dir", os.path.join(RESULTS_DIR, "scaling"), "where summary.md and summary.json go"
  )
  flags.DEFINE_list(
    "methods",
    ["mlp", "spen_ssvm", "seal_dynamic"],
    "experiments/configs names, run on bibtex's shapes",
  )
  flags.DEFINE_list("device_counts", ["1", "2", "4", "8"], "mesh sizes D (the first D devices)")
  flags.DEFINE_enum(
    "platform",
    "cpu",
    ["cpu", "auto"],
    "cpu: max(device_counts) forced host devices; auto: the devices JAX finds (GPU/TPU)",
  )
  flags.DEFINE_integer("strong_batch", 128, "global batch, strong scaling")
  flags.DEFINE_integer("weak_batch", 32, "per-device batch, weak scaling")
  flags.DEFINE_list("modes", ["strong", "weak"], "which scalings to run")
  flags.DEFINE_integer("blocks", 5, "timed blocks per (method, scaling, D)")
  flags.DEFINE_integer("steps_per_block", 3, "chained steps per block")
  flags.DEFINE_integer("warmup", 2, "untimed steps after compiling")
  flags.DEFINE_integer("num_features", 1836, "input features (bibtex)")
  flags.DEFINE_integer("num_labels", 159, "labels (bibtex)")
  flags.DEFINE_list("pod_sizes", ["8", "64", "256"], "P of the predictions")
  flags.DEFINE_bool(
    "quick",
    False,
    "tiny shapes and networks, one block of one "
    "step: a smoke test in seconds (timings meaningless)",
  )


class Link(NamedTuple):
  """An interconnect of the model: per-device all-reduce bandwidth and per-hop latency."""

  name: str
  bandwidth_bytes_per_s: float
  latency_s: float
  max_devices: int  # beyond it the link is not what connects the devices
  source: str


# Assumed numbers, not measured here.
LINKS = (
  Link(
    "TPU v4 pod ICI",
    1.1e15 / 4096,
    10e-6,
    4096,
    "all-reduce bandwidth per pod 1.1 PB/s over 4096 chips (Cloud TPU v4 docs) = "
    "269 GB/s per chip; latency assumed",
  ),
  Link(
    "GPU node NVLink",
    450e9,
    10e-6,
    8,
    "H100 NVLink 900 GB/s bidirectional = 450 GB/s per direction; latency assumed; "
    "a node holds 8 GPUs",
  ),
  Link(
    "100 Gb/s Ethernet",
    12.5e9,
    50e-6,
    1 << 30,
    "100 Gb/s = 12.5 GB/s per host link; latency assumed",
  ),
)


# ---------------------------------------------------------------------------------------
# Bytes moved by the collectives of a compiled program.

COLLECTIVE_OPS = (
  "all-reduce",
  "all-reduce-start",
  "reduce-scatter",
  "all-gather",
  "all-gather-start",
  "all-to-all",
  "collective-permute",
  "collective-permute-start",
)
_DTYPE_BYTES = {
  "pred": 1,
  "s4": 1,
  "u4": 1,
  "s8": 1,
  "u8": 1,
  "bf16": 2,
  "f16": 2,
  "s16": 2,
  "u16": 2,
  "f32": 4,
  "s32": 4,
  "u32": 4,
  "f64": 8,
  "s64": 8,
  "u64": 8,
  "c64": 8,
  "c128": 16,
}
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,]*)\]")
_INSTRUCTION = re.compile(
  r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>.*?)\s+(?P<op>[\w\-]+)\((?P<rest>.*)$"
)
_COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*[({].*\{\s*$")


def shape_bytes(shape: str) -> tuple[int, int]:
  """`(bytes, bytes of rank-0 arrays)` of an HLO shape (`f32[3,4]{1,0}`, a tuple of
  them, `f32[]`); float8 types count one byte."""
  total = scalars = 0
  for dtype, dims in _ARRAY.findall(shape):
    size = _DTYPE_BYTES.get(dtype, 1 if dtype.startswith("f8") else None)
    if size is None:
      continue
    n = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
    total += n * size
    if not dims:
      scalars += size
  return total, scalars


def _operands(rest: str) -> list[str]:
  """The top-level comma-separated operands of `op(...)`, given the text after `(`."""
  depth = 0
  current: list[str] = []
  out: list[str] = []
  for ch in rest:
    if ch in "([{":
      depth += 1
    elif ch in ")]}":
      if depth == 0:
        break
      depth -= 1
    if ch == "," and depth == 0:
      out.append("".join(current).strip())
      current = []
    else:
      current.append(ch)
  out.append("".join(current).strip())
  return [re.sub(r"/\*.*?\*/", "", o).strip() for o in out if o.strip()]


def collective_bytes(hlo_text: str) -> dict[str, Any]:
  """The collectives of an HLO module's text (`compiled.as_text()`).

  Returns `{"bytes", "scalar_bytes", "ops", "by_op": {op: [count, bytes]},
  "in_loop_ops"}`: operand bytes summed over every collective op (an operand printed
  without its shape is looked up by name), the part of them in rank-0 arrays, the number
  of ops, and how many sit in a while loop's body (those run once per iteration, so a
  step moves more than `bytes`).
  """
  shapes, lines = {}, []
  computation, loop_bodies = "", set()
  for line in hlo_text.splitlines():
    m = _INSTRUCTION.match(line)
    if m is None:
      c = _COMPUTATION.match(line)
      if c is not None and "=" not in line.split("{")[0]:
        computation = c.group("name")
      continue
    shapes[m.group("name")] = m.group("shape")
    if m.group("op") == "while":
      body = re.search(r"body=%?([\w.\-]+)", m.group("rest"))
      if body:
        loop_bodies.add(body.group(1))
    if m.group("op") in COLLECTIVE_OPS:
      lines.append((computation, m.group("op"), m.group("rest")))
  result: dict[str, Any] = {"bytes": 0, "scalar_bytes": 0, "ops": 0, "by_op": {}, "in_loop_ops": 0}
  for comp, op, rest in lines:
    total = scalars = 0
    for operand in _operands(rest):
      if _ARRAY.search(operand.split("%")[0]):  # typed operand: `f32[4]{0} %x`
        b, s = shape_bytes(operand.split("%")[0])
      else:
        b, s = shape_bytes(shapes.get(operand.lstrip("%"), ""))
      total, scalars = total + b, scalars + s
    result["bytes"] += total
    result["scalar_bytes"] += scalars
    result["ops"] += 1
    count, nbytes = result["by_op"].get(op, (0, 0))
    result["by_op"][op] = [count + 1, nbytes + total]
    result["in_loop_ops"] += comp in loop_bodies
  return result


def param_bytes(state) -> int:
  """Bytes of the trained parameters: every `ParamGroup.params` in `state`."""
  is_group = lambda x: isinstance(x, objectives_base.ParamGroup)
  groups = [g for g in jax.tree.leaves(state, is_leaf=is_group) if is_group(g)]
  return sum(
    int(np.prod(a.shape)) * a.dtype.itemsize for g in groups for a in jax.tree.leaves(g.params)
  )


# ---------------------------------------------------------------------------------------
# The communication model.


def ring_allreduce_seconds(nbytes: float, devices: int, link: Link, ops: int = 1) -> float:
  """A ring all-reduce of `nbytes` over `devices`: bytes 2(P-1)/P / bandwidth, plus
  `ops` collectives' latency log2(P) each; 0 on one device."""
  if devices <= 1:
    return 0.0
  return nbytes * 2 * (
    devices - 1
  ) / devices / link.bandwidth_bytes_per_s + ops * link.latency_s * math.log2(devices)


def ring_step_seconds(
  c0: float,
  c1: float,
  per_device_batch: float,
  nbytes: float,
  devices: int,
  link: Link,
  ops: int = 1,
) -> float:
  """Predicted step time: compute c0 + c1 * per-device batch, then the all-reduce."""
  return c0 + c1 * per_device_batch + ring_allreduce_seconds(nbytes, devices, link, ops)


def fit_compute(
  batch_a: int, seconds_a: float, batch_b: int, seconds_b: float
) -> tuple[float, float]:
  """`(c0, c1)` through two one-device step times; through the origin (c0 = 0) when the
  batches are equal or the slope is not positive (timing noise)."""
  if batch_a != batch_b:
    c1 = (seconds_b - seconds_a) / (batch_b - batch_a)
    c0 = seconds_a - c1 * batch_a
    if c1 > 0 and c0 >= 0:
      return c0, c1
  big, t = max((batch_a, seconds_a), (batch_b, seconds_b))
  return 0.0, t / big


def predictions(c0, c1, nbytes, ops, weak_batch, strong_batch, pod_sizes) -> list[dict]:
  """Predicted weak and strong efficiency per link and pod size (None where the link
  does not connect that many devices or the global batch has fewer rows than devices)."""
  rows = []
  for link in LINKS:
    for p in pod_sizes:
      fits = p <= link.max_devices
      weak = (
        ((c0 + c1 * weak_batch) / ring_step_seconds(c0, c1, weak_batch, nbytes, p, link, ops))
        if fits
        else None
      )
      strong = (
        (c0 + c1 * strong_batch)
        / (p * ring_step_seconds(c0, c1, strong_batch / p, nbytes, p, link, ops))
        if fits and strong_batch >= p
        else None
      )
      rows.append(
        dict(
          link=link.name,
          devices=p,
          allreduce_ms=1e3 * ring_allreduce_seconds(nbytes, p, link, ops) if fits else None,
          weak_efficiency=weak,
          strong_efficiency=strong,
        )
      )
  return rows


# ---------------------------------------------------------------------------------------
# Measuring.


def build_method(name: str, num_features: int, num_labels: int, quick: bool, batch):
  """`(objective, state)` of `experiments/configs/<name>.py:bibtex`'s last stage, the state
  built as the trainer builds it (`init` of the first stage, `init_from` of later ones)."""
  config = configuration.get_config(name, "bibtex")
  if quick:
    common.shrink_networks(config)
  stages = [stage for _, stage in configuration.stage_configs(config)]
  return common.build_state(stages, common.MultilabelShapes(num_features, num_labels), batch)


def _prepare(objective, state, batch, devices: int):
  """The compiled step on the first `devices` devices and `run(n)`, which advances a
  private replicated copy of the state by `n` chained steps and waits for them."""
  mesh = step_lib.make_mesh(devices)
  step = step_lib.build_train_step(objective, mesh)
  holder = [step_lib.replicate(jax.tree.map(jnp.copy, state), mesh)]
  sharded = step_lib.shard_batch({k: np.asarray(v) for k, v in batch.items()}, mesh)
  key = step_lib.replicate(jax.random.key(1), mesh)
  started = time.perf_counter()
  compiled = step.lower(holder[0], sharded, key).compile()
  compile_s = time.perf_counter() - started

  def run(n: int):
    for _ in range(n):
      holder[0], _ = compiled(holder[0], sharded, key)
    jax.block_until_ready(holder[0])

  return compiled, compile_s, run


def measure(name: str, device_counts, settings: dict) -> dict:
  """One method: per scaling mode and D, the step time; the collectives of each program."""
  rs = np.random.RandomState(0)
  nf, nl = settings["num_features"], settings["num_labels"]
  init_batch = common.random_multilabel_batch(rs, 8, nf, nl)
  objective, state = build_method(name, nf, nl, settings["quick"], init_batch)
  out: dict[str, Any] = dict(param_bytes=param_bytes(state), rows=[])
  for mode in settings["modes"]:
    runs = {}
    for d in device_counts:
      batch_size = settings["strong_batch"] if mode == "strong" else settings["weak_batch"] * d
      batch = common.random_multilabel_batch(rs, batch_size, nf, nl)
      compiled, compile_s, run = _prepare(objective, state, batch, d)
      run(settings["warmup"])
      comm = collective_bytes(compiled.as_text())
      runs[d] = run
      out["rows"].append(
        dict(
          mode=mode,
          devices=d,
          global_batch=batch_size,
          per_device_batch=batch_size // d,
          compile_s=compile_s,
          collectives=comm,
        )
      )
      print(
        f"  {name} {mode} D={d}: batch {batch_size}, compiled in {compile_s:.1f} s, "
        f"{comm['ops']} collective op(s), {comm['bytes']} bytes",
        flush=True,
      )
    times: dict[int, list[float]] = {d: [] for d in device_counts}
    n = settings["steps_per_block"]
    for block in range(settings["blocks"]):
      order = list(device_counts[block % len(device_counts) :]) + list(
        device_counts[: block % len(device_counts)]
      )
      for d in order:
        started = time.perf_counter()
        runs[d](n)
        times[d].append((time.perf_counter() - started) / n)
    for row in out["rows"]:
      if row["mode"] == mode:
        row["step_s"] = statistics.median(times[row["devices"]])
        row["block_step_s"] = times[row["devices"]]
    del runs
  base = {r["mode"]: r for r in out["rows"] if r["devices"] == device_counts[0]}
  for row in out["rows"]:
    b = base[row["mode"]]
    row["examples_per_s"] = row["global_batch"] / row["step_s"]
    row["speedup"] = row["examples_per_s"] / b["examples_per_s"]
    row["efficiency"] = row["speedup"] / (row["devices"] / b["devices"])
  if device_counts[0] == 1:
    weak, strong = base.get("weak", base.get("strong")), base.get("strong", base.get("weak"))
    assert weak is not None and strong is not None, "every measured mode has a base row"
    c0, c1 = fit_compute(
      weak["global_batch"], weak["step_s"], strong["global_batch"], strong["step_s"]
    )
    largest = max(out["rows"], key=lambda r: r["devices"])["collectives"]
    out["model"] = dict(
      c0_s=c0,
      c1_s_per_example=c1,
      bytes=largest["bytes"],
      ops=largest["ops"],
      predictions=predictions(
        c0,
        c1,
        largest["bytes"],
        largest["ops"],
        settings["weak_batch"],
        settings["strong_batch"],
        settings["pod_sizes"],
      ),
    )
  return out


# ---------------------------------------------------------------------------------------
# The report.


def _fmt(x, spec):
  return "—" if x is None else format(x, spec)


def render(data: dict) -> str:
  """The body of summary.md from summary.json's contents."""
  s = data["settings"]
  lines = [
    f"Machine: {data['machine']}; {data['devices_visible']} device(s) visible "
    f"({data['platform']}); 1-minute load average {data['load_average'][0]:.1f} at the "
    f"start, {data['load_average'][1]:.1f} at the end (other jobs shared the machine "
    f"when it exceeds the CPU count); {data['seconds']:.0f} s.",
    "",
    f"Methods: `experiments/configs/<method>.py:bibtex` (last stage), random rows of "
    f"{s['num_features']} features and {s['num_labels']} labels. Strong scaling: global "
    f"batch {s['strong_batch']}; weak scaling: {s['weak_batch']} per device. Step time: "
    f"median of {s['blocks']} interleaved blocks of {s['steps_per_block']} steps "
    f"({s['warmup']} warm-up steps after compiling), all device counts in one process.",
    "",
  ]
  if data["platform"] == "cpu":
    lines += [
      f"The devices are forced host devices sharing this machine's "
      f"{data['cpu_count']} CPUs: strong scaling does the same work on the same "
      "cores (ideal speed-up 1, so its efficiency column is 1/D at best and the step "
      "time ratio is the partitioning overhead), weak scaling D times the work. These "
      "timings are not an accelerator's speed-up; the all-reduce bytes and the model "
      "inputs are what carry over.",
      "",
    ]
  lines += [
    "## Step time against device count",
    "",
    "| method | scaling | D | global batch | per device | step ms | examples/s | "
    "speed-up | efficiency | step ms / D=1 |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for name, m in data["methods"].items():
    base = {r["mode"]: r["step_s"] for r in m["rows"] if r["devices"] == 1}
    for r in m["rows"]:
      ratio = r["step_s"] / base[r["mode"]] if r["mode"] in base else None
      lines.append(
        f"| {name} | {r['mode']} | {r['devices']} | {r['global_batch']} | "
        f"{r['per_device_batch']} | {1e3 * r['step_s']:.1f} | {r['examples_per_s']:.0f} | "
        f"{r['speedup']:.2f} | {r['efficiency']:.2f} | {_fmt(ratio, '.2f')} |"
      )
  lines += [
    "",
    "## Bytes all-reduced per step",
    "",
    "From the compiled step (`compiled.as_text()`), at the largest D; the same at "
    "every D > 1 and for both scalings (one device has no collectives).",
    "",
    "| method | collective ops | bytes all-reduced | of which scalars | "
    "parameter bytes | non-scalar / parameter bytes | ops in a loop body |",
    "|---|---|---|---|---|---|---|",
  ]
  for name, m in data["methods"].items():
    c = max(m["rows"], key=lambda r: r["devices"])["collectives"]
    kinds = ", ".join(f"{k} ×{v[0]}" for k, v in sorted(c["by_op"].items())) or "none"
    lines.append(
      f"| {name} | {kinds} | {c['bytes']:,} | {c['scalar_bytes']:,} | "
      f"{m['param_bytes']:,} | "
      f"{(c['bytes'] - c['scalar_bytes']) / m['param_bytes']:.4f} | "
      f"{c['in_loop_ops']} |"
    )
  lines += [
    "",
    "## Predicted efficiency on a pod (ring all-reduce model)",
    "",
    "T(P, b) = c0 + c1·b + n_ops·latency·log2(P) + bytes·2(P−1)/P / bandwidth. "
    "c0, c1: fitted to the one-device steps here (weak batch and strong batch), "
    "so the compute is this machine's; an accelerator's is faster, which lowers "
    "every efficiency below (the all-reduce ms column does not depend on it).",
    "",
    "Links (assumed, not measured):",
    "",
  ]
  for link in data["links"]:
    lines.append(
      f"- {link['name']}: {link['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s, "
      f"latency {1e6 * link['latency_s']:.0f} µs ({link['source']})"
    )
  lines += [
    "",
    "| method | c0 ms | c1 ms/example | bytes | n_ops | link | P | all-reduce ms | "
    f"weak efficiency ({s['weak_batch']}/device) | "
    f"strong efficiency (global {s['strong_batch']}) |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for name, m in data["methods"].items():
    if "model" not in m:
      continue
    mo = m["model"]
    for p in mo["predictions"]:
      lines.append(
        f"| {name} | {1e3 * mo['c0_s']:.2f} | {1e3 * mo['c1_s_per_example']:.3f} | "
        f"{mo['bytes']:,} | {mo['ops']} | {p['link']} | {p['devices']} | "
        f"{_fmt(p['allreduce_ms'], '.3f')} | {_fmt(p['weak_efficiency'], '.2f')} | "
        f"{_fmt(p['strong_efficiency'], '.2f')} |"
      )
  lines += [
    "",
    "— : the link does not connect that many devices (a GPU node holds 8), or "
    "the global batch has fewer rows than devices.",
    "",
    "Same command on an accelerator (real devices, no numbers here): "
    f"`{data['accelerator_command']}`",
  ]
  return "\n".join(lines)


def main(argv):
  del argv
  device_counts = sorted({int(d) for d in flags.FLAGS.device_counts})
  if flags.FLAGS.platform == "cpu":
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", max(device_counts))
  quiet_library_logs()
  visible = len(jax.devices())
  skipped = [d for d in device_counts if d > visible]
  device_counts = [d for d in device_counts if d <= visible]
  if skipped:
    print(f"skipping device counts {skipped}: {visible} device(s) visible")
  quick = flags.FLAGS.quick
  settings = dict(
    num_features=40 if quick else flags.FLAGS.num_features,
    num_labels=12 if quick else flags.FLAGS.num_labels,
    strong_batch=flags.FLAGS.strong_batch if not quick else 8 * max(device_counts),
    weak_batch=flags.FLAGS.weak_batch if not quick else 4,
    blocks=1 if quick else flags.FLAGS.blocks,
    steps_per_block=1 if quick else flags.FLAGS.steps_per_block,
    warmup=1 if quick else flags.FLAGS.warmup,
    pod_sizes=[int(p) for p in flags.FLAGS.pod_sizes],
    quick=quick,
    modes=[m for m in ("strong", "weak") if m in flags.FLAGS.modes],
  )
  for d in device_counts:
    step_lib.check_batch_size(settings["strong_batch"], step_lib.make_mesh(d))
  command = "python -m benchmarks.scaling " + " ".join(shlex.quote(a) for a in sys.argv[1:])
  accelerator_args = [a for a in sys.argv[1:] if not a.startswith("--platform")]
  data = dict(
    command=command,
    revision=workdirs.code_revision(),
    machine=common.machine_description(),
    platform=jax.default_backend(),
    devices_visible=visible,
    cpu_count=os.cpu_count(),
    settings=settings,
    links=[l._asdict() for l in LINKS],
    methods={},
    accelerator_command=" ".join(
      ["python -m benchmarks.scaling --platform=auto", *map(shlex.quote, accelerator_args)]
    ),
  )
  started, load_before = time.perf_counter(), os.getloadavg()[0]
  for name in flags.FLAGS.methods:
    data["methods"][name] = measure(name, device_counts, settings)
  data["seconds"] = time.perf_counter() - started
  data["load_average"] = [load_before, os.getloadavg()[0]]
  body = render(data)
  print(body)
  os.makedirs(flags.FLAGS.out_dir, exist_ok=True)
  with open(os.path.join(flags.FLAGS.out_dir, "summary.json"), "w") as f:
    json.dump(data, f, indent=1)
  common.write_report(
    os.path.join(flags.FLAGS.out_dir, "summary.md"),
    "benchmarks.scaling",
    body,
    revision=data["revision"],
  )
  print(f"wrote {flags.FLAGS.out_dir}/summary.md and summary.json ({data['seconds']:.0f} s)")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)

"""The suite's op profiles: where the time of each JAX / PyTorch row goes, by op and op
class (`profile.csv`; `benchmarks.suite`), and why a missed speed target is missed."""

import collections
from collections.abc import Callable
import glob
import os
import re
import tempfile

import jax

# PyTorch ops that only re-index (views) or move data, by name.
_TORCH_DATA = {
  "t",
  "transpose",
  "permute",
  "view",
  "reshape",
  "expand",
  "expand_as",
  "squeeze",
  "unsqueeze",
  "as_strided",
  "select",
  "slice",
  "copy_",
  "clone",
  "contiguous",
  "cat",
  "stack",
  "detach",
  "empty",
  "empty_like",
  "zeros_like",
  "full_like",
  "fill_",
  "zero_",
  "to",
  "_to_copy",
  "resolve_conj",
  "alias",
}
_TORCH_OPTIMIZER = {
  "_fused_adam_",
  "lerp_",
  "addcmul_",
  "addcdiv_",
  "sqrt",
  "_foreach_add_",
  "_foreach_mul_",
  "_foreach_lerp_",
  "_foreach_addcmul_",
  "_foreach_sqrt",
  "_foreach_div_",
  "_foreach_addcdiv_",
  "_foreach_norm",
  "clamp_",
  "linalg_vector_norm",
  "mul_",
  "add_",
  "div_",
}
_RANDOM = ("random_bits", "_bernoulli", "_uniform", "threefry", "_normal", "rng", "philox")
_HLO_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")


# torch.profiler events of compiled code: inductor's generated kernels (recorded only as
# the time of the enclosing region outside aten calls), and the wrappers that guard
# and dispatch each call.
_INDUCTOR_REGION = (
  "Torch-Compiled Region",
  "CompiledFunction",
  "## Call CompiledFxGraph",
  "cpp_fused",
  "triton_",
  "## ",
)
_COMPILED_DISPATCH = (
  "TorchDynamo Cache Lookup",
  "Pregraph bytecode",
  "AOTDispatcher",
  "AOTDispatcher Runtime Wrapper",
)


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
    opcode_match = re.search(r"(?:^|[\s)])([a-z][\w\-]*)\(", rest)
    opcode = opcode_match.group(1) if opcode_match else ""
    op_name_match = re.search(r'op_name="([^"]*)"', rest)
    op_name = op_name_match.group(1) if op_name_match else ""
    in_model = "jvp(" in op_name or "transpose(" in op_name
    if (
      opcode == "dot"
      or name.startswith(("ynn", "xnn", "onednn"))
      or (opcode == "custom-call" and re.search("gemm|matmul|cublas", rest))
    ):
      category = "matmul"
    elif any(k in op_name for k in _RANDOM):
      category = "random (PRNG, dropout masks)"
    elif "opt_state" in rest or (not in_model and re.search(r"%state\S*params", rest)):
      category = "optimizer update"
    elif opcode in ("while", "conditional", "call"):
      category = "control"
    elif opcode in (
      "copy",
      "transpose",
      "concatenate",
      "slice",
      "dynamic-slice",
      "dynamic-update-slice",
      "bitcast",
      "broadcast",
      "tuple",
      "get-tuple-element",
      "parameter",
      "constant",
    ) or name.startswith(("copy", "transpose", "concatenate", "bitcast")):
      category = "data movement / views"
    else:
      category = "elementwise/reduction"
    categories[name] = category
  return categories


def _ranked(totals: dict[str, float], calls: int, category: Callable[[str], str]) -> list[dict]:
  """Ops by decreasing time: ms per call and share of the profiled total."""
  whole = sum(totals.values()) or 1.0
  ranked = sorted(((op, t) for op, t in totals.items() if t > 0), key=lambda kv: -kv[1])
  return [
    dict(op=op, category=category(op), ms_per_call=t / calls / 1e6, share=t / whole)
    for op, t in ranked
  ]


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
    totals: collections.defaultdict[str, float] = collections.defaultdict(float)
    for plane in data.planes:
      for line in plane.lines:
        # (start, end, op) of this thread's op events; nested ones are subtracted.
        events = []
        for event in line.events:
          op = next((v for k, v in event.stats if k == "hlo_op"), None)
          if op is not None and event.duration_ns > 0:
            events.append((event.start_ns, event.start_ns + event.duration_ns, str(op)))
        events.sort(key=lambda e: (e[0], -e[1]))
        stack: list[tuple[int, str]] = []  # enclosing events: (end, op)
        for start, end, op in events:
          while stack and stack[-1][0] <= start:
            stack.pop()
          if stack:
            totals[stack[-1][1]] -= end - start
          totals[op] += end - start
          stack.append((end, op))
  return _ranked(totals, calls, lambda op: categories.get(op, "elementwise/reduction"))


def torch_op_profile(torch, fn: Callable, calls: int = 3) -> list[dict]:
  """Self CPU time of each aten op of `fn`, from torch.profiler."""
  fn()
  with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    for _ in range(calls):
      fn()
  totals = {e.key: 1e3 * e.self_cpu_time_total for e in prof.key_averages()}  # us -> ns
  return _ranked(totals, calls, lambda op: _torch_category(op.removeprefix("aten::")))


def category_shares(profiles: list[dict], name: str, framework: str) -> collections.Counter:
  """Op class -> share of the profiled time, of one row and framework."""
  shares: collections.Counter[str] = collections.Counter()
  for p in profiles:
    if p["benchmark"] == name and p["framework"] == framework:
      shares[p["category"]] += p["share"]
  return shares


def verdicts(torch_rows: list[dict], profiles: list[dict]) -> list[str]:
  """For each row with a target or where JAX is slower: the ratios against their
  targets; where one is missed, why: each framework's time by op class (from the
  profiles), and the matmul time of each, which bounds the speedup (Amdahl: the
  PyTorch time over JAX's matmul time alone, were everything else free)."""
  lines = ["", "Targets (and every row where JAX is slower):", ""]
  top = lambda c: ", ".join(f"{k} {100 * v:.0f}%" for k, v in c.most_common(4))
  for r in torch_rows:
    name = r["benchmark"]
    checks = [
      ("eager", r["speedup"], r["target"], r["met"], r["torch_ms"]),
      (
        "compiled",
        r["speedup_vs_compiled"],
        r["target_vs_compiled"],
        r["met_vs_compiled"],
        r["compiled_ms"],
      ),
    ]
    parts, missed = [], []
    for label, speedup, target, met, other_ms in checks:
      if speedup is None:
        continue
      if target is None:
        parts.append(f"{speedup:.2f}× {label} (no target)")
      else:
        parts.append(
          f"{speedup:.2f}× {label} against ≥ {target:g}×: {'met' if met else '**missed**'}"
        )
      if (target is not None and not met) or speedup < 1:
        missed.append((label, other_ms))
    if not missed and r["target"] is None and r["target_vs_compiled"] is None:
      continue
    verdict = f"- {name}: " + "; ".join(parts) + "."
    jax_shares = category_shares(profiles, name, "jax")
    if missed and jax_shares:
      jax_matmul = jax_shares["matmul"] * r["jax_ms"]
      verdict += f" JAX time by op class: {top(jax_shares)} (matmuls ~{jax_matmul:.1f} ms)"
      for label, other_ms in missed:
        framework = "torch" if label == "eager" else "torch_compiled"
        shares = category_shares(profiles, name, framework)
        if not shares:
          continue
        verdict += (
          f"; {label} PyTorch: {top(shares)} (matmuls "
          f"~{shares['matmul'] * other_ms:.1f} ms; with every non-matmul op of "
          f"JAX free the speedup would be at most "
          f"{other_ms / max(jax_matmul, 1e-9):.2f}×)"
        )
      verdict += "."
    lines.append(verdict)
  return lines


def profiles_markdown(profiles: list[dict]) -> list[str]:
  """The summary's op-profile tables, per benchmark row."""
  lines = []
  if profiles:
    lines += [
      "## Where the time goes (op profiles)",
      "",
      "Self time per call of each op (JAX: XLA ops from jax.profiler, summed over "
      "the threads that ran them, so up to threads × wall time; PyTorch: aten ops "
      "from torch.profiler, on the calling thread), as shares of each framework's "
      "profiled total, by category and the top ops (all ops: profile.csv):",
      "",
    ]
    for name in dict.fromkeys(p["benchmark"] for p in profiles):
      lines += [f"### {name}", ""]
      categories = sorted({p["category"] for p in profiles if p["benchmark"] == name})
      lines += [
        "| framework | " + " | ".join(categories) + " |",
        "|---|" + "---|" * len(categories),
      ]
      frameworks = list(dict.fromkeys(p["framework"] for p in profiles))
      for framework in frameworks:
        ops = [p for p in profiles if p["benchmark"] == name and p["framework"] == framework]
        shares: collections.Counter[str] = collections.Counter()
        for p in ops:
          shares[p["category"]] += p["share"]
        lines.append(
          f"| {framework} | " + " | ".join(f"{100 * shares[c]:.0f}%" for c in categories) + " |"
        )
      lines += ["", "| framework | op | category | ms / call | share |", "|---|---|---|---|---|"]
      for framework in frameworks:
        ops = [p for p in profiles if p["benchmark"] == name and p["framework"] == framework]
        for p in ops[:6]:
          lines.append(
            f"| {framework} | `{p['op']}` | {p['category']} | "
            f"{p['ms_per_call']:.2f} | {100 * p['share']:.0f}% |"
          )
      lines.append("")
  return lines

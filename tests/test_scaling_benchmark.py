"""benchmarks.scaling: the collective-bytes counter, the ring model, a tiny run, the report."""

import json
import math
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from benchmarks import scaling

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMITTED = REPO_ROOT / "results" / "scaling"

# A post-optimization module as XLA prints it: a tuple all-reduce whose operands are
# named only, a scalar, an all-gather with a typed operand, a reduce-scatter, and an
# all-reduce inside a while body.
HLO = textwrap.dedent("""\
    HloModule jit_update, entry_computation_layout={(f32[8,6]{1,0})->f32[6]{0}}

    %add (x: f32[], y: f32[]) -> f32[] {
      %x = f32[] parameter(0)
      %y = f32[] parameter(1)
      ROOT %add.1 = f32[] add(f32[] %x, f32[] %y)
    }

    %body (p: (s32[], f32[5])) -> (s32[], f32[5]) {
      %p = (s32[], f32[5]{0}) parameter(0)
      %v = f32[5]{0} get-tuple-element(%p), index=1
      %all-reduce.9 = f32[5]{0} all-reduce(%v), channel_id=3, to_apply=%add
      ROOT %t = (s32[], f32[5]{0}) tuple(%i, %all-reduce.9)
    }

    ENTRY %main.5 (Arg_0.1: f32[8,6], Arg_1.2: bf16[3,4]) -> f32[6] {
      %Arg_0.1 = f32[8,6]{1,0} parameter(0), sharding={devices=[2,1]<=[2]}
      %Arg_1.2 = bf16[3,4]{1,0} parameter(1)
      %dot.3 = f32[159,1024]{1,0} dot(%Arg_0.1, %Arg_0.1)
      %fusion.2 = f32[] fusion(%Arg_0.1), kind=kLoop
      %all-reduce.7 = (f32[159,1024]{1,0}, /*index=1*/f32[]) all-reduce(%dot.3, /*index=1*/%fusion.2), channel_id=1, replica_groups=[1,2]<=[2], to_apply=%add
      %all-gather.1 = bf16[6,4]{1,0} all-gather(bf16[3,4]{1,0} %Arg_1.2), dimensions={0}
      %reduce-scatter.2 = f32[4,6]{1,0} reduce-scatter(%Arg_0.1), dimensions={0}, to_apply=%add
      %w = (s32[], f32[5]{0}) while(%init), condition=%cond, body=%body
      ROOT %r = f32[6]{0} reduce(%Arg_0.1, %c), dimensions={0}, to_apply=%add
    }
    """)


def test_collective_bytes_of_a_hand_written_module():
  c = scaling.collective_bytes(HLO)
  tuple_ar = 159 * 1024 * 4 + 4
  assert c["by_op"] == {
    "all-reduce": [2, tuple_ar + 5 * 4],
    "all-gather": [1, 3 * 4 * 2],
    "reduce-scatter": [1, 8 * 6 * 4],
  }
  assert c["bytes"] == tuple_ar + 20 + 24 + 192
  assert c["scalar_bytes"] == 4
  assert c["ops"] == 4 and c["in_loop_ops"] == 1
  assert scaling.shape_bytes("(f32[2,3]{1,0}, /*index=1*/pred[], f8e4m3fn[4])") == (29, 1)


def test_ring_model_on_hand_values():
  link = scaling.Link("test", 1e9, 1e-5, 64, "hand")
  # 1 MB over 4 devices: 2 * 3/4 MB at 1 GB/s = 1.5 ms, plus 2 ops * 10 µs * log2(4).
  assert math.isclose(scaling.ring_allreduce_seconds(1e6, 4, link, ops=2), 1.5e-3 + 4e-5)
  assert scaling.ring_allreduce_seconds(1e6, 1, link) == 0.0
  t = scaling.ring_step_seconds(1e-3, 1e-4, 32, 1e6, 4, link)
  assert math.isclose(t, 1e-3 + 3.2e-3 + 1.5e-3 + 2e-5)
  assert scaling.fit_compute(32, 0.005, 128, 0.014) == pytest.approx((0.002, 9.375e-5))
  assert scaling.fit_compute(32, 0.005, 128, 0.004) == (0.0, 0.004 / 128)  # noise
  rows = scaling.predictions(1e-3, 1e-4, 1e6, 1, 32, 128, [8, 64, 256])
  nvlink = {r["devices"]: r for r in rows if r["link"] == "GPU node NVLink"}
  assert nvlink[64]["weak_efficiency"] is None  # a node holds 8 GPUs
  ethernet = {r["devices"]: r for r in rows if r["link"] == "100 Gb/s Ethernet"}
  assert ethernet[256]["strong_efficiency"] is None  # 128 rows over 256 devices
  link = scaling.LINKS[2]
  comm = 1e6 * 2 * 63 / 64 / link.bandwidth_bytes_per_s + link.latency_s * 6
  assert math.isclose(ethernet[64]["weak_efficiency"], 4.2e-3 / (4.2e-3 + comm))
  assert math.isclose(
    ethernet[8]["strong_efficiency"],
    13.8e-3 / (8 * (1e-3 + 1.6e-3 + 1e6 * 2 * 7 / 8 / 12.5e9 + 1.5e-4)),
  )


# Printed by a 2-device subprocess (jax alone): the program of a sum over the sharded
# rows of an [8, 6] array, which all-reduces the [6] partial sums: 24 bytes.
SHARDED_SUM = """
import jax
jax.config.update("jax_num_cpu_devices", 2)
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(jax.devices(), ("data",))
x = jax.device_put(jnp.ones((8, 6)), NamedSharding(mesh, P("data")))
fn = jax.jit(lambda a: a.sum(0), out_shardings=NamedSharding(mesh, P()))
print(fn.lower(x).compile().as_text())
"""


def test_collective_bytes_of_a_sharded_sum():
  proc = subprocess.run(
    [sys.executable, "-c", SHARDED_SUM],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=300,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  c = scaling.collective_bytes(proc.stdout)
  assert (c["bytes"], c["by_op"], c["in_loop_ops"]) == (24, {"all-reduce": [1, 24]}, 0)


def _quick_run(tmp_path, methods, modes=("strong", "weak")):
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "benchmarks.scaling",
      "--quick",
      "--device_counts=1,2",
      f"--methods={methods}",
      f"--modes={','.join(modes)}",
      f"--out_dir={tmp_path}",
    ],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  data = json.loads((tmp_path / "summary.json").read_text())
  assert list(data["methods"]) == methods.split(",")
  for m in data["methods"].values():
    assert [(r["mode"], r["devices"]) for r in m["rows"]] == [
      (mode, d) for mode in modes for d in (1, 2)
    ]
    assert len(m["model"]["predictions"]) == 3 * len(scaling.LINKS)
    assert all(r["step_s"] > 0 and r["examples_per_s"] > 0 for r in m["rows"])
    assert all(r["collectives"]["ops"] == 0 for r in m["rows"] if r["devices"] == 1)
    two = [r["collectives"] for r in m["rows"] if r["devices"] == 2]
    assert all(c["bytes"] == two[0]["bytes"] > 0 for c in two)  # whatever the batch
    assert two[0]["in_loop_ops"] == 0
    # Every parameter's gradient is all-reduced.
    assert two[0]["bytes"] - two[0]["scalar_bytes"] >= m["param_bytes"]
  text = (tmp_path / "summary.md").read_text()
  assert text.startswith("Generated by `python -m benchmarks.scaling --quick")
  assert scaling.render(data) in text
  return data


def test_quick_run_all_reduces_exactly_the_mlp_parameters(tmp_path):
  mlp = _quick_run(tmp_path, "mlp", modes=("strong",))["methods"]["mlp"]
  # The parameters of --quick's MLP counted from its shapes: 40 -> 16 -> 16 -> 12.
  assert mlp["param_bytes"] == 4 * (40 * 16 + 16 + 16 * 16 + 16 + 16 * 12 + 12)
  # The gradient all-reduce moves exactly them, plus the loss (one f32 scalar).
  c = mlp["rows"][1]["collectives"]
  assert (c["bytes"], c["scalar_bytes"], c["ops"]) == (mlp["param_bytes"] + 4, 4, 1)


@pytest.mark.slow  # the energy-based methods' programs (about 30 s of compiling)
def test_quick_run_of_the_energy_methods(tmp_path):
  data = _quick_run(tmp_path, "spen_ssvm,seal_dynamic")
  # SEAL-dynamic alternates two updates (loss-net, then task-net): two all-reduces.
  assert data["methods"]["seal_dynamic"]["rows"][1]["collectives"]["ops"] == 2


def test_committed_summary_is_rendered_from_its_json():
  data = json.loads((COMMITTED / "summary.json").read_text())
  text = (COMMITTED / "summary.md").read_text()
  assert text.startswith(f"Generated by `{data['command']}` (code revision {data['revision']}).")
  assert scaling.render(data) in text
  for name, m in data["methods"].items():
    c = max(m["rows"], key=lambda r: r["devices"])["collectives"]
    assert c["in_loop_ops"] == 0, name
    # Every parameter's gradient is all-reduced (at least once).
    assert c["bytes"] - c["scalar_bytes"] >= m["param_bytes"], name
  assert (
    data["methods"]["mlp"]["rows"][-1]["collectives"]["bytes"]
    == data["methods"]["mlp"]["param_bytes"] + 4
  )

"""The `'model'` mesh axis: a SPEN whose label dimension is split over devices.

A SPEN energy (feature network, local head `[H, L]`, measurement matrix `[L, K]`)
trained with the SSVM hinge and loss-augmented GBI through `fit` on 4 forced CPU
devices, on meshes (data 2 x model 2) and (data 1 x model 4), must end where the same
run on the 1-D 4-device mesh (replicated state) ends: the same parameters after a few
steps and the same test-time GBI predictions, to float32 tolerance (only the order of
the sums over labels differs). The label-dimension leaves must really be split (their
spec names `'model'`, each device holds L / M columns), the GBI iterates must be
constrained to the label split, and a checkpoint written by the 2-D run must restore
onto one device (`load_run(num_devices=1)`) with the same predictions. `load_run` on the
4 devices splits a run's label axes as it was trained (or as asked, or as far as fewer
devices allow) and predicts on that mesh.

The device count is fixed when JAX starts, so a subprocess runs the training and
writes one JSON file: `python tests/test_model_axis.py OUT_DIR` (OUT_DIR/report.json).
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
NUM_DEVICES = 4
NUM_LABELS = 64
# Input, hidden and measurement sizes differ from NUM_LABELS, so that the size rule of
# `label_axis_shardings` splits exactly the label axes.
NUM_FEATURES, HIDDEN, MEASUREMENTS = 24, 16, 4
BATCH, STEPS = 8, 3
MESHES = {"data4": (4, 1), "data2_model2": (4, 2), "model4": (4, 4)}
# Leaves of the SPEN state with a label axis, and which axis it is.
LABEL_LEAVES = {
  "['energy'].params['local_net']['head']['kernel']": 1,
  "['energy'].params['local_net']['head']['bias']": 0,
  "['energy'].params['global']['measurements']['kernel']": 0,
}


def _objective():
  import optax

  import energynets as en

  energy = en.energies.SPENEnergy(
    num_labels=NUM_LABELS,
    feature_hidden=(HIDDEN,),
    num_measurements=MEASUREMENTS,
    activation=en.nets.softplus,
  )
  # Momentum SGD (not Adam, whose per-entry normalization turns rounding residues into
  # moves of the learning rate), so that parameters differ as little as gradients do.
  optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1, momentum=0.9))
  return en.objectives.ssvm_hinge(
    energy,
    optimizer,
    options=en.objectives.SSVMOptions(
      init="local",
      loss_aug_gbi=en.inference.GBIConfig(num_steps=5),
      predict_gbi=en.inference.GBIConfig(max_steps=10, rel_tol=0.0, abs_tol=0.0),
    ),
  )


def _data():
  rs = np.random.RandomState(0)
  x = rs.normal(size=(32, NUM_FEATURES)).astype(np.float32)
  y = (rs.uniform(size=(32, NUM_LABELS)) < 0.1).astype(np.float32)
  return x, y


def _program(out_dir: str) -> None:
  """Trains on every mesh of `MESHES` (workdirs in `out_dir`) and writes what the tests
  compare to `out_dir/report.json`."""
  import jax

  import energynets as en
  from energynets import sharding as sharding_lib
  from energynets.inference import gbi as gbi_lib

  t = en.train
  t.quiet_library_logs()
  assert jax.device_count() == NUM_DEVICES, jax.devices()
  x, y = _data()
  objective = _objective()
  options = t.LoopOptions(
    steps=STEPS,
    batch_size=BATCH,
    log_every=1,
    eval_every=STEPS,
    checkpoint_every=STEPS,
    select_metric=None,
    tensorboard=False,
  )
  result = {}
  for name, (devices, model) in MESHES.items():
    mesh = t.make_mesh(devices, model_parallelism=model)
    workdir = os.path.join(out_dir, name)
    fit = t.fit(objective, {"x": x, "y": y}, options, workdir, mesh=mesh)
    flat, _ = jax.tree_util.tree_flatten_with_path(fit.state)
    leaves = {jax.tree_util.keystr(p): v for p, v in flat}
    predict = t.build_predict(objective, mesh)
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      records = [json.loads(line) for line in f]
    result[name] = {
      "axes": list(mesh.axis_names),
      "params": {
        k: np.asarray(v).tolist() for k, v in leaves.items() if k.startswith("['energy'].params")
      },
      "specs": {k: [str(a) for a in v.sharding.spec] for k, v in leaves.items()},
      "shard_shapes": {k: list(v.addressable_shards[0].data.shape) for k, v in leaves.items()},
      "losses": [r["train/loss"] for r in records],
      "grad_norms": [r["train/grad_norm"] for r in records],
      "predictions": t.predict_in_batches(predict, fit.state, x, BATCH, mesh).tolist(),
    }

  # GBI traced under a (data 2 x model 2) mesh, and the constraint outside any mesh.
  def run(logits):
    energy = lambda params, inputs, v: ((v - inputs) ** 2).sum(-1)
    y_out, _ = gbi_lib.gbi_scan(
      energy, None, logits, jax.nn.sigmoid(logits), en.domains.Box(), gbi_lib.GBIConfig(num_steps=2)
    )
    return y_out

  abstract = jax.ShapeDtypeStruct((BATCH, NUM_LABELS), np.float32)
  with jax.set_mesh(t.make_mesh(NUM_DEVICES, model_parallelism=2)):
    lowered = jax.jit(run).lower(abstract).as_text()
  result["gbi"] = {
    "label_split_constraints": [
      line.split("<", 1)[1] for line in lowered.splitlines() if "sharding_constraint" in line
    ],
    "without_mesh": str(jax.make_jaxpr(sharding_lib.constrain_label_axis)(abstract)),
  }

  # The 2-D run's checkpoint, restored onto one device.
  restored = t.load_run(os.path.join(out_dir, "data2_model2"), objective=objective, num_devices=1)
  flat, _ = jax.tree_util.tree_flatten_with_path(restored.state)
  result["restored_one_device"] = {
    "devices": len(jax.tree_util.tree_leaves(restored.state)[0].sharding.device_set),
    "params": {
      jax.tree_util.keystr(p): np.asarray(v).tolist()
      for p, v in flat
      if jax.tree_util.keystr(p).startswith("['energy'].params")
    },
    "predictions": restored.predict(x, BATCH).tolist(),
  }

  # Runs loaded on the devices here: the label split as trained, on fewer devices, as asked.
  loads = {
    "data4": ("data4", {}),
    "model4": ("model4", {}),
    "model4_on_2_devices": ("model4", {"num_devices": 2}),
    "data2_model2_as_model4": ("data2_model2", {"model_parallelism": 4}),
  }
  result["loaded"] = {}
  for name, (run, kwargs) in loads.items():
    loaded = t.load_run(os.path.join(out_dir, run), objective=objective, **kwargs)
    flat, _ = jax.tree_util.tree_flatten_with_path(loaded.state)
    leaves = {jax.tree_util.keystr(p): v for p, v in flat}
    result["loaded"][name] = {
      "run": run,
      "mesh": dict(loaded.mesh.shape),
      "specs": {k: [str(a) for a in leaves[k].sharding.spec] for k in LABEL_LEAVES},
      "shard_shapes": {k: list(leaves[k].addressable_shards[0].data.shape) for k in LABEL_LEAVES},
      "params": {
        k: np.asarray(v).tolist() for k, v in leaves.items() if k.startswith("['energy'].params")
      },
      "predictions": loaded.predict(x, BATCH).tolist(),
    }
  result["benchmark"] = _benchmark(out_dir)
  with open(os.path.join(out_dir, "report.json"), "w") as f:
    json.dump(result, f)


# Hidden width, labels and measurements of the benchmark's smoke run.
BENCHMARK_SIZES = (4, 8, 2)


def _benchmark(out_dir: str) -> str:
  """Runs `benchmarks.model_axis` at a tiny size on 2 of the devices, as its command line
  would; returns the report's path."""
  from absl import flags

  from benchmarks import model_axis

  hidden, labels, measurements = BENCHMARK_SIZES
  out = os.path.join(out_dir, "benchmark", "summary.md")
  flags.FLAGS(
    [
      "model_axis",
      f"--num_labels={labels}",
      "--model_parallelism=1,2",
      "--devices=2",
      "--num_features=16",
      "--active_features=2",
      "--active_labels=2",
      f"--hidden={hidden}",
      f"--num_measurements={measurements}",
      "--batch_size=4",
      "--gbi_steps=1",
      "--steps=1",
      f"--out={out}",
    ]
  )
  model_axis.main(["model_axis"])
  return out


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  out_dir = tmp_path_factory.mktemp("model_axis")
  env = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    PYTHONPATH=str(REPO_ROOT),
    # The inherited flags (conftest's) first, so that the device count wins.
    # Compilation is most of the time: XLA's cheaper backend passes (on every
    # mesh alike) cut it.
    XLA_FLAGS=" ".join(
      [
        os.environ.get("XLA_FLAGS", ""),
        f"--xla_force_host_platform_device_count={NUM_DEVICES}",
        "--xla_backend_optimization_level=0",
        "--xla_llvm_disable_expensive_passes=true",
      ]
    ),
  )
  proc = subprocess.run(
    [sys.executable, __file__, str(out_dir)],
    cwd=REPO_ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-6000:]
  return json.loads((out_dir / "report.json").read_text())


def _assert_close(expected: dict, actual: dict, what: str) -> None:
  assert set(actual) == set(expected), what
  for key in expected:
    np.testing.assert_allclose(
      np.asarray(actual[key]),
      np.asarray(expected[key]),
      rtol=1e-5,
      atol=1e-6,
      err_msg=f"{what}: {key}",
    )


@pytest.mark.parametrize("mesh", ["data2_model2", "model4"])
def test_label_split_training_equals_replicated(report, mesh):
  reference = report["data4"]
  assert reference["axes"] == ["data"] and report[mesh]["axes"] == ["data", "model"]
  # Every step had a gradient, so the parameters compared are trained ones.
  assert len(reference["grad_norms"]) == STEPS and min(reference["grad_norms"]) > 1e-3
  np.testing.assert_allclose(report[mesh]["losses"], reference["losses"], rtol=1e-5)
  _assert_close(reference["params"], report[mesh]["params"], mesh)
  np.testing.assert_allclose(
    report[mesh]["predictions"], reference["predictions"], rtol=1e-5, atol=1e-5
  )


@pytest.mark.parametrize("mesh,model", [("data2_model2", 2), ("model4", 4)])
def test_label_leaves_are_split(report, mesh, model):
  specs, shapes = report[mesh]["specs"], report[mesh]["shard_shapes"]
  for leaf, axis in LABEL_LEAVES.items():
    full = list(np.shape(report[mesh]["params"][leaf]))
    assert full[axis] == NUM_LABELS and specs[leaf][axis] == "model", (leaf, specs[leaf])
    full[axis] = NUM_LABELS // model
    assert shapes[leaf] == full, leaf  # each device holds L / M labels
  # The optimizer's momentum follows its parameters.
  momenta = {k.split(".trace", 1)[1]: v for k, v in specs.items() if ".trace" in k}
  assert len(momenta) == len(report[mesh]["params"])
  for leaf, axis in LABEL_LEAVES.items():
    assert momenta[leaf.split(".params", 1)[1]][axis] == "model", leaf
  # Leaves without a label axis stay whole on every device.
  hidden = "['energy'].params['local_net']['hidden_0']['kernel']"
  assert shapes[hidden] == [NUM_FEATURES, HIDDEN] and "model" not in specs[hidden]
  # The 1-D run keeps everything replicated.
  assert all(spec == [] for spec in report["data4"]["specs"].values())


def test_gbi_iterates_are_constrained_to_the_label_split(report):
  # The start and each step's iterate and gradient (the scan body is traced once).
  constraints = report["gbi"]["label_split_constraints"]
  assert len(constraints) == 4, constraints
  assert all('[{"data"}, {"model"}]' in c for c in constraints), constraints
  assert "sharding_constraint" not in report["gbi"]["without_mesh"]


def test_checkpoint_of_label_split_run_restores_on_one_device(report):
  restored = report["restored_one_device"]
  assert restored["devices"] == 1
  _assert_close(report["data2_model2"]["params"], restored["params"], "restored")
  np.testing.assert_allclose(
    restored["predictions"], report["data2_model2"]["predictions"], rtol=1e-5, atol=1e-6
  )


@pytest.mark.parametrize(
  "name,mesh",
  [
    ("data4", {"data": 4}),  # trained replicated: replicated
    ("model4", {"data": 1, "model": 4}),  # split as trained
    ("model4_on_2_devices", {"data": 1, "model": 2}),  # as far as 2 devices allow
    ("data2_model2_as_model4", {"data": 1, "model": 4}),
  ],
)  # as asked
def test_load_run_splits_labels_as_trained_where_the_devices_allow(report, name, mesh):
  loaded = report["loaded"][name]
  assert loaded["mesh"] == mesh
  ways = mesh.get("model", 1)
  for leaf, axis in LABEL_LEAVES.items():
    full = list(np.shape(loaded["params"][leaf]))
    assert full[axis] == NUM_LABELS
    spec = loaded["specs"][leaf]  # [] when replicated
    assert (spec[axis : axis + 1] == ["model"]) == (ways > 1), (leaf, spec)
    full[axis] = NUM_LABELS // ways
    assert loaded["shard_shapes"][leaf] == full, leaf
  trained = report[loaded["run"]]
  # Restoring moves no bits; predicting on another mesh changes only the order of sums.
  assert loaded["params"] == trained["params"]
  np.testing.assert_allclose(loaded["predictions"], trained["predictions"], rtol=1e-5, atol=1e-6)


def test_model_axis_benchmark_runs_at_a_tiny_size(report):
  """`benchmarks.model_axis` end to end (`_benchmark`): L = 8, M = 1 and 2."""
  out = pathlib.Path(report["benchmark"])
  assert out.read_text().startswith("Generated by `python -m benchmarks.model_axis")
  cells = json.loads(out.with_suffix(".json").read_text())["cells"]
  assert [(c["model_parallelism"], c["mesh"]) for c in cells] == [
    (1, {"data": 2}),
    (2, {"data": 1, "model": 2}),
  ]
  # The label-axis leaves (head kernel and bias, measurement matrix) and their momenta,
  # float32: whole on each device with M = 1, half with M = 2.
  hidden, labels, measurements = BENCHMARK_SIZES
  label_bytes = 2 * 4 * (hidden * labels + labels + labels * measurements)
  assert [c["label_state_bytes_per_device"] for c in cells] == [label_bytes, label_bytes // 2]
  assert all(c["losses_finite"] and len(c["losses"]) == 2 for c in cells)
  assert all(c["peak_bytes_per_device"] > 0 and c["step_seconds_median"] > 0 for c in cells)


if __name__ == "__main__":
  _program(sys.argv[1])

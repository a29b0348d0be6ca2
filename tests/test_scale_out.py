"""Scale-out checks (docs/design.md, "Training loop and scale").

1. Every objective, built the way the experiments build it (an `experiments/configs`
   config, shrunk, -> `experiments.builders.build_objective`), takes two steps through
   `build_train_step` on 4 forced CPU devices and on 1 device from the same state,
   batch and keys; the states must agree. The device count is fixed when JAX starts,
   so a subprocess runs the objectives and writes one JSON file per objective.
2. Multi-host: two processes on this machine (loopback coordinator, 2 CPU devices each)
   run `experiments.main --coordinator_address=...`, each holding only its half of the
   data and loading only its rows of every batch; their checkpoint must equal a 1-process
   4-device run's that draws the same 2-shard batches, and a 1-process 1-device run
   resumes from it with the same results (tests/test_data_shards.py: four processes).

This file is also the first check's subprocess: `python tests/test_scale_out.py
objectives OUT_DIR NAME...` (`_objectives_main`).
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from typing import NamedTuple

from multiprocess import MULTIHOST_FLAGS
from multiprocess import STEPS
from multiprocess import _free_port
from multiprocess import _run_all
from multiprocess import _subprocess_env
import numpy as np
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


class Case(NamedTuple):
  """One objective as an experiment builds it: `experiments/configs/<config>.py:<dataset>`,
  the objective of its stage `stage` (None: its last stage), with `overrides`. A stage
  that cannot start fresh (`init` raises) starts by `init_from` from a fresh
  `previous` stage's state, as staged training does."""

  config: str
  dataset: str
  stage: str | None = None
  overrides: tuple[str, ...] = ()
  previous: str | None = None
  # A variant whose objective and nets other cases already cover: run with --runslow
  # (the CI suite's time budget keeps 18 objectives, ~50 s of compiling).
  slow: bool = False


# Dropout is switched on where a net has it, so that the step draws random bits.
DROPOUT = ("model.dropout=0.2",)
OBJECTIVE_CASES = {
  # multi-label (SPEN energies, MLP nets)
  "local": Case("mlp", "synthetic", overrides=DROPOUT),
  "spen_pretrain": Case("spen_ssvm", "synthetic", "pretrain"),
  "ssvm": Case("spen_ssvm", "synthetic", "joint"),
  "dmf": Case("dmf", "synthetic", "pairwise"),
  "e2e": Case("e2e", "synthetic", "joint"),
  "infnet": Case("infnet", "synthetic", "infnet", DROPOUT),
  "seal_static_loss_net": Case("seal_static", "synthetic", "loss_net"),
  "seal_static_task_net": Case("seal_static", "synthetic", "task_net", previous="loss_net"),
  "seal_dynamic": Case("seal_dynamic", "synthetic", overrides=DROPOUT),
  "seal_ranking": Case("seal_ranking", "synthetic"),
  "dvn": Case("dvn", "synthetic"),
  "implicit": Case("implicit", "synthetic", "implicit", DROPOUT),
  # sequence labeling (BiLSTM taggers on packed tokens, the sequence energy)
  "crf": Case("crf", "twitter_pos"),
  "ssvm_sequence": Case("spen_ssvm", "twitter_pos", "ssvm"),
  "bilstm_token_ce": Case("bilstm", "twitter_pos", overrides=DROPOUT, slow=True),
  "infnet_sequence": Case("infnet", "twitter_pos", "infnet", DROPOUT, slow=True),
  "seal_dynamic_sequence": Case("seal_dynamic", "twitter_pos", "seal", slow=True),
  "implicit_sequence": Case("implicit", "twitter_pos", "implicit", slow=True),
  # segmentation (FCN, the convolutional segmentation energy)
  "fcn_segmentation": Case("fcn", "weizmann_horse", overrides=DROPOUT),
  "dvn_segmentation": Case("dvn", "weizmann_horse"),
  "ssvm_segmentation": Case("spen_ssvm", "weizmann_horse", "joint", slow=True),
  "seal_dynamic_segmentation": Case("seal_dynamic", "weizmann_horse", slow=True),
  "implicit_segmentation": Case("implicit", "weizmann_horse", "implicit", slow=True),
  # denoising (image energies)
  "cnn_denoiser": Case("cnn_denoiser", "depth_scenes"),
  "e2e_denoising": Case("e2e", "depth_scenes"),
  "ssvm_denoising": Case("spen_ssvm", "depth_scenes", slow=True),
}

# Applied to every case where the key exists: tiny widths, few inner iterations.
_SHRINK = {
  "gbi.num_steps": 2,
  "predict_gbi.max_steps": 2,
  "adversarial_gbi.num_steps": 2,
  "infnet.num_inner_steps": 1,
  "implicit.inner_steps": 1,
  "implicit.inverse_hvp.num_terms": 3,
  "implicit.num_samples": 3,
  "seal.num_samples": 3,
  "dmf.num_iters": 2,
  "dmf.rank": 2,
  "energy.num_measurements": 4,
  "energy.tlm_hidden": 4,
  "cnn.features": (4,),
  "cnn.kernel_size": 3,
}
_SHRINK_BY_TASK = {
  "multilabel": {"model.hidden": (8,), "energy.feature_hidden": (8,)},
  "sequence": {
    "model.hidden": 4,
    "model.word_dim": 6,
    "model.char_dim": 4,
    "model.char_filters": 3,
  },
  "segmentation": {
    "model.features": (4, 4, 4),
    "model.kernel_size": 3,
    "energy.features": (4, 4, 4),
    "energy.kernel_size": 3,
    "energy.hidden": (8, 8),
  },
  "denoising": {
    "energy.features": (4, 4),
    "energy.kernel_size": 3,
    "energy.num_filters": 4,
    "energy.filter_size": 3,
  },
}

GLOBAL_BATCH = 8  # 2 rows per device on 4 devices
NUM_DEVICES = 4


# ----------------------------------------------------------------- subprocess programs


def _task_of(dataset: str) -> str:
  return {
    "twitter_pos": "sequence",
    "weizmann_horse": "segmentation",
    "depth_scenes": "denoising",
  }.get(dataset, "multilabel")


def _tiny_dataset(task: str):
  """`(dataset, batch)`: a stand-in with what the objective builders read of a dataset
  (shapes, vocabularies) and one training batch of `GLOBAL_BATCH` rows; no files."""
  import types

  from energynets import data as data_lib
  from energynets import testing
  from experiments import tasks

  rs = np.random.RandomState(0)
  b = GLOBAL_BATCH
  if task == "multilabel":
    x = rs.normal(size=(b, 10)).astype(np.float32)
    y = (rs.uniform(size=(b, 6)) < 0.3).astype(np.float32)
    split = types.SimpleNamespace(x=x, y=y)
    return types.SimpleNamespace(name="tiny", num_labels=6, train=split), {"x": x, "y": y}
  if task == "sequence":
    parts = [testing.tiny_sequence_batch(seed) for seed in range(b // testing.SEQ_BATCH)]
    x = np.concatenate([np.asarray(p[0]["x"]) for p in parts])
    y = np.concatenate([np.asarray(p[0]["y"]) for p in parts])
    mask = np.concatenate([p[1] for p in parts])
    tags = tuple(f"T{i}" for i in range(testing.SEQ_TAGS))
    split = tasks.SequenceSplit(x, y, mask, tags, "iob2")
    source = types.SimpleNamespace(
      word_vocab=range(testing.SEQ_VOCAB), char_vocab=range(7), pos_vocab=None, chunk_vocab=None
    )
    dataset = tasks.SequenceData("tiny", split, split, split, testing.SEQ_TAGS, source, {})
    return dataset, {"x": x, "y": y}
  if task == "segmentation":
    x = rs.normal(size=(b, 16, 16, 3)).astype(np.float32)
    y = (rs.uniform(size=(b, 16, 16)) < 0.4).astype(np.float32)
    split = data_lib.SegmentationSplit(x, y)
    dataset = data_lib.SegmentationDataset("tiny", split, split, split, np.zeros(3), np.ones(3), {})
    return dataset, {"x": x, "y": y}
  clean = rs.uniform(size=(b, 12, 12)).astype(np.float32)
  noisy = (clean + 0.1 * rs.normal(size=clean.shape)).astype(np.float32)
  split = types.SimpleNamespace(x=noisy, y=clean)
  return types.SimpleNamespace(name="tiny", train=split), {"x": noisy, "y": clean}


def _stage_config(case: Case, stage: str | None):
  """The stage config that `experiments.train` builds the stage's objective from."""
  from experiments import configuration

  stages = dict(configuration.stage_configs(configuration.get_config(case.config, case.dataset)))
  config = stages[stage] if stage is not None else list(stages.values())[-1]
  flat = configuration.flatten_dict(config.to_dict())
  shrink = {**_SHRINK, **_SHRINK_BY_TASK[_task_of(case.dataset)]}
  # Every optimizer (`optimizer`, `loss_net_optimizer`, ...) becomes momentum SGD, its
  # gradient clipped to norm 1. Adam divides each gradient entry by its own size, so an
  # entry that is a cancellation residue (SSVM's ∇E(ŷ) − ∇E(y)) turns float32 rounding
  # into a move of up to the learning rate and the states could not be compared
  # tightly; SGD keeps parameter differences proportional to gradient differences.
  # (Optimizers act on the replicated state: no part of them is sharded.)
  for key in flat:
    if key.endswith("optimizer.name"):
      group = key[: -len("name")]
      shrink.update({key: "momentum", group + "learning_rate": 0.1, group + "clip_norm": 1.0})
  config.update_from_flattened_dict({k: v for k, v in shrink.items() if k in flat})
  return configuration.apply_overrides(config, case.overrides)


def _claim(out_dir: pathlib.Path, name: str) -> bool:
  """Atomically claims `name` for this process (its pid in `<name>.claim`)."""
  try:
    fd = os.open(out_dir / f"{name}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
  except FileExistsError:
    return False
  with os.fdopen(fd, "w") as f:
    f.write(str(os.getpid()))
  return True


def _write_result(out_dir: pathlib.Path, name: str, result: dict) -> None:
  tmp = out_dir / f"{name}.json.tmp{os.getpid()}"
  tmp.write_text(json.dumps(result))
  os.replace(tmp, out_dir / f"{name}.json")  # readers never see a partial file


def _objectives_main(out_dir: pathlib.Path, names: list[str]) -> None:
  """Two steps of each named objective on 1 and on `NUM_DEVICES` devices.

  Writes `OUT_DIR/<name>.json` for each objective it claims (`_claim`): under
  pytest-xdist each worker starts one of these programs and they share the work
  instead of both compiling everything.
  """
  import traceback

  import jax

  from energynets import train as train_lib
  from experiments import builders

  assert jax.device_count() == NUM_DEVICES, jax.devices()
  one, many = train_lib.make_mesh(1), train_lib.make_mesh(NUM_DEVICES)

  if _claim(out_dir, "_checks"):
    # Random bits are a function of (key, global shape) only, not of how the output is
    # sharded, so the dropout masks and samples drawn inside a sharded step are the
    # unsharded step's (the equalities below rely on it).
    draw = lambda k: jax.random.uniform(k, (GLOBAL_BATCH, 5))
    key = jax.random.PRNGKey(3)
    checks = {
      "threefry_partitionable": bool(jax.config.jax_threefry_partitionable),
      "random_bits_equal": bool(
        np.array_equal(
          jax.jit(draw, out_shardings=train_lib.batch_sharded(many))(key),
          jax.jit(draw, out_shardings=train_lib.batch_sharded(one))(key),
        )
      ),
    }
    try:
      train_lib.shard_batch({"x": np.zeros((GLOBAL_BATCH + 2, 3), np.float32)}, many)
      checks["indivisible_error"] = None
    except ValueError as e:
      checks["indivisible_error"] = str(e)
    _write_result(out_dir, "_checks", checks)

  def leaves(tree):
    flat, _ = jax.tree_util.tree_flatten_with_path(jax.device_get(tree))
    return {jax.tree_util.keystr(p): np.asarray(v).tolist() for p, v in flat}

  for name in names:
    if not _claim(out_dir, name):
      continue
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
      case = OBJECTIVE_CASES[name]
      dataset, batch = _tiny_dataset(_task_of(case.dataset))
      objective = builders.build_objective(_stage_config(case, case.stage), dataset)
      init_key, example = jax.random.PRNGKey(0), train_lib.shard_batch(batch, one)
      if case.previous is None:
        state = train_lib.build_init(objective, one)(init_key, example)
      else:
        previous = builders.build_objective(_stage_config(case, case.previous), dataset)
        state = train_lib.build_init_from(objective, one)(
          train_lib.build_init(previous, one)(init_key, example), init_key, example
        )
      init_state = jax.device_get(state)
      result = {"init": leaves(init_state)}
      # The loop's step keys: fold_in(step_key, step).
      step_key = jax.random.PRNGKey(1)
      for mesh in (one, many):
        state = train_lib.replicate(init_state, mesh)
        step = train_lib.build_train_step(objective, mesh)
        sharded = train_lib.shard_batch(batch, mesh)
        losses = []
        for t in range(2):
          state, metrics = step(state, sharded, jax.random.fold_in(step_key, t))
          losses.append(float(metrics["loss"]))
        result[str(mesh.size)] = {
          "state": leaves(state),
          "losses": losses,
          "state_devices": len(jax.tree_util.tree_leaves(state)[0].sharding.device_set),
          "batch_devices": len(sharded["x"].sharding.device_set),
          "rows_per_device": sharded["x"].addressable_shards[0].data.shape[0],
        }
    except Exception:  # pylint: disable=broad-except
      result = {"error": traceback.format_exc()}  # the test names it
    result["seconds"] = time.perf_counter() - started
    _write_result(out_dir, name, result)
    print(
      f"{name}: {result['seconds']:.1f} s ({time.process_time() - cpu_started:.1f} s CPU)",
      file=sys.stderr,
      flush=True,
    )


# --------------------------------------------------------------- 1. every objective


def _shared_dir(tmp_path_factory, name: str) -> pathlib.Path:
  """A directory all pytest-xdist workers of this run share (without xdist: fresh)."""
  if "PYTEST_XDIST_WORKER" not in os.environ:
    return tmp_path_factory.mktemp(name)
  path = tmp_path_factory.getbasetemp().parent / f"{name}-{os.environ['PYTEST_XDIST_TESTRUNUID']}"
  path.mkdir(exist_ok=True)
  return path


def _alive(pid: int) -> bool:
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has finished
  except FileNotFoundError:
    return False
  except OSError:  # no /proc: ask the process table
    try:
      os.kill(pid, 0)
      return True
    except ProcessLookupError:
      return False


def _logs(out_dir: pathlib.Path) -> str:
  return "\n".join(
    f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(out_dir.glob("worker_*.log"))
  )


OBJECTIVES_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def sharded_steps(request, tmp_path_factory):
  """`result(name)`: the objectives subprocess's report of objective `name`."""
  # The objectives of the tests this session runs (after -k and the slow marker).
  names = [
    item.callspec.params["name"]
    for item in request.session.items
    if item.originalname == "test_sharded_step_matches_single_device_step"
    and not item.get_closest_marker("skip")
  ]
  out_dir = _shared_dir(tmp_path_factory, "scale_out_objectives")
  proc = None
  if not all((out_dir / f"{n}.json").exists() for n in ["_checks", *names]):
    log = open(out_dir / f"worker_{os.getpid()}.log", "w")
    # Compilation is nearly all of the time here; XLA's cheaper backend passes halve it
    # and do not change what is compared (both meshes compile with the same flags).
    proc = subprocess.Popen(
      [sys.executable, __file__, "objectives", str(out_dir), *names],
      cwd=REPO_ROOT,
      stdout=log,
      stderr=subprocess.STDOUT,
      env=_subprocess_env(
        NUM_DEVICES,
        "--xla_backend_optimization_level=0",
        "--xla_llvm_disable_expensive_passes=true",
      ),
    )
  deadline = time.monotonic() + OBJECTIVES_TIMEOUT_S

  def result(name: str) -> dict:
    path, claim = out_dir / f"{name}.json", out_dir / f"{name}.claim"
    while not path.exists():
      if claim.exists() and claim.read_text():
        claimer = int(claim.read_text())
        if not _alive(claimer) and not path.exists():
          pytest.fail(f"process {claimer} died while running {name}:\n{_logs(out_dir)}")
      elif proc is not None and proc.poll() is not None and not path.exists():
        pytest.fail(
          f"the objectives program exited ({proc.returncode}) without running "
          f"{name}:\n{_logs(out_dir)}"
        )
      if time.monotonic() > deadline:
        pytest.fail(f"no result for {name} after {OBJECTIVES_TIMEOUT_S} s:\n{_logs(out_dir)}")
      time.sleep(0.1)
    return json.loads(path.read_text())

  yield result
  if proc is not None:
    try:
      proc.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()
    log.close()


@pytest.mark.parametrize(
  "name",
  [pytest.param(n, marks=pytest.mark.slow) if c.slow else n for n, c in OBJECTIVE_CASES.items()],
)
def test_sharded_step_matches_single_device_step(name, sharded_steps):
  result = sharded_steps(name)
  assert "error" not in result, result["error"]
  one, many = result["1"], result[str(NUM_DEVICES)]
  # The 4-device step really ran sharded: state on every device, 2 batch rows on each.
  assert many["state_devices"] == many["batch_devices"] == NUM_DEVICES, many
  assert many["rows_per_device"] == GLOBAL_BATCH // NUM_DEVICES
  # Tolerance: float32, and the 4-device step reduces over the batch in a different
  # order (per-device partial sums, then an all-reduce), so sums differ in the last
  # bits relative to the size of their terms: every leaf of the state (parameters and
  # momenta) must agree to 1e-5 of its largest entry, plus 1e-6 absolute (leaves near
  # zero). Randomness is not a source of difference: dropout and samples are drawn from
  # the same key with identical bits (test_sharded_random_bits_equal_unsharded).
  np.testing.assert_allclose(many["losses"], one["losses"], rtol=1e-5, atol=1e-6)
  moved = worst = 0.0
  for path in one["state"]:
    ref, got, init = (
      np.asarray(t[path], np.float64) for t in (one["state"], many["state"], result["init"])
    )
    err = np.max(np.abs(got - ref), initial=0.0)
    tol = 1e-6 + 1e-5 * np.max(np.abs(ref), initial=0.0)
    assert err <= tol, f"{name}: state{path} differs by {err:.3g} (tolerance {tol:.3g})"
    if "params" in path:
      moved = max(moved, np.max(np.abs(ref - init), initial=0.0))
      worst = max(worst, err)
  # Not equal by standing still: the steps moved some parameter far more than the two
  # runs disagree anywhere.
  assert moved > 0 and moved > 100 * worst, (name, moved, worst)


def test_sharded_random_bits_equal_unsharded(sharded_steps):
  checks = sharded_steps("_checks")
  assert checks["threefry_partitionable"] and checks["random_bits_equal"], checks


def test_batch_not_divisible_by_devices_is_rejected(sharded_steps):
  error = sharded_steps("_checks")["indivisible_error"]
  assert error is not None and "batch size 10 is not divisible by the 4 devices" in error


# ------------------------------------------------------------------- 2. multi-host


# Slow: the default suite runs two processes against one through the launch path
# (tests/test_launch.py, local_pod.sh: killed, resumed, equal to the 1-process run); this
# one adds two devices per process and the restore onto one device.
@pytest.mark.slow
def test_two_processes_train_like_one_and_checkpoint_restores_on_one_device(tmp_path):
  import jax

  from energynets import train as train_lib
  from experiments import builders
  from experiments import configuration
  from experiments import train

  main = [sys.executable, "-m", "experiments.main", *MULTIHOST_FLAGS]
  coordinator = f"127.0.0.1:{_free_port()}"
  runs = {
    f"process_{i}": (
      [
        *main,
        f"--workdir={tmp_path / 'two'}",
        f"--coordinator_address={coordinator}",
        "--num_processes=2",
        f"--process_id={i}",
      ],
      _subprocess_env(2),
    )
    for i in range(2)
  }
  # The reference: one process with the same 4 devices in all, drawing the batches of
  # two processes (each holds half of the training rows: 2 data shards).
  runs["reference"] = (
    [*main, f"--workdir={tmp_path / 'one'}", "--config.data.num_shards=2"],
    _subprocess_env(4),
  )
  _run_all(runs, tmp_path)
  for i in range(2):
    log = (tmp_path / f"process_{i}.log").read_text()
    assert f"process {i} of 2: 2 local and 4 global devices" in log
    # Each holds only its half of every split (synthetic: 1000 validation and test rows).
    assert (
      f"process {i} of 2 holds rows {32 * i}:{32 * (i + 1)} of train (32 of 64), "
      f"rows {500 * i}:{500 * (i + 1)} of validation (500 of 1000), "
      f"rows {500 * i}:{500 * (i + 1)} of test (500 of 1000)"
    ) in log

  # Written once: one checkpoint per kept step, one record per step in metrics.jsonl.
  two, one = tmp_path / "two", tmp_path / "one"
  assert sorted(os.listdir(two / "checkpoints")) == [str(STEPS)]
  records = [json.loads(l) for l in (two / "metrics.jsonl").read_text().splitlines()]
  reference = [json.loads(l) for l in (one / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in records] == [r["step"] for r in reference] == [3, 3, 6, 6]
  results = json.loads((two / "results.json").read_text())
  reference_results = json.loads((one / "results.json").read_text())
  assert results["meta"]["num_devices"] == 4
  metric_names = [k for k in reference_results if k != "meta"]
  np.testing.assert_allclose(
    [results[k] for k in metric_names], [reference_results[k] for k in metric_names], atol=1e-6
  )

  # Restore both checkpoints in this process onto 1 device. Each process fed only its 8
  # rows of every 16-row batch, so equal parameters also show the global batches were
  # assembled right. Tolerance as in the objective test (the same 4-way sum, its
  # all-reduce now across processes).
  overrides = [f.removeprefix("--config.") for f in MULTIHOST_FLAGS[1:]]
  config = configuration.get_config("mlp", "synthetic", [*overrides, "train.num_devices=1"])
  dataset = builders.load_data(config)
  objective = builders.build_objective(config, dataset)
  mesh = train_lib.make_mesh(1)
  target = train_lib.build_init(objective, mesh)(
    jax.random.PRNGKey(0), {"x": dataset.train.x[:16], "y": dataset.train.y[:16]}
  )
  restored = {}
  for name, workdir in (("two", two), ("one", one)):
    checkpointer = train_lib.Checkpointer(str(workdir / "checkpoints"))
    restored[name], meta = checkpointer.restore(STEPS, target)
    checkpointer.close()
    assert [h["step"] for h in meta["history"]] == [3, 6]
  for got, ref in zip(
    jax.tree_util.tree_leaves(restored["two"]), jax.tree_util.tree_leaves(restored["one"])
  ):
    assert got.sharding.device_set == set(mesh.devices.flat)
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert np.max(np.abs(got - ref), initial=0.0) <= 1e-6 + 1e-5 * np.max(np.abs(ref), initial=0.0)

  # Resume the 2-process run on 1 device: nothing left to train, so its selected
  # state is restored from the checkpoint and evaluated: the same results.
  resumed = tmp_path / "resumed"
  shutil.copytree(two, resumed)
  resumed_results = train.train_and_evaluate(config, str(resumed))
  assert resumed_results["meta"]["num_devices"] == 1
  assert resumed_results["meta"]["final_step"] == STEPS
  np.testing.assert_allclose(
    [resumed_results[k] for k in metric_names], [results[k] for k in metric_names], atol=1e-6
  )


if __name__ == "__main__":
  if sys.argv[1:2] != ["objectives"] or len(sys.argv) < 3:
    raise SystemExit("usage: python tests/test_scale_out.py objectives OUT_DIR NAME...")
  _objectives_main(pathlib.Path(sys.argv[2]), sys.argv[3:])

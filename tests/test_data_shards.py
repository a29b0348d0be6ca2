"""Per-process data: each process of a multi-process run holds only its rows.

1. The shard-by-shard batch rule (`batching.sharded_batch_indices`): one shard is the
   unsharded `train_batch_indices` stream; with S shards the global batch is B/S rows
   of each shard, and each process's part, drawn from its own rows, is its slice of the
   global batch that one process holding every shard draws.
2. Sharded evaluation (`process_rows.predict_process_rows`): the batches each process runs on
   its rows, gathered, give every row's prediction in order, the padding dropped.
3. The multi-label task keeps a process's rows of every split (`tasks.Task.keep_rows`).
4. Four processes on this machine (one CPU device each) each hold a quarter of the
   train, validation and test rows and end with the results of one process that draws
   the same 4-shard batches (`--config.data.num_shards=4`). The 2-process variant is
   part of tests/test_scale_out.py's multi-host test.
"""

import json
import re
import sys

import jax
from multiprocess import MULTIHOST_FLAGS
from multiprocess import _free_port
from multiprocess import _run_all
from multiprocess import _subprocess_env
import numpy as np
import optax
import pytest

from energynets import train as train_lib
from energynets.data import batching
from energynets.data.splits import MultiLabelDataset
from energynets.data.splits import Split
from energynets.nets import MLP
from energynets.objectives import local_bce
from energynets.train import process_rows
from experiments import tasks

# ----------------------------------------------------------------- 1. the batch rule


@pytest.mark.parametrize("step", [0, 3, 7, 12])
def test_one_shard_is_the_unsharded_stream(step):
  np.testing.assert_array_equal(
    batching.sharded_batch_indices(100, 16, seed=5, step=step, num_shards=1),
    batching.train_batch_indices(100, 16, seed=5, step=step),
  )
  np.testing.assert_array_equal(
    batching.sharded_batch_indices(100, 16, seed=5, step=step, num_shards=1, shards=[0]),
    batching.train_batch_indices(100, 16, seed=5, step=step),
  )


@pytest.mark.parametrize(
  "num_rows,num_shards,processes", [(103, 4, 4), (103, 4, 2), (64, 2, 2), (50, 6, 3)]
)
def test_process_parts_are_their_slices_of_the_global_batch(num_rows, num_shards, processes):
  batch_size, per_shard = 12 * num_shards // 2, 6
  bounds = [batching.shard_bounds(num_rows, num_shards, q) for q in range(num_shards)]
  # Contiguous shards covering the rows once, sizes differing by at most one.
  assert bounds[0][0] == 0 and bounds[-1][1] == num_rows
  assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
  assert max(b - a for a, b in bounds) - min(b - a for a, b in bounds) <= 1
  steps_per_epoch = min(b - a for a, b in bounds) // per_shard
  for step in range(2 * steps_per_epoch + 1):
    whole = batching.sharded_batch_indices(num_rows, batch_size, 3, step, num_shards)
    assert len(whole) == batch_size
    for q, (a, b) in enumerate(bounds):  # B/S rows of shard q, at its place, no repeats
      part = whole[q * per_shard : (q + 1) * per_shard]
      assert np.all((a <= part) & (part < b)) and len(set(part)) == per_shard
    parts = []
    for p in range(processes):
      held = batching.process_rows(num_rows, p, processes)
      shards = batching.process_shards(num_shards, p, processes)
      part = batching.sharded_batch_indices(num_rows, batch_size, 3, step, num_shards, shards)
      # Only rows this process holds: what it indexes its own arrays with.
      assert np.all((held.start <= part) & (part < held.stop))
      per_process = batch_size // processes
      np.testing.assert_array_equal(part, whole[p * per_process : (p + 1) * per_process])
      parts.append(part)
    np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_shards_are_shuffled_independently_and_cover_each_epoch():
  # Two shards of 40 rows, 8 rows of each per step: an epoch is 5 steps.
  steps = [batching.sharded_batch_indices(80, 16, 0, s, 2) for s in range(5)]
  first, second = (np.concatenate([b[:8] for b in steps]), np.concatenate([b[8:] for b in steps]))
  assert sorted(first) == list(range(40)) and sorted(second) == list(range(40, 80))
  # Not the same permutation shifted: the shard index is folded into the seed.
  assert not np.array_equal(first, second - 40)
  # A different stream from the unsharded one (the shard count is part of the run).
  assert not np.array_equal(steps[0], batching.train_batch_indices(80, 16, 0, 0))


def test_shard_rule_errors_are_one_line():
  with pytest.raises(ValueError, match="batch size 10 is not divisible by the 4 data shards"):
    batching.sharded_batch_indices(100, 10, 0, 0, 4)
  with pytest.raises(ValueError, match="shard 2 has only 2 of the 10 training rows"):
    batching.sharded_batch_indices(10, 16, 0, 0, 4, [2])
  with pytest.raises(ValueError, match="3 data shards cannot be split over 2 processes"):
    batching.process_shards(3, 0, 2)


# ------------------------------------------------------------- 2. sharded evaluation


@pytest.mark.parametrize(
  "num_rows,processes,rows_per_batch", [(10, 4, 2), (9, 2, 4), (3, 4, 1), (8, 1, 3)]
)
def test_gathered_batches_restore_the_row_order(num_rows, processes, rows_per_batch):
  """What `predict_process_rows` does with P processes, each step simulated here: every
  process runs the same number of padded batches of its rows; each batch's outputs are
  gathered in process order (`process_allgather`); the rows come back in order."""
  x = np.arange(num_rows * 2, dtype=np.float32).reshape(num_rows, 2) + 1
  held = [x[batching.process_rows(num_rows, p, processes)] for p in range(processes)]
  counts = [len(h) for h in held]
  num_batches = -(-max(counts) // rows_per_batch)
  model = lambda rows: 10 * rows + 7  # padding rows (zeros) become 7: visible if kept
  gathered = [
    np.concatenate([model(process_rows.process_batch(h, i, rows_per_batch)) for h in held])
    for i in range(num_batches)
  ]
  np.testing.assert_array_equal(process_rows.rows_in_process_order(gathered, counts), model(x))


def test_one_process_predicts_its_rows_like_predict_in_batches():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(37, 5)).astype(np.float32)
  objective = local_bce(MLP((8,), 3), optax.adam(1e-2))
  mesh = train_lib.make_mesh(1)
  state = train_lib.build_init(objective, mesh)(
    jax.random.PRNGKey(0), {"x": x[:4], "y": np.zeros((4, 3), np.float32)}
  )
  predict = train_lib.build_predict(objective, mesh)
  expected = np.asarray(jax.jit(objective.predict)(state, x))
  for fn in (process_rows.predict_process_rows, train_lib.predict_in_batches):
    np.testing.assert_allclose(fn(predict, state, x, 8, mesh), expected, rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(process_rows.gather_process_rows(x), x)


# ------------------------------------------------------- 3. the multi-label task's rows


def _dataset(n_train=10, n_val=7, n_test=5):
  rng = np.random.default_rng(1)
  split = lambda n: Split(
    rng.normal(size=(n, 3)).astype(np.float32), (rng.random((n, 2)) < 0.5).astype(np.float32)
  )
  return MultiLabelDataset(
    "toy",
    split(n_train),
    split(n_val),
    split(n_test),
    ("a", "b"),
    ("f0", "f1", "f2"),
    meta={"split_rule": "toy"},
  )


def test_multilabel_task_keeps_its_rows_and_scores_all():
  whole = _dataset()
  parts = [tasks.MULTILABEL.keep_rows(whole, p, 3) for p in range(3)]
  for name in ("train", "validation", "test"):
    for key in ("x", "y"):
      np.testing.assert_array_equal(
        np.concatenate([getattr(getattr(d, name), key) for d in parts]),
        getattr(getattr(whole, name), key),
      )
    for d in parts:  # copies: the whole arrays can be freed
      assert getattr(d, name).x.base is None and getattr(d, name).y.base is None
      assert tasks.num_examples(d, name) == len(getattr(whole, name).x)
  assert parts[1].meta["process_rows"]["train"] == {"start": 3, "stop": 6, "of": 10}
  assert tasks.held_rows_summary(parts[2]) == (
    "rows 6:10 of train (4 of 10), rows 4:7 of validation (3 of 7), rows 3:5 of test (2 of 5)"
  )
  assert tasks.MULTILABEL.keep_rows(whole, 0, 1) is whole
  # The metrics read every process's labels: a stand-in gather of all three parts.
  gather = lambda y: np.concatenate([p.validation.y for p in parts])
  scored = tasks.MULTILABEL.all_rows(parts[0].validation, gather)
  np.testing.assert_array_equal(scored.y, whole.validation.y)
  assert scored.x.shape == whole.validation.x.shape


def test_fit_with_one_shard_trains_like_unsharded(tmp_path):
  rng = np.random.default_rng(0)
  data = {"x": rng.normal(size=(48, 6)).astype(np.float32)}
  data["y"] = (data["x"][:, :3] > 0).astype(np.float32)
  options = train_lib.LoopOptions(
    steps=4,
    batch_size=8,
    log_every=2,
    eval_every=4,
    checkpoint_every=4,
    select_metric=None,
    tensorboard=False,
  )
  objective = local_bce(MLP((8,), 3), optax.adam(1e-2))
  states = [
    train_lib.fit(objective, data, options, str(tmp_path / str(s)), num_shards=s).state
    for s in (None, 1, 2)
  ]
  leaves = [[np.asarray(v) for v in jax.tree_util.tree_leaves(s)] for s in states]
  for a, b in zip(leaves[0], leaves[1]):
    np.testing.assert_array_equal(a, b)
  assert any(not np.array_equal(a, b) for a, b in zip(leaves[0], leaves[2]))
  with pytest.raises(ValueError, match="not divisible by the 3 data shards"):
    train_lib.fit(objective, data, options, str(tmp_path / "3"), num_shards=3)


# -------------------------------------------------------------- 4. four processes

NUM_PROCESSES = 4


def _held(log: str) -> str:
  lines = [l for l in log.splitlines() if re.search(r"process \d+ of \d+ holds ", l)]
  assert len(lines) == 1, log[-3000:]
  return lines[0]


@pytest.mark.slow
def test_four_processes_hold_a_quarter_of_the_rows_and_train_like_one(tmp_path):
  # --verbose: the INFO log (what each process holds) on stderr, in its captured log.
  main = [sys.executable, "-m", "experiments.main", *MULTIHOST_FLAGS, "--verbose"]
  coordinator = f"127.0.0.1:{_free_port()}"
  runs = {
    f"process_{i}": (
      [
        *main,
        f"--workdir={tmp_path / 'four'}",
        f"--coordinator_address={coordinator}",
        f"--num_processes={NUM_PROCESSES}",
        f"--process_id={i}",
      ],
      _subprocess_env(1),
    )
    for i in range(NUM_PROCESSES)
  }
  # One process drawing the same batches: 4 shards, and 4 devices (the same reductions).
  runs["reference"] = (
    [*main, f"--workdir={tmp_path / 'one'}", f"--config.data.num_shards={NUM_PROCESSES}"],
    _subprocess_env(4),
  )
  _run_all(runs, tmp_path)

  num_train = int(re.search(r"num_train=(\d+)", " ".join(MULTIHOST_FLAGS)).group(1))
  sizes = {"train": num_train, "validation": 1000, "test": 1000}  # synthetic's defaults
  for i in range(NUM_PROCESSES):
    log = (tmp_path / f"process_{i}.log").read_text()
    quarter = {s: (n * i // NUM_PROCESSES, n * (i + 1) // NUM_PROCESSES) for s, n in sizes.items()}
    expected = ", ".join(
      f"rows {a}:{b} of {s} ({b - a} of {sizes[s]})" for s, (a, b) in quarter.items()
    )
    assert f"process {i} of {NUM_PROCESSES} holds {expected}" in _held(log)
    # The arrays the process trained and evaluated on have those rows.
    shapes = re.search(r"train \((\d+), \d+\), validation \((\d+), \d+\), test \((\d+), ", log)
    assert shapes and [int(g) for g in shapes.groups()] == [b - a for a, b in quarter.values()]
  assert "holds all rows" in _held((tmp_path / "reference.log").read_text())

  four, one = tmp_path / "four", tmp_path / "one"
  records = [json.loads(l) for l in (four / "metrics.jsonl").read_text().splitlines()]
  reference = [json.loads(l) for l in (one / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in records] == [r["step"] for r in reference]
  for got, ref in zip(records, reference):
    keys = sorted(k for k in ref if k != "train/steps_per_sec")
    np.testing.assert_allclose([got[k] for k in keys], [ref[k] for k in keys], atol=1e-6)
  results = json.loads((four / "results.json").read_text())
  reference_results = json.loads((one / "results.json").read_text())
  names = [k for k in reference_results if k != "meta"]
  assert names and set(names) == set(results) - {"meta"}
  np.testing.assert_allclose(
    [results[k] for k in names], [reference_results[k] for k in names], atol=1e-6
  )
  assert results["meta"]["dataset_meta"]["process_rows"]["processes"] == NUM_PROCESSES

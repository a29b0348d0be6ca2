"""Per-process data of the sequence, segmentation and denoising tasks.

1. Batches: one process drawing the global batch of `num_shards=S` (every shard) gets
   the concatenation of what the processes of an S-shard run draw from their own rows
   (length-bucketed sequence batches cropped to one length; augmented segmentation
   batches, each row augmented by the draws of its place in the global batch); one
   shard is the unsharded batch stream.
2. The tasks keep a process's rows of every split, with what the whole data determines
   (sentence lengths, input statistics), and the metrics read every process's labels.
3. Two processes on this machine train a sequence task, and a segmentation task, like
   one process drawing the same 2-shard batches.
"""

import json
import re
import sys
from typing import NamedTuple

import ml_collections
from multiprocess import _free_port
from multiprocess import _run_all
from multiprocess import _subprocess_env
import numpy as np
import pytest

from energynets.data import batching
from energynets.data import denoising
from energynets.data import segmentation
from energynets.data.sequences import bucketed_batches
from experiments import tasks


def _sequences(n=61, t=40, seed=0):
  """Packed-token stand-ins `x [n, t, 4]`, one-hot tags `y [n, t, 3]`, masks and lengths
  (1..t); row i's tokens hold i, so a batch's rows can be read off it."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, t + 1, n)
  mask = np.arange(t)[None] < lengths[:, None]
  x = np.broadcast_to(np.arange(n)[:, None, None], (n, t, 4)).astype(np.int32) * mask[..., None]
  y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, (n, t))] * mask[..., None]
  return x, y, mask, lengths


def _old_length_bucketed_batch(arrays, lengths, batch_size, seed, step, length_multiple):
  """The unsharded rule, written out: epoch e is `bucketed_batches` under
  `rng([seed, e])`, full batches in order, cropped to the longest rounded up."""
  epoch, position = divmod(step, lengths.size // batch_size)
  full = [
    b
    for b in bucketed_batches(lengths, batch_size, np.random.default_rng([seed, epoch]))
    if len(b) == batch_size
  ]
  idx = full[position % len(full)]
  padded = arrays["x"].shape[1]
  t = min(-(-int(lengths[idx].max()) // length_multiple) * length_multiple, padded)
  return {"x": arrays["x"][idx, :t], "y": arrays["y"][idx, :t]}


# ------------------------------------------------------------------------ 1. batches


@pytest.mark.parametrize("step", [0, 4, 9])
def test_one_shard_is_the_unsharded_bucketed_stream(step):
  x, y, _, lengths = _sequences()
  arrays = {"x": x, "y": y}
  expected = _old_length_bucketed_batch(arrays, lengths, 8, 3, step, 16)
  for shards in (None, [0]):
    got = batching.length_bucketed_batch(
      arrays, lengths, 8, 3, step, 16, num_shards=1, shards=shards
    )
    for k in expected:
      np.testing.assert_array_equal(got[k], expected[k])


@pytest.mark.parametrize("num_shards,processes", [(2, 2), (4, 2), (3, 3), (4, 4)])
def test_process_parts_of_bucketed_batches_make_the_global_batch(num_shards, processes):
  x, y, _, lengths = _sequences()
  arrays, batch_size, per_shard = {"x": x, "y": y}, 4 * num_shards, 4
  bounds = [batching.shard_bounds(len(x), num_shards, q) for q in range(num_shards)]
  steps_per_epoch = min(b - a for a, b in bounds) // per_shard
  seen = [set() for _ in bounds]
  for step in range(2 * steps_per_epoch + 1):
    whole = batching.length_bucketed_batch(
      arrays, lengths, batch_size, 3, step, 8, num_shards=num_shards
    )
    rows = whole["x"][:, 0, 0]  # row i's tokens hold i; every sentence has a token
    assert len(rows) == batch_size == len(set(rows))
    for q, (a, b) in enumerate(bounds):  # B/S rows of shard q, at its place
      part = rows[q * per_shard : (q + 1) * per_shard]
      assert np.all((a <= part) & (part < b))
      if step < steps_per_epoch:
        seen[q].update(part.tolist())
    # One length for all: the global batch's longest sentence, rounded up to 8.
    assert whole["x"].shape[1] == min(-(-lengths[rows].max() // 8) * 8, x.shape[1])
    np.testing.assert_array_equal(whole["x"], x[rows, : whole["x"].shape[1]])
    np.testing.assert_array_equal(whole["y"], y[rows, : whole["x"].shape[1]])
    parts = []
    for p in range(processes):
      held = batching.process_rows(len(x), p, processes)
      part = batching.length_bucketed_batch(
        {"x": x[held].copy(), "y": y[held].copy()},
        lengths,
        batch_size,
        3,
        step,
        8,
        num_shards=num_shards,
        shards=batching.process_shards(num_shards, p, processes),
        first_row=held.start,
      )
      parts.append(part)
    for k in ("x", "y"):
      np.testing.assert_array_equal(np.concatenate([part[k] for part in parts]), whole[k])
  # An epoch of each shard's full batches: distinct rows of that shard only.
  assert all(len(s) == steps_per_epoch * per_shard for s in seen)


def test_bucketed_shards_are_shuffled_independently_and_reject_bad_input():
  x, y, _, lengths = _sequences(n=80)
  arrays = {"x": x, "y": y}
  two = batching.length_bucketed_batch(arrays, lengths, 16, 0, 0, 8, num_shards=2)
  assert not np.array_equal(two["x"][:8, 0, 0], two["x"][8:, 0, 0] - 40)
  one = batching.length_bucketed_batch(arrays, lengths, 16, 0, 0, 8)
  assert not np.array_equal(one["x"][:, 0, 0], two["x"][:, 0, 0])
  with pytest.raises(ValueError, match="batch size 10 is not divisible by the 4 data shards"):
    batching.length_bucketed_batch(arrays, lengths, 10, 0, 0, 8, num_shards=4)
  with pytest.raises(ValueError, match="batch size 96 exceeds the 80 training examples"):
    batching.length_bucketed_batch(arrays, lengths, 96, 0, 0, 8, num_shards=4)
  with pytest.raises(ValueError, match="not among the 40 rows held from row 0"):
    batching.length_bucketed_batch(
      {"x": x[:40], "y": y[:40]}, lengths, 16, 0, 0, 8, num_shards=2, shards=[1]
    )


def _images(n=30, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 8, 8, 3)).astype(np.float32)
  return x, (rng.random((n, 8, 8)) < 0.5).astype(np.float32)


@pytest.mark.parametrize("step", [0, 3, 8])
def test_one_shard_augments_like_the_unsharded_batch(step):
  x, y = _images()
  idx = batching.train_batch_indices(len(x), 6, 2, step)
  # The unsharded rule: one generator per step, draws in row order (segmentation.augment).
  images, masks = segmentation.augment(
    x[idx], y[idx], np.random.default_rng([21, 2, step]), pad=2, flip=True, crop=6
  )
  got = segmentation.augmented_batch(x, y, 6, 2, step, pad=2, flip=True, crop=6)
  np.testing.assert_array_equal(got["x"], images)
  np.testing.assert_array_equal(got["y"], masks)


@pytest.mark.parametrize("num_shards,processes", [(2, 2), (4, 2), (3, 3)])
def test_process_parts_of_augmented_batches_make_the_global_batch(num_shards, processes):
  x, y = _images()
  batch_size = 2 * num_shards
  for step in range(7):
    whole = segmentation.augmented_batch(
      x, y, batch_size, 1, step, pad=2, flip=True, pad_mode="reflect", crop=6, num_shards=num_shards
    )
    idx = batching.sharded_batch_indices(len(x), batch_size, 1, step, num_shards)
    # The global batch's rows, augmented as one batch would be (its one generator).
    images, masks = segmentation.augment(
      x[idx],
      y[idx],
      np.random.default_rng([21, 1, step]),
      pad=2,
      flip=True,
      pad_mode="reflect",
      crop=6,
    )
    np.testing.assert_array_equal(whole["x"], images)
    np.testing.assert_array_equal(whole["y"], masks)
    parts = []
    for p in range(processes):
      held = batching.process_rows(len(x), p, processes)
      parts.append(
        segmentation.augmented_batch(
          x[held],
          y[held],
          batch_size,
          1,
          step,
          pad=2,
          flip=True,
          pad_mode="reflect",
          crop=6,
          num_shards=num_shards,
          shards=batching.process_shards(num_shards, p, processes),
          first_row=held.start,
          num_rows=len(x),
        )
      )
    for k in ("x", "y"):
      np.testing.assert_array_equal(np.concatenate([part[k] for part in parts]), whole[k])


# --------------------------------------------------------------------- 2. the tasks


def _sequence_data():
  def split(n, seed):
    x, y, mask, _ = _sequences(n, seed=seed)
    return tasks.SequenceSplit(x, y, mask, ("A", "B", "C"), "pos")

  return tasks.SequenceData(
    "toy", split(61, 0), split(23, 1), split(17, 2), 3, None, {"split_rule": "toy"}
  )


def _segmentation_data():
  def split(n, seed):
    return segmentation.SegmentationSplit(*_images(n, seed))

  return segmentation.SegmentationDataset(
    "toy", split(30, 0), split(11, 1), split(9, 2), np.zeros(3), np.ones(3), {"split_rule": "toy"}
  )


def _denoising_data():
  rng = np.random.default_rng(0)

  def split(n):
    clean = rng.random((n, 6, 6)).astype(np.float32)
    return denoising.DenoisingSplit(
      clean + 0.1 * rng.normal(size=clean.shape).astype(np.float32), clean
    )

  return tasks.DenoisingData("toy", split(13), split(7), split(5), split(6), {"split_rule": "toy"})


def _fields(split) -> dict:
  return split._asdict() if hasattr(split, "_asdict") else dict(vars(split))


@pytest.mark.parametrize(
  "task,make,splits",
  [
    (tasks.SEQUENCE, _sequence_data, ("train", "validation", "test")),
    (tasks.SEGMENTATION, _segmentation_data, ("train", "validation", "test")),
    (tasks.DENOISING, _denoising_data, ("train", "validation", "test", "natural")),
  ],
)
def test_task_keeps_its_rows_and_scores_all(task, make, splits):
  whole = make()
  assert task.keep_rows(whole, 0, 1) is whole
  parts = [task.keep_rows(whole, p, 3) for p in range(3)]
  for name in splits:
    for key, value in _fields(getattr(whole, name)).items():
      if not isinstance(value, np.ndarray):
        assert all(_fields(getattr(d, name))[key] == value for d in parts)
        continue
      np.testing.assert_array_equal(
        np.concatenate([_fields(getattr(d, name))[key] for d in parts]), value
      )
      assert all(_fields(getattr(d, name))[key].base is None for d in parts)  # copies
    assert all(tasks.num_examples(d, name) == len(getattr(whole, name).x) for d in parts)
  n = len(whole.train.x)
  assert parts[1].meta["process_rows"]["train"] == {"start": n // 3, "stop": 2 * n // 3, "of": n}
  assert tasks.held_rows_summary(parts[0]).count("rows 0:") == len(splits)
  for name in task.eval_splits:  # the metrics read every process's labels
    own = _fields(getattr(parts[0], name))

    def gather(a, name=name, own=own):  # a stand-in all-gather: the parts' field of `a`
      key = next(k for k, v in own.items() if v is a)
      return np.concatenate([_fields(getattr(d, name))[key] for d in parts])

    scored = task.all_rows(getattr(parts[0], name), gather)
    np.testing.assert_array_equal(scored.y, getattr(whole, name).y)
    assert scored.x.shape == getattr(whole, name).x.shape
    if task is tasks.SEQUENCE:
      np.testing.assert_array_equal(scored.mask, getattr(whole, name).mask)
  assert set(task.eval_splits) == set(splits) - {"train"}


def test_sharded_tasks_keep_what_the_whole_data_determines():
  sequences = _sequence_data()
  for d in (tasks.SEQUENCE.keep_rows(sequences, p, 2) for p in range(2)):
    np.testing.assert_array_equal(d.train_lengths, sequences.train.mask.sum(-1))
  scenes = _denoising_data()
  images = np.asarray(scenes.train.x, np.float64)
  for d in (tasks.DENOISING.keep_rows(scenes, p, 2) for p in range(2)):
    assert d.input_statistics == {
      "input_mean": float(images.mean()),
      "input_std": float(images.std()),
    }


@pytest.mark.parametrize(
  "task,make", [(tasks.SEQUENCE, _sequence_data), (tasks.SEGMENTATION, _segmentation_data)]
)
def test_task_batches_of_processes_make_one_process_batches(task, make):
  config = ml_collections.ConfigDict(
    dict(
      data=dict(
        length_multiple=8,
        augment=True,
        augment_pad=1,
        augment_flip=True,
        augment_pad_mode="constant",
        crop_size=6,
      )
    )
  )
  whole = make()
  # One process, the default one shard: the unsharded stream.
  unsharded = task.train_batches(config, whole, 8, 0)
  one_shard = task.train_batches(config, whole, 8, 0, 1)
  for step in range(3):
    for k, v in unsharded(step).items():
      np.testing.assert_array_equal(one_shard(step)[k], v)
  everything = task.train_batches(config, whole, 8, 0, 4)
  for processes in (2, 4):
    parts = [
      task.train_batches(config, task.keep_rows(whole, p, processes), 8, 0, 4)
      for p in range(processes)
    ]
    for step in range(5):
      batch = everything(step)
      for k in batch:
        np.testing.assert_array_equal(np.concatenate([part(step)[k] for part in parts]), batch[k])


# ------------------------------------------------------------------ 3. two processes


def _held(log: str) -> str:
  lines = [l for l in log.splitlines() if re.search(r"process \d+ of \d+ holds ", l)]
  assert len(lines) == 1, log[-3000:]
  return lines[0]


class _Run(NamedTuple):
  config: str
  overrides: tuple[str, ...]
  sizes: dict  # the rows of each split
  metrics: tuple[str, ...]


_COMMON = (
  "--config.train.steps=4",
  "--config.train.batch_size=8",
  "--config.train.eval_every=2",
  "--config.train.log_every=2",
  "--config.train.checkpoint_every=2",
  "--config.train.tensorboard=False",
)
TWO_PROCESS_RUNS = {
  "sequence": _Run(
    "bilstm.py:twitter_pos",
    (
      "--config.train.eval_batch_size=256",
      "--config.model.hidden=8",
      "--config.model.word_dim=8",
      "--config.model.char_dim=4",
      "--config.model.char_filters=4",
    ),
    {"train": 1327, "validation": 500, "test": 547},
    ("test/token_acc", "validation/token_acc"),
  ),
  # Augmented crops in training; 36 crops per image averaged at evaluation.
  "segmentation": _Run(
    "fcn.py:weizmann_horse",
    (
      "--config.train.eval_batch_size=288",
      "--config.model.features=(4,4,4)",
      "--config.data.eval_flip=True",
    ),
    {"train": 160, "validation": 40, "test": 128},
    ("test/dataset_iou", "test/mean_iou", "validation/dataset_iou", "validation/mean_iou"),
  ),
  # Standardized by all training rows' statistics; the natural-image crops split too.
  "denoising": _Run(
    "cnn_denoiser.py:depth_scenes",
    (
      "--config.train.batch_size=4",
      "--config.train.eval_batch_size=4",
      "--config.data.num_train=16",
      "--config.data.num_validation=8",
      "--config.data.num_test=8",
      "--config.data.height=16",
      "--config.data.width=16",
    ),
    {"train": 16, "validation": 8, "test": 8, "natural": 80},
    ("natural/psnr", "test/psnr", "validation/psnr"),
  ),
}


@pytest.mark.slow
@pytest.mark.parametrize("task", list(TWO_PROCESS_RUNS))
def test_two_processes_train_like_one_with_two_shards(tmp_path, data_dir, task):
  run = TWO_PROCESS_RUNS[task]
  data = [f"--config.data.data_dir={data_dir}"] if task != "denoising" else []  # generated
  # --verbose: the INFO log (what each process holds) on stderr, in its captured log.
  main = [
    sys.executable,
    "-m",
    "experiments.main",
    "--verbose",
    f"--config=experiments/configs/{run.config}",
    *data,
    *_COMMON,
    *run.overrides,
  ]
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
      _subprocess_env(1),
    )
    for i in range(2)
  }
  # One process with 2 devices (the same reductions) drawing the batches of two.
  runs["reference"] = (
    [*main, f"--workdir={tmp_path / 'one'}", "--config.data.num_shards=2"],
    _subprocess_env(2),
  )
  _run_all(runs, tmp_path)
  for i in range(2):
    half = ", ".join(
      f"rows {n * i // 2}:{n * (i + 1) // 2} of {s} ({n * (i + 1) // 2 - n * i // 2} of {n})"
      for s, n in run.sizes.items()
    )
    assert f"process {i} of 2 holds {half}" in _held((tmp_path / f"process_{i}.log").read_text())
  assert "holds all rows" in _held((tmp_path / "reference.log").read_text())

  two, one = tmp_path / "two", tmp_path / "one"
  records = [json.loads(l) for l in (two / "metrics.jsonl").read_text().splitlines()]
  reference = [json.loads(l) for l in (one / "metrics.jsonl").read_text().splitlines()]
  drop = lambda r: {k: v for k, v in r.items() if k != "train/steps_per_sec"}
  assert [drop(r) for r in records] == [drop(r) for r in reference]
  assert {"train/loss", run.metrics[-1]} <= set().union(*records)
  results = json.loads((two / "results.json").read_text())
  reference_results = json.loads((one / "results.json").read_text())
  assert tuple(sorted(k for k in reference_results if k != "meta")) == run.metrics
  assert {k: results[k] for k in run.metrics} == {k: reference_results[k] for k in run.metrics}
  assert results["meta"]["dataset_meta"]["process_rows"]["processes"] == 2
  # run.json rebuilds the objective from what the whole data determined.
  runs = [json.loads((d / "run.json").read_text()) for d in (two, one)]
  assert runs[0]["builder"]["kwargs"]["dataset"] == runs[1]["builder"]["kwargs"]["dataset"]

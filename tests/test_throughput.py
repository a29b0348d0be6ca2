"""Throughput options of the training loop: batch prefetching, asynchronous checkpoint
saves (a killed run still resumes to the uninterrupted result) and profiler traces."""

import asyncio
import gc
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
import optax
from orbax.checkpoint._src.handlers import json_checkpoint_handler

from energynets import train as train_lib
from energynets.nets import MLP
from energynets.objectives import local_bce
from energynets.train import prefetch as prefetch_lib
from energynets.train import profiling
from experiments import choices

TESTS_DIR = pathlib.Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent


def _toy_data(n=256, d=12, labels=5, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)).astype(np.float32)
  y = (x[:, :labels] + 0.3 * rng.normal(size=(n, labels)) > 0).astype(np.float32)
  return {"x": x, "y": y}


def _objective():
  return local_bce(MLP((16,), 5, dropout=0.2), optax.adam(1e-2), l2=1e-4)


def _options(**kw):
  defaults = dict(
    steps=30,
    batch_size=32,
    seed=3,
    log_every=5,
    eval_every=10,
    checkpoint_every=10,
    select_metric=None,
    tensorboard=False,
  )
  return train_lib.LoopOptions(**{**defaults, **kw})


def _leaves(state):
  return [np.asarray(v) for v in jax.tree_util.tree_leaves(state)]


def _train_records(workdir):
  records = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  for r in records:
    r.pop("train/steps_per_sec", None)
  return records


def _assert_same_run(test, expected_dir, expected, got_dir, got):
  for a, b in zip(_leaves(expected.state), _leaves(got.state), strict=True):
    np.testing.assert_array_equal(a, b)
  test.assertEqual(expected.final_step, got.final_step)
  test.assertEqual(_train_records(expected_dir), _train_records(got_dir))


class PrefetchTest(parameterized.TestCase):
  @parameterized.parameters(0, 1, 3)
  def test_prefetched_batches_are_the_loops_step_by_step(self, depth):
    mesh = train_lib.make_mesh()
    data = _toy_data()

    def batch_at(step):
      rows = np.random.default_rng(step).permutation(len(data["x"]))[:32]
      if step % 3 == 0:
        time.sleep(0.01)  # the consumer sometimes waits, sometimes finds it built
      return train_lib.shard_batch({k: v[rows] for k, v in data.items()}, mesh)

    batches = prefetch_lib.Prefetcher(batch_at, 2, 12, depth)
    for step in range(2, 12):
      got, expected = batches(step), batch_at(step)
      for k in expected:
        self.assertEqual(got[k].sharding, expected[k].sharding)
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(expected[k]))
    batches.close()

  @parameterized.parameters(0, 2)
  def test_an_error_building_a_batch_is_raised_at_its_step(self, depth):
    def batch_at(step):
      if step == 4:
        raise ValueError("no rows for step 4")
      return {"x": np.full(2, step)}

    batches = prefetch_lib.Prefetcher(batch_at, 0, 8, depth)
    for step in range(4):
      np.testing.assert_array_equal(batches(step)["x"], [step, step])
    with self.assertRaisesRegex(ValueError, "no rows for step 4"):
      batches(4)

  def test_steps_out_of_order_and_a_negative_depth_are_errors(self):
    batches = prefetch_lib.Prefetcher(lambda s: s, 0, 5, 1)
    with self.assertRaisesRegex(ValueError, "asked for step 1, the next is 0"):
      batches(1)
    batches.close()
    with self.assertRaisesRegex(ValueError, "0 or more, got -1"):
      prefetch_lib.Prefetcher(lambda s: s, 0, 5, -1)
    with self.assertRaisesRegex(ValueError, "prefetch must be an integer 0 or more"):
      _options(prefetch=-1)

  def test_close_stops_the_thread_with_batches_still_to_build(self):
    batches = prefetch_lib.Prefetcher(lambda s: s, 0, 1000, 2)
    self.assertEqual(batches(0), 0)
    batches.close()
    self.assertFalse(
      any(t.name == "energynets-prefetch" and t.is_alive() for t in threading.enumerate())
    )

  def test_fit_ends_with_the_same_state_and_metrics_with_and_without_prefetch(self):
    data, obj = _toy_data(), _objective()
    base = self.create_tempdir().full_path
    runs = {}
    for depth in (0, 2):
      workdir = os.path.join(base, f"prefetch{depth}")
      runs[depth] = (workdir, train_lib.fit(obj, data, _options(prefetch=depth), workdir))
    _assert_same_run(self, *runs[0], *runs[2])


class AsyncCheckpointTest(parameterized.TestCase):
  def test_an_async_save_keeps_the_state_and_meta_as_they_were_at_the_call(self):
    directory = self.create_tempdir().full_path
    state = {"w": jax.numpy.arange(6.0).reshape(2, 3)}
    meta = {"history": [{"step": 1}]}
    checkpointer = train_lib.Checkpointer(directory, async_save=True)
    # The background write of `meta` held back until the caller has changed it.
    handler = json_checkpoint_handler.JsonCheckpointHandler
    write, release = handler._save_fn, threading.Event()  # pylint: disable=protected-access

    async def held_write(self, x, path):
      await asyncio.to_thread(release.wait, 60)
      await write(self, x, path)

    with mock.patch.object(handler, "_save_fn", held_write):
      checkpointer.save(1, state, meta)
      # What the loop does next: record more history, and donate the state to the step.
      meta["history"].append({"step": 2})
      state = jax.jit(lambda s: {"w": s["w"] + 1}, donate_argnums=0)(state)
      release.set()
      restored, restored_meta = checkpointer.restore(1, state)
    checkpointer.close()
    np.testing.assert_array_equal(restored["w"], np.arange(6.0).reshape(2, 3))
    self.assertEqual(restored_meta, {"history": [{"step": 1}]})

  def test_a_new_checkpointer_in_the_same_process_sees_the_save_in_flight(self):
    directory = self.create_tempdir().full_path
    writer = train_lib.Checkpointer(directory, async_save=True)
    writer.save(5, {"w": jax.numpy.ones(3)}, {})
    # A `fit` that raised after starting the save, resumed in this process: its
    # Checkpointer is gone, its save may still be writing.
    del writer
    gc.collect()
    self.assertEqual(train_lib.Checkpointer(directory).latest_step(), 5)

  def test_fit_with_async_saves_resumes_like_an_uninterrupted_run(self):
    data, obj = _toy_data(), _objective()
    base = self.create_tempdir().full_path
    full_dir = os.path.join(base, "full")
    full = train_lib.fit(obj, data, _options(async_checkpoint=False), full_dir)
    part_dir = os.path.join(base, "part")
    train_lib.fit(obj, data, _options(steps=20), part_dir)
    resumed = train_lib.fit(obj, data, _options(), part_dir)
    _assert_same_run(self, full_dir, full, part_dir, resumed)

  def test_a_run_killed_while_a_save_is_unfinished_resumes_from_the_one_before(self):
    # The subprocess trains and, once the step-20 save has written its files but not
    # yet committed them (orbax's rename of the temporary folder, held back), is killed
    # with SIGKILL: what a preemption during the background write leaves.
    data, obj = _toy_data(), _objective()
    base = pathlib.Path(self.create_tempdir().full_path)
    killed = base / "killed"
    env = {
      **os.environ,
      "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(TESTS_DIR)]),
      "JAX_PLATFORMS": "cpu",
      "JAX_DEFAULT_MATMUL_PRECISION": "highest",
    }
    proc = subprocess.run(
      [sys.executable, "-c", f"import test_throughput as t; t._killed_run({str(killed)!r})"],
      env=env,
      cwd=REPO_ROOT,
      capture_output=True,
      text=True,
      timeout=300,
    )
    self.assertEqual(proc.returncode, -signal.SIGKILL, proc.stderr[-3000:])
    checkpoints = killed / "checkpoints"
    unfinished = [p for p in checkpoints.iterdir() if ".orbax-checkpoint-tmp" in p.name]
    self.assertEqual([p.name.split(".")[0] for p in unfinished], ["20"])
    self.assertTrue((checkpoints / "10").is_dir())
    self.assertEqual(train_lib.Checkpointer(checkpoints).latest_step(), 10)

    full_dir = os.path.join(base, "full")
    full = train_lib.fit(obj, data, _options(), full_dir)
    resumed = train_lib.fit(obj, data, _options(), killed)
    _assert_same_run(self, full_dir, full, killed, resumed)


def _killed_run(workdir: str) -> None:
  """`_options()`'s run in `workdir`, killed once the step-20 save is written but not
  committed (run in a subprocess by the test above)."""
  # Imported here: private orbax API, held back only in the process that is killed.
  from orbax.checkpoint._src.path import atomicity  # pylint: disable=g-import-not-at-top

  held = threading.Event()
  rename = atomicity.async_path.rename

  async def held_rename(src, dst):
    if pathlib.Path(src).name.startswith("20.orbax-checkpoint-tmp"):
      held.set()
      await asyncio.sleep(3600)
    return await rename(src, dst)

  atomicity.async_path.rename = held_rename
  save = train_lib.Checkpointer.save

  def save_then_die(self, step, state, meta):
    save(self, step, state, meta)
    if step == 20:
      held.wait(timeout=120)
      os.kill(os.getpid(), signal.SIGKILL)

  train_lib.Checkpointer.save = save_then_die
  train_lib.fit(_objective(), _toy_data(), _options(), workdir)
  raise AssertionError("the run was not killed")


class ProfileTest(parameterized.TestCase):
  def test_profile_steps_write_a_trace_under_workdir_profile(self):
    workdir = self.create_tempdir().full_path
    train_lib.fit(_objective(), _toy_data(), _options(steps=6, profile_steps="2:4"), workdir)
    traces = list(pathlib.Path(workdir, "profile").glob("plugins/profile/*/*.xplane.pb"))
    self.assertLen(traces, 1)
    self.assertGreater(traces[0].stat().st_size, 0)

  def test_a_gs_workdir_gets_the_trace_copied_from_a_local_folder(self):
    from energynets import testing  # pylint: disable=g-import-not-at-top

    root = pathlib.Path(self.create_tempdir().full_path)
    with testing.fake_gcs(root / "gcs") as bucket_root:
      train_lib.fit(
        _objective(), _toy_data(), _options(steps=4, profile_steps=(1, 3)), "gs://bucket/run"
      )
      traces = list(
        (bucket_root / "bucket" / "run" / "profile").glob("plugins/profile/*/*.xplane.pb")
      )
    self.assertLen(traces, 1)

  def test_no_profile_by_default(self):
    workdir = self.create_tempdir().full_path
    train_lib.fit(_objective(), _toy_data(), _options(steps=2), workdir)
    self.assertFalse(os.path.exists(os.path.join(workdir, "profile")))

  @parameterized.parameters("5", "4:2", "a:b", "1:2:3", "-1:3", ([3],), (7,))
  def test_a_bad_value_is_a_one_line_error(self, value):
    with self.assertRaisesRegex(
      ValueError,
      r"^profile_steps must be 'start:stop' with "
      r"0 <= start < stop, got [^\n]+$",
    ):
      choices.loop_options({"steps": 1, "batch_size": 2, "profile_steps": value})

  @parameterized.parameters(
    ("", None), (None, None), ("2:5", (2, 5)), (" 0 : 3 ", (0, 3)), ([1, 4], (1, 4))
  )
  def test_values_parse(self, value, expected):
    self.assertEqual(profiling.parse_profile_steps(value), expected)
    if value is not None:
      self.assertEqual(_options(profile_steps=value).profile_steps, expected)


class CommandLineTest(parameterized.TestCase):
  def _main(self, workdir, *flags):
    return subprocess.run(
      [
        sys.executable,
        "-m",
        "experiments.main",
        "--config=experiments/configs/mlp.py:synthetic",
        "--config.data.num_train=64",
        "--config.train.tensorboard=False",
        "--config.train.steps=3",
        "--config.train.batch_size=16",
        "--config.train.eval_every=3",
        "--config.train.log_every=1",
        f"--workdir={workdir}",
        *flags,
      ],
      cwd=REPO_ROOT,
      capture_output=True,
      text=True,
      timeout=300,
      env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )

  def test_every_config_family_has_the_throughput_keys_with_their_defaults(self):
    from experiments import configuration  # pylint: disable=g-import-not-at-top

    for method, dataset in [
      ("mlp", "bibtex"),
      ("e2e", "depth_scenes_32"),
      ("bilstm", "twitter_pos"),
      ("fcn", "weizmann_horse"),
    ]:
      options = choices.loop_options(configuration.get_config(method, dataset).train)
      self.assertEqual(
        (options.prefetch, options.async_checkpoint, options.profile_steps), (1, True, None)
      )

  def test_a_run_from_before_the_throughput_keys_resumes_with_any_of_them(self):
    from experiments import workdirs  # pylint: disable=g-import-not-at-top

    old = {"train": {"steps": 10}, "stages": {"fine": {"train": {"steps": 4}}}}
    new = {
      "train": {"steps": 10, "prefetch": 0, "async_checkpoint": False, "profile_steps": "2:4"},
      "stages": {"fine": {"train": {"steps": 4, "prefetch": 3}}},
    }
    self.assertEqual(workdirs.config_changes(old, new), [])

  def test_profile_steps_from_the_command_line_write_a_trace(self):
    workdir = self.create_tempdir().full_path
    proc = self._main(
      workdir,
      "--config.train.profile_steps=1:2",
      "--config.train.prefetch=2",
      "--config.train.async_checkpoint=False",
    )
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertLen(list(pathlib.Path(workdir, "profile").glob("plugins/profile/*/*.xplane.pb")), 1)

  def test_a_bad_profile_steps_is_one_line_and_exit_status_2(self):
    workdir = self.create_tempdir().full_path
    proc = self._main(workdir, "--config.train.profile_steps=5")
    self.assertEqual(proc.returncode, 2, proc.stderr[-3000:])
    self.assertNotIn("Traceback", proc.stderr)
    self.assertEqual(
      proc.stderr.strip().splitlines()[-1],
      "experiments.main: error: config.train: profile_steps must be 'start:stop' with "
      "0 <= start < stop, got '5'",
    )
    self.assertFalse(os.path.exists(os.path.join(workdir, "metrics.jsonl")))


if __name__ == "__main__":
  absltest.main()

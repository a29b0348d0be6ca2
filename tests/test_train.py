"""Training loop: determinism, kill-and-resume, NaN guard, batching (sharding across
devices and processes: tests/test_scale_out.py)."""

import dataclasses
import json
import os

from absl.testing import parameterized
import jax
import numpy as np
import optax

from energynets import train as train_lib
from energynets.data.batching import padded_batches
from energynets.data.batching import train_batch_indices
from energynets.nets import MLP
from energynets.objectives import local_bce
from experiments import choices
from experiments.choices.optimizers import make_optimizer


def _toy_data(n=256, d=12, labels=5, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)).astype(np.float32)
  y = (x[:, :labels] + 0.3 * rng.normal(size=(n, labels)) > 0).astype(np.float32)
  return {"x": x, "y": y}


def _objective(lr=1e-2):
  return local_bce(MLP((16,), 5, dropout=0.2), optax.adam(lr), l2=1e-4)


def _options(**kw):
  defaults = dict(
    steps=40,
    batch_size=32,
    seed=3,
    log_every=10,
    eval_every=10,
    checkpoint_every=20,
    select_metric="validation/loss",
    select_mode="min",
    tensorboard=False,
  )
  return train_lib.LoopOptions(**{**defaults, **kw})


def _evaluator(objective, data, crash_at=None):
  mesh = train_lib.make_mesh()
  predict = train_lib.build_predict(objective, mesh)

  def evaluate(state):
    p = train_lib.predict_in_batches(predict, state, data["x"], 64, mesh)
    if crash_at is not None and int(state["net"].opt_state[0].count) >= crash_at:
      raise KeyboardInterrupt("simulated kill")
    eps = 1e-6
    loss = -np.mean(data["y"] * np.log(p + eps) + (1 - data["y"]) * np.log(1 - p + eps))
    return {"validation/loss": float(loss)}

  return evaluate


def _leaves(state):
  return [np.asarray(v) for v in jax.tree_util.tree_leaves(state)]


def _jsonl(path):
  records = [json.loads(l) for l in open(path)]
  for r in records:
    r.pop("train/steps_per_sec", None)
  return records


class BatchingTest(parameterized.TestCase):
  def test_batches_are_a_function_of_seed_and_step(self):
    a = train_batch_indices(100, 16, seed=1, step=7)
    np.testing.assert_array_equal(a, train_batch_indices(100, 16, seed=1, step=7))
    self.assertFalse(np.array_equal(a, train_batch_indices(100, 16, seed=2, step=7)))

  def test_epoch_covers_each_example_once(self):
    idx = np.concatenate([train_batch_indices(96, 16, seed=0, step=s) for s in range(6)])
    self.assertEqual(sorted(idx.tolist()), list(range(96)))

  def test_batch_larger_than_data_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "exceeds"):
      train_batch_indices(10, 16, seed=0, step=0)

  def test_padded_batches_cover_all_rows(self):
    x = np.arange(10, dtype=np.float32)[:, None]
    got = [(b["x"].shape[0], n) for b, n in padded_batches({"x": x}, 4)]
    self.assertEqual(got, [(4, 4), (4, 4), (4, 2)])


class LoopTest(parameterized.TestCase):
  @parameterized.named_parameters(
    # Killed evaluating step 30: the best state is step 20's, that of the checkpoint.
    ("before_a_new_best", 30, 60, 20, 20),
    # Killed evaluating step 40, after step 30's state was saved as the best (and step
    # 20's deleted): the resumed run replays step 30 and keeps that state.
    ("after_a_new_best", 40, 60, 20, 30),
    # Killed evaluating step 20, before the first checkpoint: the run starts again and
    # replays step 10, whose state was saved as the best.
    ("before_the_first_checkpoint", 20, 60, None, 10),
  )
  def test_kill_and_resume_equals_uninterrupted(
    self, crash_at, steps, latest_at_kill, best_at_kill
  ):
    data = _toy_data()
    obj = _objective()
    options = _options(steps=steps)
    base = self.create_tempdir().full_path
    full = train_lib.fit(
      obj,
      data,
      options,
      os.path.join(base, "full"),
      validation=train_lib.Validation(_evaluator(obj, data)),
    )
    killed_dir = os.path.join(base, "killed")
    with self.assertRaises(KeyboardInterrupt):
      train_lib.fit(
        obj,
        data,
        options,
        killed_dir,
        validation=train_lib.Validation(_evaluator(obj, data, crash_at=crash_at)),
      )
    self.assertEqual(
      train_lib.Checkpointer(os.path.join(killed_dir, "checkpoints")).latest_step(),
      latest_at_kill,
    )
    self.assertEqual(
      train_lib.Checkpointer(os.path.join(killed_dir, "best")).latest_step(), best_at_kill
    )
    resumed = train_lib.fit(
      obj, data, options, killed_dir, validation=train_lib.Validation(_evaluator(obj, data))
    )
    for a, b in zip(_leaves(full.state), _leaves(resumed.state)):
      np.testing.assert_array_equal(a, b)
    self.assertEqual(full.selected_step, resumed.selected_step)
    self.assertEqual(full.history, resumed.history)
    self.assertEqual(
      _jsonl(os.path.join(base, "full", "metrics.jsonl")),
      _jsonl(os.path.join(killed_dir, "metrics.jsonl")),
    )

  @parameterized.parameters(False, True)
  def test_a_step_saved_again_replaces_the_earlier_save(self, async_save):
    # What a resumed run does when it replays a step that a killed run had saved.
    directory = self.create_tempdir().full_path
    checkpointer = train_lib.Checkpointer(directory, async_save=async_save)
    checkpointer.save(3, {"w": np.zeros(2, np.float32)}, {"value": 0.0})
    checkpointer.save(3, {"w": np.ones(2, np.float32)}, {"value": 1.0})
    state, meta = checkpointer.restore(3, {"w": np.zeros(2, np.float32)})
    checkpointer.close()
    np.testing.assert_array_equal(state["w"], np.ones(2))
    self.assertEqual((meta, train_lib.Checkpointer(directory).meta(3)), ({"value": 1.0},) * 2)

  def test_selects_best_validation_state(self):
    data = _toy_data()
    obj = _objective(lr=0.05)
    res = train_lib.fit(
      obj,
      data,
      _options(steps=60),
      self.create_tempdir().full_path,
      validation=train_lib.Validation(_evaluator(obj, data)),
    )
    losses = {h["step"]: h["validation/loss"] for h in res.history}
    self.assertEqual(res.selected_step, min(losses, key=losses.get))
    self.assertAlmostEqual(
      _evaluator(obj, data)(res.state)["validation/loss"], losses[res.selected_step], places=5
    )


class ValidationTest(parameterized.TestCase):
  def test_without_validation_the_default_options_return_the_last_state(self):
    options = train_lib.LoopOptions(steps=4, batch_size=32, tensorboard=False)
    res = train_lib.fit(_objective(), _toy_data(), options, self.create_tempdir().full_path)
    self.assertEqual(
      (res.final_step, res.selected_step, res.selected_value, res.history), (4, 4, None, [])
    )

  def test_a_select_metric_without_validation_is_an_error(self):
    workdir = self.create_tempdir().full_path
    with self.assertRaisesRegex(
      ValueError,
      r"^select_metric='validation/loss' has nothing to "
      r"evaluate: pass fit\(\.\.\., validation=Validation\(\.\.\.\)\) "
      r"or select_metric=None$",
    ):
      train_lib.fit(_objective(), _toy_data(), _options(), workdir)
    self.assertFalse(os.path.exists(os.path.join(workdir, "checkpoints")))

  def test_validation_rows_alone_evaluate_select_and_stop(self):
    data = _toy_data()
    options = train_lib.LoopOptions(
      steps=40, batch_size=32, eval_every=10, log_every=10, tensorboard=False
    )
    res = train_lib.fit(
      _objective(lr=0.05),
      data,
      options,
      self.create_tempdir().full_path,
      validation=train_lib.Validation(x=data["x"], y=data["y"]),
    )
    self.assertEqual([r["step"] for r in res.history], [10, 20, 30, 40])
    self.assertEqual(
      set(res.history[0]), {"step", "validation/example_f1", "validation/hamming_loss"}
    )
    f1 = {r["step"]: r["validation/example_f1"] for r in res.history}
    self.assertEqual(res.selected_value, max(f1.values()))
    self.assertEqual(f1[res.selected_step], res.selected_value)

  def test_validation_is_a_validation_value(self):
    with self.assertRaisesRegex(TypeError, "validation must be a Validation"):
      train_lib.fit(
        _objective(),
        _toy_data(),
        _options(),
        self.create_tempdir().full_path,
        validation={"x": np.zeros(2), "y": np.zeros(2)},
      )
    with self.assertRaisesRegex(ValueError, "needs both x and y"):
      train_lib.Validation(x=np.zeros(2))
    with self.assertRaisesRegex(ValueError, "needs evaluate="):
      train_lib.Validation()


class StagedTrainingTest(parameterized.TestCase):
  def test_next_stage_starts_from_previous_params_with_fresh_optimizer(self):
    data = _toy_data()
    first, second = _objective(lr=0.05), _objective(lr=1e-3)
    base = self.create_tempdir().full_path
    stage1 = train_lib.fit(
      first,
      data,
      _options(steps=20),
      os.path.join(base, "s1"),
      validation=train_lib.Validation(_evaluator(first, data)),
    )
    seen = {}

    def evaluate(state):
      # The first evaluation is the stage's starting state (step 0), the second step 10's.
      seen.setdefault("start", jax.tree_util.tree_map(np.asarray, state))
      if "start" in seen and int(state["net"].opt_state[0].count):
        seen.setdefault("first", jax.tree_util.tree_map(np.asarray, state))
      return _evaluator(second, data)(state)

    train_lib.fit(
      second,
      data,
      _options(steps=0 + 10, eval_every=10),
      os.path.join(base, "s2"),
      validation=train_lib.Validation(evaluate),
      previous_state=stage1.state,
    )
    # After 10 steps at a small rate the parameters moved, but only a little from stage 1's.
    start = jax.tree_util.tree_leaves(stage1.state["net"].params)
    after = jax.tree_util.tree_leaves(seen["first"]["net"].params)
    for a, b in zip(start, after):
      self.assertLess(np.max(np.abs(np.asarray(a) - b)), 0.05)
    self.assertEqual(int(seen["first"]["net"].opt_state[0].count), 10)
    self.assertEqual(int(seen["start"]["net"].opt_state[0].count), 0)
    for a, b in zip(start, jax.tree_util.tree_leaves(seen["start"]["net"].params)):
      np.testing.assert_array_equal(np.asarray(a), b)

  def test_objective_without_init_from_cannot_continue(self):
    obj = _objective()._replace(init_from=None)
    with self.assertRaisesRegex(ValueError, "first stage"):
      train_lib.build_init_from(obj, train_lib.make_mesh())


class NanGuardTest(parameterized.TestCase):
  def test_nan_loss_raises_and_last_checkpoint_is_finite(self):
    data = _toy_data()
    workdir = self.create_tempdir().full_path
    obj = _objective()
    opts = _options(steps=40, checkpoint_every=10, log_every=10, select_metric=None)
    train_lib.fit(obj, data, dataclasses.replace(opts, steps=20), workdir)
    poisoned = {"x": np.full_like(data["x"], np.nan), "y": data["y"]}
    with self.assertRaisesRegex(
      train_lib.NonFiniteLossError, r"non-finite loss at step 21 .*last good checkpoint is step 20"
    ):
      train_lib.fit(obj, poisoned, opts, workdir)
    ckpt = train_lib.Checkpointer(os.path.join(workdir, "checkpoints"))
    self.assertEqual(ckpt.latest_step(), 20)


class OptimizerTest(parameterized.TestCase):
  @parameterized.parameters("adam", "adamw", "sgd", "momentum")
  def test_known_optimizers_build(self, name):
    opt = make_optimizer(
      {"name": name, "learning_rate": 0.1, "schedule": "cosine", "warmup_steps": 2}, total_steps=10
    )
    opt.init({"w": np.zeros(3, np.float32)})

  def test_sgd_weight_decay_is_pytorchs(self):
    # PyTorch's SGD, written out: buf = μ·buf + (g + wd·w); w -= lr·buf.
    lr, mu, wd = 0.1, 0.9, 0.01
    opt = make_optimizer(
      {"name": "momentum", "learning_rate": lr, "momentum": mu, "weight_decay": wd}, total_steps=10
    )
    w = np.array([1.0, -2.0, 3.0])
    state = opt.init(w)
    ref_w, buf = w.copy(), np.zeros(3)
    for t in range(4):
      g = np.array([0.5, 0.1, -0.3]) * (t + 1)
      updates, state = opt.update(g, state, w)
      w = w + np.asarray(updates)
      buf = mu * buf + (g + wd * ref_w)
      ref_w = ref_w - lr * buf
      np.testing.assert_allclose(w, ref_w, rtol=1e-5)  # optax computes in float32
    with self.assertRaisesRegex(ValueError, "'adam' has no weight_decay"):
      make_optimizer({"name": "adam", "learning_rate": 0.1, "weight_decay": 0.1}, 10)

  def test_unknown_optimizer_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "unknown optimizer 'adamx'"):
      make_optimizer({"name": "adamx", "learning_rate": 0.1}, total_steps=10)

  def test_unknown_train_option_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "unknown train options"):
      choices.loop_options({"steps": 1, "batch_size": 2, "stpes": 3})

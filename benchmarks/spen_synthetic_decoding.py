r"""Where a trained SPEN loses accuracy on the synthetic block-exclusivity task.

The task's labels are one-hot within each block of 4 (SPEN §7.3), so two references
bound what test-time inference can reach from the learned energy:

- the per-block argmax of the energy's own local logits (a valid labeling, and the
  minimizer over {0,1}^L of an energy that enforces exactly one label per block);
- the rounded GBI output (what `ssvm` predicts, at 0.5) after a greedy descent on the
  *discrete* energy: repeatedly flip the single bit that lowers E most, until none
  does (at most `--flip_sweeps` flips);
- the exact minimizer of the learned energy over {0,1}^L, by enumerating all 2^L
  labelings (L = 16: 65536 per example; `ssvm.exact_infer`), the best any decoding of
  this energy can do.

For the run at `--run_dir` (an experiments.main run of spen_ssvm on synthetic), this
prints example-F1 at 0.5 of: GBI as trained (`predict_gbi`), the per-block argmax of the
local logits, the bit-flip polish of GBI's rounding and the exact discrete minimizer;
and, over test examples, how often the rounded GBI output is a valid one-hot-per-block
labeling and how often its energy is above the argmax labeling's or the gold labeling's.

  python -m benchmarks.spen_synthetic_decoding --run_dir=/tmp/syn/runs/base1500
"""

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common
from energynets import metrics
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.objectives import ssvm as ssvm_lib
from energynets.train import quiet_library_logs
from experiments import cli
from experiments.choices import gbi as gbi_choices

_RUN_DIR = flags.DEFINE_string("run_dir", None, "experiments.main run of spen_ssvm:synthetic")
_FLIP_SWEEPS = flags.DEFINE_integer("flip_sweeps", 20, "most single-bit flips per example")
flags.mark_flags_as_required(["run_dir"])

BLOCK = 4


def block_argmax(logits: np.ndarray) -> np.ndarray:
  """`[B, L] -> [B, L]`: one-hot of the largest logit within each block of `BLOCK`."""
  b, l = logits.shape
  winners = logits.reshape(b, l // BLOCK, BLOCK).argmax(-1)
  return np.eye(BLOCK, dtype=np.float32)[winners].reshape(b, l)


def greedy_bit_flips(energy_fn, params, encoding, y: jax.Array, sweeps: int) -> jax.Array:
  """Per example, `sweeps` times: flip the single bit that lowers E most, if any does."""
  b, l = y.shape
  tiled = jax.tree.map(lambda a: jnp.repeat(a, l, axis=0), encoding)

  def one_flip(y, _):
    flipped = jnp.abs(y[:, None, :] - jnp.eye(l, dtype=y.dtype)[None])  # [B, L, L]
    e = energy_fn(params, tiled, flipped.reshape(b * l, l)).reshape(b, l)
    best = jnp.argmin(e, axis=-1)
    lower = jnp.take_along_axis(e, best[:, None], 1)[:, 0] < energy_fn(params, encoding, y)
    return jnp.where(lower[:, None], flipped[jnp.arange(b), best], y), None

  return jax.lax.scan(one_flip, y, None, length=sweeps)[0]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  config = common.finished_run_config(_RUN_DIR.value)
  if config.data.name != "synthetic":
    raise ValueError(
      f"{_RUN_DIR.value} is a run on {config.data.name!r}; this diagnosis "
      "needs the synthetic block-exclusivity task"
    )
  _, dataset, energy, params, source, last = common.restore_spen_run(_RUN_DIR.value)
  energy_fn = protocol.as_energy(energy).energy
  x = jnp.asarray(dataset.test.x)
  gold = np.asarray(dataset.test.y)
  encoding = protocol.as_energy(energy).encode(params, x)
  gbi = ssvm_lib.infer(
    energy, params, x, gbi_choices.gbi_config(last.predict_gbi), init=last.loss.init
  )
  rounded = (np.asarray(gbi.y) >= 0.5).astype(np.float32)
  argmax = block_argmax(
    np.asarray(energy.apply({"params": params}, x, method=SPENEnergy.local_logits))
  )
  polished = np.asarray(
    jax.jit(greedy_bit_flips, static_argnums=(0, 4))(
      energy_fn, params, encoding, jnp.asarray(rounded), _FLIP_SWEEPS.value
    )
  )
  exact = np.asarray(jax.jit(lambda p, v: ssvm_lib.exact_infer(energy, p, v).y)(params, x))
  e = lambda y: np.asarray(energy_fn(params, encoding, jnp.asarray(y)))
  valid = (rounded.reshape(len(rounded), -1, BLOCK).sum(-1) == 1).all(-1)
  print(f"parameters: {source}")
  print(
    f"test example-F1 @0.5: GBI rounded {100 * metrics.example_f1(gold, rounded):.2f}, "
    f"per-block argmax of local logits {100 * metrics.example_f1(gold, argmax):.2f}, "
    f"GBI rounded + bit-flip descent {100 * metrics.example_f1(gold, polished):.2f}, "
    f"exact minimizer over {{0,1}}^{gold.shape[1]} "
    f"{100 * metrics.example_f1(gold, exact):.2f}"
  )
  print(
    f"exact minimizer equal to the argmax labeling: "
    f"{100 * np.mean(np.all(exact == argmax, axis=-1)):.1f}% of test examples, to the "
    f"rounded GBI output: {100 * np.mean(np.all(exact == rounded, axis=-1)):.1f}%"
  )
  print(
    f"rounded GBI output one-hot in every block: {100 * valid.mean():.1f}% of test "
    f"examples; its energy above the argmax labeling's: "
    f"{100 * np.mean(e(argmax) < e(rounded)):.1f}%, above the gold labeling's: "
    f"{100 * np.mean(e(gold) < e(rounded)):.1f}%; gold below the argmax labeling: "
    f"{100 * np.mean(e(gold) < e(argmax)):.1f}%"
  )


if __name__ == "__main__":
  cli.run(main)

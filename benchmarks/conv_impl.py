r"""Training-step cost of the denoising models with XLA's convolution vs im2col patches.

`energynets.nets.cnn.conv2d` computes a stride-1 convolution either with XLA's
convolution (`conv_impl='lax'`) or as one matmul over the k² shifted copies of the
input (`'patches'`); both have the same parameters and outputs (tests/
test_image_energies.py). End-to-end SPEN differentiates T GBI steps, each a gradient of
the energy, inside `lax.scan`; SSVM runs loss-augmented GBI in a scan too. On XLA's CPU
backend the convolutions that differentiating a convolution produces are slow there,
so 'auto' picks patches on CPU. This measures, in one run, one jitted training step
(`objective.update`, compile excluded, median of `--repeats` calls, the two
implementations called in turn so they share the machine's load) of each method's
experiments config on `--dataset`, and the ratio lax / patches.

  python -m benchmarks.conv_impl --out=results/e2e/conv_impl.md
"""

from collections.abc import Callable
from typing import Any

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from benchmarks import common
from experiments import builders
from experiments import cli
from experiments import configuration
from experiments import tasks

# (label, experiments method, overrides): the denoising models of results/e2e/e2e.md.
MODELS = {
  "DP-3": ("e2e", ()),
  "FOE-3": ("e2e", ("energy.kind=foe",)),
  "DP-SSVM": ("spen_ssvm", ()),
  "CNN": ("cnn_denoiser", ()),
}

_DATASET = flags.DEFINE_string("dataset", "depth_scenes_32", "denoising dataset variant")
_MODELS = flags.DEFINE_list("models", list(MODELS), "which models to time")
_REPEATS = flags.DEFINE_integer("repeats", 5, "timed calls per implementation")
_OVERRIDES = flags.DEFINE_multi_string(
  "overrides",
  [],
  "a key=value config override for every timed model (repeatable; the "
  "key must exist in each model's config, e.g. energy.kernel_size=3 for DP-3 and FOE-3)",
)
_OUT = flags.DEFINE_string("out", "", "also write the markdown table here")


def step_seconds(
  method: str, overrides: tuple[str, ...], dataset: str, repeats: int
) -> tuple[dict[str, float], int]:
  """(median seconds of one training step per `conv_impl`, on the same batch and state;
  the config's batch size)."""
  impl_key = "cnn.conv_impl" if method == "cnn_denoiser" else "energy.conv_impl"
  fns: dict[str, Callable[[], Any]] = {}
  for impl in ("lax", "patches"):
    config = configuration.get_config(
      method,
      dataset,
      [
        *overrides,
        f"{impl_key}={impl}",
        "data.num_train=64",
        "data.num_validation=1",
        "data.num_test=1",
      ],
    )
    data = tasks.task_for(config).load(config)
    objective = builders.build_objective(config, data)
    size = config.train.batch_size
    batch = {"x": jnp.asarray(data.train.x[:size]), "y": jnp.asarray(data.train.y[:size])}
    state = objective.init(jax.random.PRNGKey(0), batch)
    update = jax.jit(objective.update)
    fns[impl] = _one_step(update, state, batch)
  return common.median_seconds(fns, repeats), size


def _one_step(update: Callable, state: Any, batch: dict[str, Any]) -> Callable[[], Any]:
  """A call of `update` on this state and batch (the key made inside, as timed)."""
  return lambda: update(state, batch, jax.random.PRNGKey(1))


def main(argv):
  del argv
  rows = [
    "| model | method | batch | lax s/step | patches s/step | lax / patches |",
    "|---|---|---|---|---|---|",
  ]
  for label in _MODELS.value:
    if label not in MODELS:
      raise app.UsageError(f"unknown model {label!r}; expected some of {list(MODELS)}")
    method, overrides = MODELS[label]
    seconds, batch_size = step_seconds(
      method, (*overrides, *_OVERRIDES.value), _DATASET.value, _REPEATS.value
    )
    rows.append(
      f"| {label} | {method}{''.join(':' + o for o in overrides)} | "
      f"{batch_size} | {seconds['lax']:.3f} | "
      f"{seconds['patches']:.3f} | {seconds['lax'] / seconds['patches']:.2f}× |"
    )
    print(rows[-1], flush=True)
  body = (
    f"One training step (compile excluded, median of {_REPEATS.value}) of each "
    f"denoising model's experiments config on `{_DATASET.value}`"
    f"{' with ' + ', '.join(_OVERRIDES.value) if _OVERRIDES.value else ''}, with "
    f"the convolutions computed by XLA (`conv_impl=lax`) and as im2col matmuls "
    f"(`patches`), timed in turn in one process. Machine: "
    f"{common.machine_description()}.\n\n" + "\n".join(rows)
  )
  print(body)
  if _OUT.value:
    common.write_report(_OUT.value, "benchmarks.conv_impl", body)


if __name__ == "__main__":
  cli.run(main)

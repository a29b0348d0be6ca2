"""SPEN diagnostics added to a run's results: search statistics and the measurement plot.

`test_diagnostics` adds, for the methods of `DIAGNOSTICS`, extra test-split numbers to
results.json (SPEN §7.4: GBI steps per example and search error);
`write_measurement_figure` plots a SPEN energy's label-measurement matrix next to it.
"""

from collections.abc import Callable
import os

import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from energynets import objectives
from energynets.train import storage
from experiments import builders
from experiments import plots
from experiments import tasks
from experiments.choices import gbi as gbi_choices


def _ssvm_search_statistics(config, dataset, state) -> dict[str, float]:
  """SPEN §7.4 on the test split: GBI steps per example and search error."""
  energy = builders.energy_module(config, dataset)
  gbi_config = gbi_choices.gbi_config(config.predict_gbi)
  stats = jax.jit(
    lambda p, x, y: objectives.search_statistics(energy, p, x, y, gbi_config, init=config.loss.init)
  )
  params, x, y = state["energy"].params, dataset.test.x, dataset.test.y
  if jax.process_count() > 1:
    # Each process scores the test rows it holds, on its own devices, with a host copy
    # of the parameters; the per-process statistics are combined below.
    params = multihost_utils.process_allgather(params, tiled=True)
  # What the energy scores (segmentation's crops: statistics per crop).
  task = tasks.task_for(config)
  x, y = (task.rows_for_model(config, a) for a in (x, y))
  batch = config.train.eval_batch_size
  parts = [
    (len(x[i : i + batch]), stats(params, x[i : i + batch], y[i : i + batch]))
    for i in range(0, len(x), batch)
  ]
  names = sorted(parts[0][1] if parts else jax.eval_shape(stats, params, x[:1], y[:1]))
  means = [k for k in names if k != "gbi_steps_max"]
  total = sum(n for n, _ in parts)
  out = {f"test/{k}": sum(n * float(v[k]) for n, v in parts) / max(total, 1) for k in means}
  out["test/gbi_steps_max"] = float(max((int(v["gbi_steps_max"]) for _, v in parts), default=0))
  if jax.process_count() > 1:
    # Every process's [rows, means, largest step count], combined weighted by rows. The
    # gather is float32: each float64 travels as a float32 and its float32 remainder.
    local = np.asarray([total, *(out[f"test/{k}"] for k in means), out["test/gbi_steps_max"]])
    high = local.astype(np.float32)
    pair = np.stack([high, (local - high).astype(np.float32)])
    every = np.asarray(multihost_utils.process_allgather(pair), np.float64).sum(1)
    rows = every[:, 0]
    out = {f"test/{k}": float(rows @ every[:, 1 + i] / rows.sum()) for i, k in enumerate(means)}
    out["test/gbi_steps_max"] = float(every[:, -1].max())
  return out


# config.method of the reported stage -> extra test diagnostics added to results.json.
DIAGNOSTICS: dict[str, Callable[..., dict[str, float]]] = {
  "ssvm": _ssvm_search_statistics,
  "dvn": _ssvm_search_statistics,  # the same SPEN state, predict_gbi and loss.init
}


def measurement_kernel(state) -> np.ndarray | None:
  """C1ᵀ `[L, M]` of a SPEN energy's label-measurement term, if the state has one."""
  try:
    return np.asarray(state["energy"].params["global"]["measurements"]["kernel"])
  except (KeyError, TypeError, AttributeError):
    return None


def test_diagnostics(config: ml_collections.ConfigDict, dataset, state) -> dict[str, float]:
  """The extra test metrics of the reported stage's method (`DIAGNOSTICS`), else none.

  Args:
    config: the config of the training stage the run reports (`meta.selected_stage`).
    dataset: the task's dataset.
    state: the trained (selected) state.

  Returns:
    `"test/<name>" -> value` to add to the results; empty for other methods.
  """
  diagnostics = DIAGNOSTICS.get(config.method)
  return {} if diagnostics is None else diagnostics(config, dataset, state)


def write_measurement_figure(
  config: ml_collections.ConfigDict, dataset, state, workdir: str | os.PathLike
) -> list[str]:
  """Plots a SPEN energy's label-measurement matrix C1 to `workdir/measurement_matrix.png`.

  Args:
    config: the run's config (its method and energy activation title the figure).
    dataset: the task's dataset.
    state: the trained state.
    workdir: the run's directory (local, or a URL such as `gs://bucket/run`).

  Returns:
    The file names written under `workdir`: the figure, or none when the state has no
    measurement matrix.
  """
  measurements = measurement_kernel(state)
  if measurements is None:
    return []
  figure = storage.workdir_path(workdir) / "measurement_matrix.png"
  plots.plot_measurement_matrix(
    measurements,
    figure,
    f"C1 of {config.method} on {dataset.name} ({config.get('energy', {}).get('activation', '')})",
  )
  return [figure.name]

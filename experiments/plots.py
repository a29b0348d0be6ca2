"""Figures written next to a run's results (matplotlib, headless)."""

import os
from typing import Any

import numpy as np

from energynets.train import storage


def pyplot():
  """matplotlib.pyplot on the headless Agg backend, imported on first use: it costs most
  of a second, and most runs (every test subprocess among them) draw no figure."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")  # no display on training machines
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  return plt


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 100) -> None:
  """Writes `fig` to `path` (local, a `file://` URL or an `etils.epath` URL such as
  `gs://bucket/f.png`) in the format its suffix names, and closes it.

  Args:
    fig: the figure.
    path: the file to write; `.png`, `.pdf`, `.svg`, ...
    dpi: resolution of raster formats.

  Raises:
    storage.StorageUnavailableError: a URL this installation cannot write (`gs://`
      without gcsfs).
  """
  target = storage.path(path)
  # matplotlib writes to a file object when given one, never to the path itself.
  with target.open("wb") as f:
    fig.savefig(f, format=target.suffix.lstrip(".") or "png", dpi=dpi)
  pyplot().close(fig)


def plot_measurement_matrix(kernel: np.ndarray, path: str | os.PathLike, title: str = "") -> None:
  """SPEN Fig. 1: the label-measurement matrix C1 (measurements × labels) as a heat map.

  `kernel` is the Dense kernel `[num_labels, num_measurements]` (C1ᵀ). Rows are
  measurements, columns labels; a diverging color map centred at 0 shows which labels
  each measurement adds up (block structure on the synthetic task).
  """
  c1 = np.asarray(kernel).T
  bound = float(np.abs(c1).max()) or 1.0
  width = max(4.0, 0.35 * c1.shape[1] + 1.5)
  fig, ax = pyplot().subplots(figsize=(min(width, 16.0), 0.35 * c1.shape[0] + 1.5))
  image = ax.imshow(
    c1, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto", interpolation="nearest"
  )
  ax.set_xlabel("label")
  ax.set_ylabel("measurement")
  ax.set_title(title or "label-measurement matrix C1")
  fig.colorbar(image, ax=ax)
  fig.tight_layout()
  save_figure(fig, path)


def plot_segmentation_masks(
  images: np.ndarray,
  gold: np.ndarray,
  predictions: dict[str, np.ndarray],
  path: str | os.PathLike,
  scores: dict[str, np.ndarray] | None = None,
) -> None:
  """A grid of test images: one row per image with the image, its gold mask and each
  model's mask at 0.5 (columns in `predictions` order), titled with the per-image IoU
  when `scores` (`name -> [N]`) are given.

  Args:
    images: `[N, H, W, 3]` RGB in [0, 1] (undo the loader's normalization first).
    gold: `[N, H, W]` masks in {0, 1}.
    predictions: model name -> `[N, H, W]` soft masks.
    path: the PNG to write.
    scores: optional model name -> `[N]` IoU of each image.
  """
  n = len(images)
  columns = 2 + len(predictions)
  fig, axes = pyplot().subplots(n, columns, figsize=(1.6 * columns, 1.6 * n), squeeze=False)
  for i in range(n):
    panels = [("image", np.clip(images[i], 0.0, 1.0)), ("gold", gold[i])]
    panels += [(name, (probs[i] >= 0.5).astype(np.float32)) for name, probs in predictions.items()]
    for j, (name, panel) in enumerate(panels):
      ax = axes[i, j]
      ax.imshow(
        panel, cmap=None if panel.ndim == 3 else "gray", vmin=0.0, vmax=1.0, interpolation="nearest"
      )
      ax.set_xticks([])
      ax.set_yticks([])
      title = name if i == 0 else ""
      if scores is not None and name in scores:
        title = f"{title}\nIoU {100 * scores[name][i]:.1f}".strip()
      ax.set_title(title, fontsize=7)
  fig.tight_layout()
  save_figure(fig, path)

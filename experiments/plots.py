"""Figures written next to a run's results (matplotlib, headless)."""

import matplotlib

matplotlib.use("Agg")  # no display on training machines
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np


def plot_measurement_matrix(kernel: np.ndarray, path: str, title: str = "") -> None:
  """SPEN Fig. 1: the label-measurement matrix C1 (measurements × labels) as a heat map.

  `kernel` is the Dense kernel `[num_labels, num_measurements]` (C1ᵀ). Rows are
  measurements, columns labels; a diverging color map centred at 0 shows which labels
  each measurement adds up (block structure on the synthetic task).
  """
  c1 = np.asarray(kernel).T
  bound = float(np.abs(c1).max()) or 1.0
  width = max(4.0, 0.35 * c1.shape[1] + 1.5)
  fig, ax = plt.subplots(figsize=(min(width, 16.0), 0.35 * c1.shape[0] + 1.5))
  image = ax.imshow(c1, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto",
                    interpolation="nearest")
  ax.set_xlabel("label")
  ax.set_ylabel("measurement")
  ax.set_title(title or "label-measurement matrix C1")
  fig.colorbar(image, ax=ax)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)

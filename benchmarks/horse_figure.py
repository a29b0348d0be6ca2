r"""The Weizmann-horse figure: test images with their gold masks and the masks of
finished segmentation runs, read from each run's `test_predictions.npz`
(written by `experiments.train.train_and_evaluate`), so nothing is retrained.

  python -m benchmarks.horse_figure --data_dir=DATA \
      --runs=FCN=/tmp/horse/fcn,SEAL=/tmp/horse/seal_dynamic \
      --out=results/seal/horses_masks.png

Images are `--num_images` test images evenly spaced over the test split's order (no
selection by result), each panel titled with the image's IoU.
"""

import os

from absl import flags
import numpy as np

from benchmarks import RESULTS_DIR
from energynets import metrics
from energynets.data import segmentation
from experiments import cli
from experiments import plots
from experiments import train


def parse_runs(specs: list[str]) -> dict[str, str]:
  """`["NAME=DIR", ...]` -> `{NAME: DIR}` in order; malformed or repeated names raise."""
  runs = {}
  for spec in specs:
    name, sep, run_dir = spec.partition("=")
    if not sep or not name or not run_dir:
      raise ValueError(f"--runs entries are NAME=RUN_DIR; got {spec!r}")
    if name in runs:
      raise ValueError(f"--runs names {name!r} twice")
    runs[name] = run_dir
  return runs


def load_test_predictions(run_dir: str, num_test: int) -> np.ndarray:
  """A finished run's soft test masks `[N, H, W]` (float32)."""
  path = os.path.join(run_dir, train.PREDICTIONS_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(
      f"{path} is missing: the run at {run_dir} has not finished, "
      "or predates saved test predictions (rerun it: a finished "
      "run resumes at its last step and only re-evaluates)"
    )
  with np.load(path) as f:
    probs = f["test"].astype(np.float32)
  if probs.ndim != 3 or len(probs) != num_test:
    raise ValueError(
      f"{path} holds test predictions of shape {probs.shape}; expected [{num_test}, H, W]"
    )
  return probs


def make_figure(dataset, runs: dict[str, str], num_images: int, out: str) -> dict[str, float]:
  """Writes the figure; returns each run's mean IoU over the whole test split."""
  test = dataset.test
  predictions = {name: load_test_predictions(d, len(test.y)) for name, d in runs.items()}
  index = np.linspace(0, len(test.y) - 1, num_images).round().astype(int)
  images = test.x[index] * dataset.std + dataset.mean  # undo the normalization
  scores = {name: metrics.per_image_iou(p[index], test.y[index]) for name, p in predictions.items()}
  plots.plot_segmentation_masks(
    images / 255.0, test.y[index], {name: p[index] for name, p in predictions.items()}, out, scores
  )
  return {name: metrics.mean_iou(p, test.y) for name, p in predictions.items()}


def _define_flags():
  # Defined only when run as a program: the tests import this module next to other
  # absl programs whose flags share these names.
  flags.DEFINE_list(
    "runs",
    None,
    "NAME=RUN_DIR per model, in column order (e.g. the baseline first, the best model last)",
  )
  flags.DEFINE_string("data_dir", "", "data directory (else $ENERGYNETS_DATA_DIR)")
  flags.DEFINE_string("dataset", "weizmann_horse", "registered segmentation set")
  flags.DEFINE_integer("num_images", 8, "test images to show")
  flags.DEFINE_string(
    "out", os.path.join(RESULTS_DIR, "seal", "horses_masks.png"), "the PNG to write"
  )
  flags.mark_flags_as_required(["runs"])


def main(argv):
  del argv
  f = flags.FLAGS
  dataset = segmentation.load_segmentation(f.dataset, data_dir=f.data_dir or None)
  means = make_figure(dataset, parse_runs(f.runs), f.num_images, f.out)
  for name, value in means.items():
    print(f"{name}: test mean IoU {100 * value:.2f}")
  print(f"wrote {f.out}")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)

r"""PSNR of the classical denoising baselines on depth scenes and natural images.

The reference rows for the denoising experiments (the end-to-end SPEN paper's Table 1
lists BM3D beside its energy models): the noisy input, a median filter ("elementary
signal processing"), total variation and BM3D, on the default `depth_scenes` dataset
(validation and test) and on the natural-image test crops. The median window and the TV
weight are tuned on depth-scene validation PSNR and applied unchanged everywhere, as a
model trained on depth scenes would be; BM3D is given the true noise sigma.

  python -m benchmarks.denoising_baselines --out=results/e2e/denoising_baselines.md

BM3D takes 1-2 s per 64 x 64 image on one CPU core, so the default run takes minutes.
"""

import json
import os
import time

from absl import app
from absl import flags

from benchmarks import common
from energynets import metrics
from energynets.baselines import denoising as baselines
from energynets.data import denoising
from experiments import cli
from experiments.choices import lookup

_NUM_VALIDATION = flags.DEFINE_integer(
  "num_validation", denoising.DEFAULT_NUM_VALIDATION, "depth-scene validation images"
)
_NUM_TEST = flags.DEFINE_integer("num_test", denoising.DEFAULT_NUM_TEST, "depth-scene test images")
_HEIGHT = flags.DEFINE_integer("height", denoising.DEFAULT_HEIGHT, "image rows")
_WIDTH = flags.DEFINE_integer("width", denoising.DEFAULT_WIDTH, "image columns")
_SIGMA = flags.DEFINE_float(
  "noise_sigma", denoising.DEFAULT_NOISE_SIGMA, "Gaussian noise std in the [0, 1] value scale"
)
_SEED = flags.DEFINE_integer("seed", denoising.DEFAULT_SEED, "generator seed")
_CROPS = flags.DEFINE_integer(
  "crops_per_image", denoising.DEFAULT_CROPS_PER_IMAGE, "natural-image test crops per image"
)
# --methods names -> the baselines.
BASELINES = {baseline.name: baseline for baseline in baselines.BASELINES}
_METHODS = flags.DEFINE_list("methods", list(BASELINES), "baselines to run")
_OUT = flags.DEFINE_string(
  "out", "", "also write the markdown table here (and the numbers as JSON next to it, .json)"
)


def _psnr_and_seconds(method: baselines.Baseline, param, split) -> tuple[float, float]:
  started = time.perf_counter()
  estimate = method.denoise(split.x) if method.parameter is None else method.denoise(split.x, param)
  seconds = (time.perf_counter() - started) / split.num_examples
  return metrics.psnr(split.y, estimate), seconds


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  kwargs = dict(
    num_train=0,
    num_validation=_NUM_VALIDATION.value,
    height=_HEIGHT.value,
    width=_WIDTH.value,
    noise_sigma=_SIGMA.value,
    seed=_SEED.value,
  )
  # The baselines do not train, and held-out splits do not depend on num_train, so
  # num_train=0 gives the default dataset's validation and test images exactly.
  depth = denoising.load_denoising("depth_scenes", num_test=_NUM_TEST.value, **kwargs)
  natural = denoising.load_denoising("natural_images", crops_per_image=_CROPS.value, **kwargs)
  # Tuning (validation only) and the depth-scene numbers.
  methods = [lookup("baseline", BASELINES, name) for name in _METHODS.value]
  results = baselines.evaluate_baselines(depth, methods=methods)
  rows = []
  for method in methods:
    res = results[method.name]
    param = None if method.parameter is None else res[method.parameter]
    if method.grid is not None and all(isinstance(v, int) for v in method.grid):
      param = int(param)  # a window size, recorded as a float
    nat_psnr, seconds = _psnr_and_seconds(method, param, natural.test)
    res["natural_test/psnr"] = nat_psnr
    res["seconds_per_image"] = seconds
    rows.append(
      (
        method.name,
        "" if param is None else f"{method.parameter}={param:g}",
        res["validation/psnr"],
        res["test/psnr"],
        nat_psnr,
        seconds,
      )
    )

  header = (
    "| method | parameter | depth validation PSNR | depth test PSNR | natural test "
    "PSNR | s / image |"
  )
  lines = [header, "|---|---|---|---|---|---|"]
  for method, param, val, test, nat, secs in rows:
    lines.append(f"| {method} | {param} | {val:.2f} | {test:.2f} | {nat:.2f} | {secs:.3f} |")
  table = "\n".join(lines)
  print(table)
  if _OUT.value:
    counts = depth.meta["counts"]
    images = sorted({r["image"] for r in natural.meta["test_crops"]})
    body = (
      f"Denoising baselines. Depth scenes: `load_denoising('depth_scenes')`, "
      f"{_HEIGHT.value}x{_WIDTH.value}, {counts['validation']} validation / "
      f"{counts['test']} test images, seed {_SEED.value}. Natural: "
      f"{natural.test.num_examples} {_HEIGHT.value}x{_WIDTH.value} crops (up to "
      f"{_CROPS.value} per image) of the scikit-image images {', '.join(images)}. "
      f"Gaussian noise sigma {_SIGMA.value:g} in the [0, 1] value scale, not clipped; "
      f"PSNR in dB, peak 1, mean over images of per-image PSNR; estimates not clipped. "
      f"median size and TV weight tuned on depth validation PSNR, applied unchanged "
      f"to test and natural; BM3D (`bm3d` package, both stages) given the true sigma. "
      f"Seconds per image on natural crops, one process. Machine: "
      f"{common.machine_description()}.\n\n{table}\n\n"
      f"For scale (not the same data): on 7-Scenes depth the paper reports BM3D "
      f"35.46 dB, its best SPEN (DP-3) 40.4 dB, and ~30 dB for elementary signal "
      f"processing (Belanger, Yang & McCallum 2017, Table 1 and §6.1.3)."
    )
    common.write_report(_OUT.value, "benchmarks.denoising_baselines", body)
    record = {
      "meta": {
        "depth": depth.meta,
        "natural": {k: v for k, v in natural.meta.items() if k != "test_crops"},
        "natural_test_crops": natural.meta["test_crops"],
        "psnr": "mean over images of 10 log10(1 / MSE_i), dB",
      },
      **{f"{m}/{k}": v for m, res in results.items() for k, v in res.items()},
    }
    with open(os.path.splitext(_OUT.value)[0] + ".json", "w") as f:
      json.dump(record, f, indent=1)


if __name__ == "__main__":
  cli.run(main)

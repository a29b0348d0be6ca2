"""The feed-forward CNN denoiser of E2E-SPEN §6.1.3, trained with per-pixel MSE.

--config=experiments/configs/cnn_denoiser.py:depth_scenes

"A feed-forward convnet with a similar architecture to our DeepPrior, but without
spatial pooling": `nets.CNNDenoiser` has the DeepPrior trunk's kernels (7×7×32 softplus,
7×7×32 softplus, 1×1) and predicts a residual, ŷ = x + net(x), so a comparison with the
DeepPrior energy isolates energy-based inference from network capacity. The optimizer
and step budget are this project's choice (the paper gives none for the baseline): the
same Adam, batch and steps as the energies' configs.

`cnn.normalize_input`: the trunk sees x standardized by the training images' mean and
std (`experiments.builders.denoising_input_statistics`). Without it, on the [0, 1] images,
the residual net stayed at the identity for its first ~300 steps and ended below the
median filter (26.90 dB test, the row before input standardization in results/e2e/e2e.md).
"""

import ml_collections

from experiments.configs import base

TASKS = ("denoising",)


def get_config(dataset: str = "depth_scenes"):
  config = base.get_denoising_base_config(dataset)
  config.method = "local_squared_error"
  config.cnn = ml_collections.ConfigDict(
    dict(
      features=(32, 32),
      kernel_size=7,
      activation="softplus",
      padding="REFLECT",
      normalize_input=True,
      conv_impl="auto",
    )
  )
  return config

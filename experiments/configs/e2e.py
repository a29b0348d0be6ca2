"""End-to-end SPEN (Belanger, Yang & McCallum 2017) on multi-label data, in 3 stages.

--config=experiments/configs/e2e.py:<dataset> --workdir=DIR [--config.data.data_dir=DATA]
--config=experiments/configs/e2e.py:depth_scenes   (denoising, E2E-SPEN §6.1; see below)

The SPEN energy of spen_ssvm.py (same feature network, local head and label-measurement
term) trained by back-propagating a per-iterate BCE loss through T unrolled GBI steps
(objective `e2e`, energynets/objectives/e2e.py). Stages (the staged training of
spen_ssvm.py, with the SSVM hinge replaced by the unrolled loss):

1. `pretrain`: features and local head with per-label BCE (`spen_pretrain`, the MLP
   baseline);
2. `energy`: features and local head clamped, the measurement energy and the step sizes
   trained through the unroll;
3. `joint`: everything fine-tuned through the unroll with a small learning rate.

Assumptions (the E2E paper reports no multi-label experiment; these follow its
recommendations and its SRL configuration, the discrete-output task it does report):

- inference: T = 20 steps of logit-space descent (Eq. 8, the form the paper prefers for
  unrolled training; `gbi.method='mirror'` is the alternative), no momentum (the SRL
  system "trains per-iteration learning rates, uses no momentum, and unrolls Eq. (8)"),
  per-step sizes η_t learned (softplus-parameterized, initial η = 1.0 on the logits — an
  assumption: logit-space gradients are scaled by σ'(z) ≤ 1/4) with their own Adam
  (`step_size_optimizer`, learning rate 1e-2), entropy smoothing off
  (`gbi.entropy_weight`, §4.2 recommends it for simplex outputs);
- start: y_0 = σ(local logits) (Eq. 10, `Init(F(x))`), differentiable, so the local
  head also learns through the unroll in the joint stage;
- loss: BCE on every iterate with w_t = 1/(T − t + 1) (Eq. 9); test-time prediction is
  the same 20 steps with the trained step sizes (§4.2), not a convergence loop;
- energy: measurement activation softplus (the E2E objective rejects ReLU/HardTanh;
  §5), 15 measurements (5 for delicious); the feature network keeps ReLU and dropout
  0.5 (it runs once before inference, outside the Hessian);
- gradient: 'adjoint', the backward pass of the unrolled steps by Hessian-vector products
  (`e2e.gradient`; 'scan', reverse mode through the scan, and 'remat' give the same
  update to rounding; their cost: results/e2e/e2e_gradients*.md).
"""

import ml_collections

from experiments.choices import gbi
from experiments.choices import objectives
from experiments.choices import optimizers
from experiments.configs import base
from experiments.configs import spen_ssvm

TASKS = ("multilabel", "denoising")  # variants: multi-label datasets, depth_scenes


def get_config(dataset: str = "synthetic"):
  return base.config_for_task(
    dataset, multilabel=get_multilabel_config, denoising=get_denoising_config
  )


def get_multilabel_config(dataset: str) -> ml_collections.ConfigDict:
  """The config of a multi-label dataset variant."""
  config = base.get_base_config(dataset)
  config.method = "e2e"
  config.energy = spen_ssvm.get_config(dataset).energy
  # The synthetic variant of spen_ssvm uses HardTanh measurements (SPEN §7.3), which
  # unrolled training cannot use: softplus everywhere.
  config.energy.activation = "softplus"
  # trainable: comma-separated parameter groups the stage updates ("" = all of them).
  config.loss = ml_collections.ConfigDict(dict(l2=1e-5, l2_c=0.0, trainable=""))
  # 'adjoint': at the training batch, faster than 'scan' and half its scratch memory
  # (results/e2e/e2e_gradients_batch128.md).
  config.e2e = objectives.e2e_block(gradient="adjoint", init="local")
  config.gbi = gbi.train_block(method="logit", optimizer="sgd", learning_rate=1.0, momentum=0.0)
  config.step_size_optimizer = optimizers.block(learning_rate=1e-2)
  base.spen_stages(config, "e2e")
  return config


def get_denoising_config(dataset: str = "depth_scenes"):
  """E2E-SPEN's denoising energies trained through T unrolled GBI steps (§6.1).

  `energy.kind`: 'deep_prior' or 'foe' (`base.denoising_energy`). GBI: plain gradient descent on the
  real-valued image from y_0 = x (`e2e.init='input'`) with learned per-step sizes; the
  loss is the per-pixel squared error of the iterates. The paper's rows are overrides:

  - DP-3: the defaults (T = 3, final-iterate loss, no momentum); DP-20:
    `gbi.num_steps=20:gbi.optimizer=momentum:gbi.momentum=0.25` (§6.1.3);
  - FOE-3: `energy.kind=foe:gbi.num_steps=3`;
  - FOE-20: `energy.kind=foe:gbi.num_steps=20:gbi.optimizer=momentum:gbi.momentum=0.75:
    e2e.learn_step_sizes=False` (learned η_t is what FOE-20+ adds);
  - FOE-20+: `...:gbi.momentum=0.25:e2e.per_iterate=True` (per-iterate average loss).

  CPU-sized choices (the paper trains on 96×128 crops of 7-Scenes on a GPU): 64×64
  generated scenes (`depth_scenes_32`: 32×32, the table in results/e2e/e2e.md),
  batch 8; the initial step size
  η = 0.1 is an assumption (the data term alone has curvature 1/σ² ≈ 200 per pixel at
  σ = 0.07, so steps of the order of σ² make progress without diverging).
  """
  config = base.get_denoising_base_config(dataset)
  config.method = "e2e"
  sigma2 = config.data.noise_sigma**2
  base.use_denoising_energy(config)
  config.loss = ml_collections.ConfigDict(dict(l2=0.0, l2_c=0.0, trainable=""))
  config.e2e = objectives.e2e_block(
    loss="squared", per_iterate=False, init="input", loss_reduction="mean"
  )
  # `momentum` is held for the DP-20 / FOE-20 overrides (docstring).
  config.gbi = gbi.train_block(
    method="projected", optimizer="sgd", learning_rate=sigma2, momentum=0.0, num_steps=3
  )
  config.step_size_optimizer = optimizers.block(learning_rate=1e-2)
  return config


def get_search_space(dataset: str = "synthetic"):
  """spen_ssvm.py's search space, whose energy, stages and energy-stage learning rate
  E2E-SPEN shares: the feature network's capacity, the pretrain and energy stages'
  learning rates, L2, the feature scaling."""
  return spen_ssvm.get_search_space(dataset)

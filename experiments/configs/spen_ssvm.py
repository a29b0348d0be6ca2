"""SPEN (Belanger & McCallum 2016): SSVM training with loss-augmented GBI, in 3 stages.

--config=experiments/configs/spen_ssvm.py:<dataset>

Stages (SPEN §4, A.4): `pretrain` the features and local head with per-label BCE (the
MLP baseline, same network as experiments/configs/mlp.py), `energy`: clamp them and
train the label-measurement energy with the SSVM hinge, `joint`: fine-tune everything
with a small learning rate. Inference (training and test): entropic mirror descent,
momentum 0.95, learning rate 0.1 (A.5); test-time inference runs to per-example
convergence, with an optional entropy temperature (`predict_gbi.entropy_weight`) or
annealing (`predict_gbi.entropy_anneal_init` / `entropy_anneal_steps`, on synthetic).
Measurements: 15 for bibtex, 5 for delicious (§7.1); Yeast uses a linear feature
network (§7.2).
"""

import ml_collections

from experiments import search_spaces
from experiments.choices import gbi
from experiments.choices import objectives
from experiments.configs import base

# + depth_scenes, twitter_pos, conll2003, weizmann_horse
TASKS = ("multilabel", "denoising", "sequence", "segmentation")


def mirror_gbi(
  config: ml_collections.ConfigDict, learning_rate: float, momentum: float, max_steps: int
) -> None:
  """`config.gbi` (loss-augmented inference in training: 20 steps) and
  `config.predict_gbi` (test: to convergence, tolerance 1e-4, at most `max_steps`), in
  place: entropic mirror descent with momentum, the same step at training and test. Both
  hold the entropy annealing keys (the synthetic variant anneals at test)."""
  step = dict(
    method="mirror",
    optimizer="momentum",
    learning_rate=learning_rate,
    momentum=momentum,
    entropy_anneal_init=0.0,
    entropy_anneal_steps=0,
  )
  config.gbi = gbi.train_block(**step)
  config.predict_gbi = gbi.predict_block(**step, max_steps=max_steps)


def get_config(dataset: str = "synthetic"):
  return base.config_for_task(
    dataset,
    multilabel=get_multilabel_config,
    denoising=get_denoising_config,
    segmentation=get_segmentation_config,
    sequence=get_sequence_config,
  )


def get_multilabel_config(dataset: str) -> ml_collections.ConfigDict:
  """The config of a multi-label dataset variant."""
  config = base.get_base_config(dataset)
  config.method = "ssvm"
  config.energy = ml_collections.ConfigDict(
    dict(
      feature_hidden=(1024, 1024),
      feature_activation="relu",
      num_measurements=5 if dataset == "delicious" else 15,
      activation="softplus",
      num_conditional=0,
      dropout=0.5,
      input_dropout=0.5,
      **base.OUTSIDE_ENERGY,
    )
  )
  if dataset == "yeast":
    config.energy.feature_hidden = ()
    config.energy.dropout = config.energy.input_dropout = 0.0
  if dataset == "synthetic":
    # §7.3: linear local energy (so the global term must capture every label
    # interaction) and a global energy of 4 HardTanh measurements.
    config.energy.update(
      dict(
        feature_hidden=(), dropout=0.0, input_dropout=0.0, num_measurements=4, activation="hardtanh"
      )
    )
  # trainable: comma-separated parameter groups the stage updates ("" = all of them).
  # loss_aug_init: comma-separated starts of loss-augmented GBI (uniform, local, gold;
  # several: the most violating final iterate per example); "" = same as init.
  # loss_aug_solver / predict_solver: "gbi", or "exhaustive" (exact over {0,1}^L by
  # enumeration, for L <= 20: the synthetic task and yeast).
  config.loss = objectives.ssvm_block(
    l2=1e-5, l2_c=0.0, loss_aug_solver="gbi", predict_solver="gbi"
  )
  mirror_gbi(config, learning_rate=0.1, momentum=0.95, max_steps=100)
  base.spen_stages(config, "ssvm")
  if dataset == "yeast":
    # SPEN Table 2 follows Finley & Joachims (2008), whose SSVMs train with the Hamming
    # loss; `l1` is its linear relaxation. Chosen on mean validation Hamming over the 10
    # folds (results/spen/spen.md, "Yeast").
    config.loss.surrogate = "l1"
  if dataset == "synthetic":
    # Chosen on validation example-F1 at 1.5k training examples (results/spen/spen.md,
    # "Synthetic block exclusivity" and "The original config"): GBI from the local
    # logits, a larger l2, the energy stage at 3e-2 (at 1e-2 the global term's training
    # depends on the seed), a long joint stage at 1e-3, 50 loss-augmented steps.
    config.loss.update(dict(l2=1e-4, init="local"))
    # Test-time GBI anneals the entropy (τ from 3 down by 1000× over 300 steps, then
    # 100 more at τ = 0): on this non-convex energy plain mirror descent from the local
    # start stops at a worse vertex in ~13% of test examples (results/spen/spen.md,
    # "Annealed test-time GBI").
    config.predict_gbi.update(
      dict(
        learning_rate=0.02,
        momentum=0.9,
        max_steps=400,
        entropy_anneal_init=3.0,
        entropy_anneal_steps=300,
      )
    )
    config.gbi.num_steps = 50
    config.stages.energy.optimizer.learning_rate = 3e-2
    config.stages.joint.optimizer.learning_rate = 1e-3
    config.stages.joint.train.steps = 5000
    # Exact inference (L = 16): `loss.loss_aug_solver=exhaustive` and
    # `loss.predict_solver=exhaustive` give the discrete SSVM and the energy's exact MAP;
    # use them with `stages.joint.optimizer.learning_rate=1e-2` (results/spen/spen.md,
    # "Exact inference"). The paper's SPEN (GBI) stays the default.
  return config


def get_denoising_config(dataset: str = "depth_scenes"):
  """FOE-SSVM / DP-SSVM of E2E-SPEN Table 1: a denoising energy trained with the SSVM hinge.

  The energy is `base.denoising_energy` (`energy.kind=foe` for FOE-SSVM); Δ is the
  squared error summed over pixels; loss-augmented inference is 20 plain gradient steps
  on E − Δ over the real-valued image, from the noisy input and from the clean image
  (`loss.loss_aug_init`, the most violating final iterate per example), and prediction
  20 steps from the input. E − Δ stays bounded below while the learned noise variance
  σ² < 1/2 (the data term's curvature 1/σ² must exceed Δ's 2). Step size η = σ²
  (assumption: the data term's curvature is 1/σ²). CPU-sized like e2e.py's variant.
  """
  config = base.get_denoising_base_config(dataset)
  config.method = "ssvm"
  base.use_denoising_energy(config)
  config.loss = objectives.ssvm_block(l2_c=0.0, init="input", loss_aug_init="input,gold")
  sigma2 = config.data.noise_sigma**2
  step = dict(method="projected", optimizer="sgd", learning_rate=sigma2, momentum=0.0)
  config.gbi = gbi.train_block(**step)
  config.predict_gbi = gbi.predict_block(**step, max_steps=20, rel_tol=0.0, abs_tol=0.0)
  return config


def get_sequence_config(dataset: str = "twitter_pos"):
  """SPEN over per-token simplices: the tagging energy of Tu et al. (2020), Eq. (7)
  (+ TLM terms via `energy.tlm_variants`), trained with the SSVM hinge and GBI.

  Stages: the BiLSTM-CE run (bilstm.py) as `pretrain`, whose tagger becomes the local
  term, then `ssvm` (everything trained, W from zero, Adam 5e-4 cosine). Δ is the L1
  distance over real tokens (Tu et al.'s); GBI (training and test) is entropic mirror
  descent on the simplices from the tagger's softmax (`init='local'`), momentum 0.9,
  learning rate 0.5, 20 loss-augmented steps; test-time GBI runs to convergence (at most
  50 steps) and is decoded by the per-token argmax. Assumptions, not tuned.
  """
  config = base.get_sequence_base_config(dataset)
  config.method = "ssvm"
  config.energy = base.sequence_energy()
  config.loss = objectives.ssvm_block(surrogate="l1", init="local")
  mirror_gbi(config, learning_rate=0.5, momentum=0.9, max_steps=50)
  config.optimizer = base.cosine_adam(5e-4)
  base.sequence_pretrain_then(config, "ssvm", steps=3000 if dataset.startswith("conll") else 1000)
  return config


def get_segmentation_config(dataset: str = "weizmann_horse"):
  """SPEN on Weizmann horses: `SegmentationEnergy` (the FCN as local term + the DVN-style
  global term on image and mask) trained with the SSVM hinge, in SPEN's three stages.

  Stages: `pretrain`, exactly fcn.py's run (the FCN with pixel BCE, whose params become
  the energy's `local_net`; a finished fcn run can serve as this stage through compare's
  --reuse_stage=pretrain=fcn), `energy` (FCN clamped, the global term trained, Adam 1e-3)
  and `joint` (everything, Adam 1e-4). Δ is the squared error summed over pixels;
  GBI (training and test) is entropic mirror descent over the pixels' Box from the FCN's
  prediction (`init='local'`), momentum 0.95, learning rate 0.1 (SPEN A.5's multi-label
  values), 20 loss-augmented steps, at most 100 at test. Step counts and rates are
  assumptions, not tuned.
  """
  config = base.get_segmentation_base_config(dataset)
  config.method = "ssvm"
  config.energy = base.segmentation_energy(local_term=True)
  config.loss = objectives.ssvm_block(l2_c=0.0, init="local")
  mirror_gbi(config, learning_rate=0.1, momentum=0.95, max_steps=100)
  config.stage_order = "pretrain,energy,joint"
  # pretrain = fcn.py's config exactly (method, optimizer, steps), so its run is reusable.
  config.stages.pretrain = dict(method="local", train=dict(steps=config.train.steps))
  config.stages.energy = dict(
    method="ssvm",
    loss=dict(trainable="global"),
    train=dict(steps=1000),
    optimizer=base.cosine_adam(1e-3),
  )
  config.stages.joint = dict(
    method="ssvm", train=dict(steps=1000), optimizer=base.cosine_adam(1e-4)
  )
  return config


def get_search_space(dataset: str = "synthetic"):
  """What `python -m experiments.tune` selects for SPEN (SSVM): the feature network's
  capacity (`energy.feature_hidden`, its input and hidden dropout) and the `pretrain`
  stage's learning rate, which together are the MLP's space, the energy stage's learning
  rate, L2 and the feature scaling (`search_spaces.staged_network`); each stage selects
  its checkpoint on the held-out rows."""
  del dataset  # the same space everywhere
  return search_spaces.staged_network("energy", (1e-3, 1e-2), "energy", "feature_hidden")

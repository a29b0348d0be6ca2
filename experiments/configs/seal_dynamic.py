"""SEAL-dynamic (Lee et al. 2022, §2.2): the loss-net and the task-net trained in alternation.

--config=experiments/configs/seal_dynamic.py:<dataset>
--config.seal.objective=nce|margin|regression|regression_s   (the loss-net's loss)

Each step takes one loss-net step on its objective with samples from the current
task-net, then one task-net step on `energy_weight · E(x, σ(F(x))) + bce_weight · BCE`
against the updated loss-net (Eq. 4-5; energynets/objectives/seal/). The task-net is
the project's MLP baseline network (experiments/configs/mlp.py), so SEAL and plain
cross-entropy differ only in the loss; prediction is its forward pass, and selection and
the headline number follow SEAL's protocol: example-F1 at threshold 0.5.

Choices the paper leaves open (its appendix with hyper-parameters is not in
the text we follow), taken from SEAL's public configs where they exist, else assumptions:
- loss-net: a `SPENEnergy` whose feature network has the task-net's shape (SEAL: "the
  same feature network structures"), 200 softplus label measurements (public bibtex
  configs: 200); synthetic: a linear local term and 16 measurements;
- λ1 = λ2 = 1 (tuned per dataset in SEAL: 0.007-10); K = 10 noise samples (public: 10-40);
  regression-s: 10 logit perturbations of std 1.0 plus the unperturbed output
  (public bibtex: std 1.12);
- separate Adam optimizers (§4): the task-net's is `config.optimizer` (with SEAL's
  gradient clipping at norm 10), the loss-net's `config.loss_net_optimizer`;
- one loss-net and one task-net step per batch (Eq. 4-5). SEAL's public trainer takes,
  per batch, t rounds of (s loss-net steps, then 1 task-net step), with its
  `num_steps` {score_nn: s, task_nn: t} (bibtex NCE: s = 12, t = 5):
  `--config.seal.loss_net_steps=s --config.seal.rounds=t`; both optimizers' schedules
  then span all t (task-net) and t·s (loss-net) steps of every update;
- dropout: off in the task-net that draws the loss-net's samples and in the loss-net
  inside the task-net's loss (a deterministic loss). SEAL's public trainer keeps both in
  training mode; `--config.seal.train_mode=True` does the same (NCE on bibtex with SEAL's
  public config: +2.5 at 0.5, `results/seal/seal_schedule_train_mode_bibtex.md`);
- `gbi` is used by static margin/regression only; `predict_gbi` only with
  `seal.predict=gbi` (the energy network as a GBI predictor).

SEAL's complete public configs for bibtex, delicious and cal500 (their task-nets too:
400/500-wide softplus layers, dropout after the first layer only) are rows of
overrides in `results/seal/seal_public_<dataset>.md`; spo_fun's NCE config (with
its schedule and train mode) in `results/seal/seal_schedule_train_mode_spo_fun.md`.
"""

import ml_collections

from experiments import search_spaces
from experiments.choices import gbi
from experiments.choices import optimizers
from experiments.choices import seal
from experiments.configs import base
from experiments.configs import mlp

TASKS = ("multilabel", "sequence", "segmentation")


# config.seal (`seal.block` of experiments/choices/seal.py, which maps the block onto the
# values): `objective` (the loss-net objective's name), `SealOptions`' keys and the
# loss-net objectives' keys, at their defaults unless set. Lists are comma-separated
# strings: dvn_samples / dvn_sample_weights (static regression), extra_samples /
# extra_sample_weights (GBI-free DVN sources added to the dynamic regression and
# regression_s samples).


def get_sequence_config(dataset: str):
  """SEAL-dynamic for taggers: the task-net is the BiLSTM tagger, the loss-net the
  tagging energy (Tu et al. Eq. 7, its own BiLSTM local term, fresh; TLM terms via
  energy.tlm_variants); NCE noise is one categorical draw per token from the current
  tagger, the task-net's local loss the token CE. Stages: the BiLSTM-CE run
  (bilstm.py), then 1000 SEAL steps (3000 on NER), task-net Adam 5e-4 cosine, loss-net
  Adam 1e-3. Assumptions, not tuned (SEAL has no sequence experiments)."""
  config = base.get_sequence_base_config(dataset)
  config.method = "seal"
  config.energy = base.sequence_energy()
  config.seal = seal.block()
  config.gbi = gbi.train_block(learning_rate=0.5, momentum=0.9)
  config.predict_gbi = gbi.predict_block(learning_rate=0.5, momentum=0.9, max_steps=50)
  config.optimizer = base.cosine_adam(5e-4)
  config.loss_net_optimizer = optimizers.block()
  base.sequence_pretrain_then(config, "seal", steps=3000 if dataset.startswith("conll") else 1000)
  return config


def get_segmentation_config(dataset: str = "weizmann_horse"):
  """SEAL-dynamic on Weizmann horses (SEAL §4.4, Table 4: regression 79.23, NCE 76.78).

  SEAL's public horse config, where it states a choice: the task-net is the FCN of
  fcn.py (its optimizer too: SEAL's SGD), the loss-net DVN's value network
  (`base.segmentation_energy(local_term=False)`) trained from scratch alongside it, one
  step of each per batch; the loss-net regresses σ(−E) onto the soft IoU of the
  task-net's output (`objective='regression'`, `score='soft_iou'`), and the task-net
  minimizes SEAL's `mean pixel BCE − w·σ(−E(x, ŷ))` (`energy_term='neg_value'`) scaled
  to our pixel-summed BCE: `energy_weight = w · 576` with w = 1 (SEAL tunes w); 24×24
  random crops in training, 36 averaged crops at test (the base config's `crop_size`).
  NCE (Table 4's second row): `--config.seal.objective=nce`, noise drawn per pixel
  from the task-net's output; the task-net keeps the bounded `−σ(−E)` term (with the
  unbounded `energy_term='energy'` at this weight, a run's loss was NaN by step 18).
  The loss-net: Adam 1e-3 (cosine), gradients clipped at norm 10 (SEAL's clipping).

  Our addition: `--config.seal.extra_samples=gold,other_gold` also regresses the
  loss-net on the gold mask and on another training image's gold mask (scored against
  this image's), so that it must read the image to rate a confident mask
  (`results/seal/horses_extra.md`).

  SEAL trains both nets from scratch (the default, one stage). Fine-tuning a trained
  FCN instead: `--config.stage_order=pretrain,seal` (compare: `stage_order=pretrain+seal`
  with --reuse_stage=pretrain=fcn): `pretrain` is fcn.py's run exactly, then 2000 SEAL
  steps at a quarter of its learning rate, with a fresh loss-net.
  """
  config = base.get_segmentation_base_config(dataset)
  config.method = "seal"
  config.energy = base.segmentation_energy(local_term=False)
  config.seal = seal.block(
    objective="regression",
    score="soft_iou",
    energy_term="neg_value",
    energy_weight=float(config.data.crop_size**2),
  )
  # Unused by dynamic regression and NCE (static phases and seal.predict=gbi only).
  adam = dict(method="projected", optimizer="adam", learning_rate=0.05)
  config.gbi = gbi.train_block(**adam)
  config.predict_gbi = gbi.predict_block(**adam, max_steps=30)
  config.loss_net_optimizer = optimizers.block(schedule="cosine", clip_norm=10.0)
  # Used only with stage_order=pretrain,seal (see above); "" keeps SEAL's single stage.
  config.stages.pretrain = dict(method="local", train=dict(steps=config.train.steps))
  finetune = base.segmentation_sgd()
  finetune.learning_rate /= 4
  # No `method`: the stage trains the config's own (seal_ranking's ranking loss there).
  config.stages.seal = dict(train=dict(steps=2000), optimizer=finetune)
  return config


def get_config(dataset: str = "synthetic"):
  return base.config_for_task(
    dataset,
    multilabel=get_multilabel_config,
    sequence=get_sequence_config,
    segmentation=get_segmentation_config,
  )


def get_multilabel_config(dataset: str) -> ml_collections.ConfigDict:
  """The config of a multi-label dataset variant."""
  config = mlp.get_config(dataset)
  config.method = "seal"
  config.energy = base.energy_like_model(config.model, num_measurements=200)
  config.seal = seal.block()
  # SEAL's GBI (its SPEN/DVN baselines): Adam + clamp, 20 steps (assumption, see
  # spen_gbi.py).
  adam = dict(method="projected", optimizer="adam", learning_rate=0.05)
  config.gbi = gbi.train_block(**adam)
  config.predict_gbi = gbi.predict_block(**adam, max_steps=20, rel_tol=0.0, abs_tol=0.0)
  config.optimizer.clip_norm = 10.0
  config.loss_net_optimizer = optimizers.block()
  config.train.select_metric = "validation/example_f1@0.5"
  # Fine-tuning a trained MLP instead of SEAL's from-scratch task-net:
  # `--config.stage_order=pretrain,seal` (compare: `--reuse_stage=pretrain=mlp`).
  # `pretrain` is mlp.py's run exactly (its optimizer: no clipping), then `seal` trains
  # a fresh loss-net with the carried task-net at a quarter of the learning rate.
  if dataset == "synthetic":
    config.energy.update(dict(feature_hidden=(), num_measurements=16))
    # Small enough for a CPU run well under a minute (the MLP config uses 20000 steps).
    config.train.steps = 3000
    config.train.eval_every = 500
  config.stages.pretrain = mlp.pretrain_stage(config, dataset)
  finetune = config.optimizer.to_dict()
  finetune["learning_rate"] /= 4
  # No `method`: the stage trains the config's own (seal_ranking's ranking loss there).
  config.stages.seal = dict(train=dict(steps=1000), optimizer=finetune)
  return config


def get_search_space(dataset: str = "synthetic"):
  """What `python -m experiments.tune` selects for SEAL-dynamic: the task-net's capacity
  (hidden layers, input and hidden dropout), the learning rate, L2 and the feature
  scaling (`search_spaces.network`). Staged (`stage_order=pretrain,seal`), the rate
  searched is the pretrain stage's, so that the search reaches the MLP's own tuned
  setting; the `seal` stage fine-tunes at its own (single-stage, the tuner leaves the
  stage's key out, staged the top-level one: `search_spaces.for_run`)."""
  del dataset  # the same space everywhere
  learning_rates = {
    "optimizer.learning_rate": search_spaces.LEARNING_RATES,
    "stages.pretrain.optimizer.learning_rate": search_spaces.LEARNING_RATES,
  }
  return search_spaces.network(learning_rates=learning_rates)

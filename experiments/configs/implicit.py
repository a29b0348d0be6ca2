"""Implicit bilevel energy training (Shankar & Piratla) on multi-label data: an
inference network A_θ fit to MLE + λ·energy in an inner loop, the energy updated by the
implicit gradient of a primary loss (energynets/objectives/implicit/).

--config=experiments/configs/implicit.py:<dataset>
--config.implicit.primary=cd|ssvm|dvn          (Table 1's L_CD, L_SSVM, L_DVN rows)
--config.implicit.gradient=explicit            (ablation: no implicit term)
--config.implicit.inverse_hvp.method=neumann|cg --config.implicit.inverse_hvp.num_terms=K
--config.implicit.inner_steps=T                (T_inner)

Stages:
1. `pretrain`: the MLP baseline (experiments/configs/mlp.py, BCE).
2. `implicit`: per batch, T_inner steps of `config.inner_optimizer` on θ, then one step
   of `config.optimizer` on φ by the implicit gradient. Its `init_from` carries the MLP
   into A_θ and into the energy's local term (feature network of the MLP's shape).
   Prediction is σ(A_θ(x)), one forward pass.
`--config.stage_order=implicit` starts both from random, as the paper's Algorithm 1.

Choices (the paper gives no hyper-parameters for its multi-label runs):
- energy: the SPEN energy of spen_ssvm.py / infnet.py (15 softplus measurements, 5 for
  delicious) — the paper's `yᵀWb(x) + vᵀσ(My)` (Belanger & McCallum 2016);
- L_aux's MLE is the BCE summed over labels (the paper's MBCE), λ = 1;
- T_inner = 5 steps of Adam on θ per outer step (the paper's Algorithm 1 writes plain
  gradient steps); the inner optimizer's state persists across outer steps;
- the inverse-HVP: von Neumann with K = 10 terms (the paper's choice of method) and
  α = 0.002 (the paper's "suitably chosen large divisor" is 1/α = 500): the series
  converges only for α < 2/λ_max(H), and the energy term's curvature grows in training.
  `max_residual = 2`: a step whose solve failed anyway uses the explicit gradient alone
  (logged as `implicit_used`; a residual of 1-2, the mild growth of the series along
  directions of negative curvature, is kept). Sensitivity to K / T_inner / CG and the
  settings that failed: results/implicit/implicit.md, docs/papers/implicit.md;
- CD: K = 10 straight-through Bernoulli negatives plus the network's own soft output
  σ(A_θ(x)) as a negative, cost 1 − soft-F1: with hard samples alone the energy is only
  ever pushed up at vertices of the box while the network lives inside it.
- SSVM: Δ = L1 (as infnet.py).
"""

import ml_collections

from experiments import search_spaces
from experiments.choices import implicit as implicit_choices
from experiments.configs import base
from experiments.configs import mlp

TASKS = ("multilabel", "sequence", "segmentation")


def _implicit_options(net_l2: float, **overrides) -> ml_collections.ConfigDict:
  """The `implicit` block: `primary` (the primary loss's name), the primary losses' keys
  (SSVM's `margin_cost`; CD's `num_samples` to `include_net_output`) and the options'
  (`experiments/choices/implicit.py` maps the block onto `ImplicitOptions` and a
  primary loss value), with this config's choices (module docstring). The energy's L2
  is `loss.l2`; `inverse_hvp` is the solver's block (`method` `'neumann'` or `'cg'`)."""
  return implicit_choices.block(
    include_net_output=True,
    inverse_hvp=dict(alpha=0.002),
    net_l2=net_l2,
    max_residual=2.0,
    **overrides,
  )


def get_sequence_config(dataset: str):
  """The implicit paper's POS / NER setting: the tagging energy (Tu et al. Eq. 7) with a
  BiLSTM local term, a BiLSTM tagger as A_θ; CD with per-token categorical negatives,
  cost 1 − soft token accuracy (the soft F1 of per-token distributions over real
  tokens). Stages: the BiLSTM-CE run (bilstm.py), then 500 implicit steps (1500 on NER;
  each costs T_inner + about 3K tagger passes, the CPU budget's limit), the inner
  optimizer at the tagger's final rate scale (1e-4). Assumptions, not tuned."""
  config = base.get_sequence_base_config(dataset)
  config.method = "implicit"
  config.energy = base.sequence_energy()
  config.implicit = _implicit_options(net_l2=0.0)
  config.optimizer = base.cosine_adam(5e-4)
  config.inner_optimizer = base.cosine_adam(1e-4)
  base.sequence_pretrain_then(
    config, "implicit", steps=1500 if dataset.startswith("conll") else 500
  )
  return config


def get_segmentation_config(dataset: str = "weizmann_horse"):
  """Implicit training on Weizmann horses (the implicit paper's Table 10 uses Lu & Huang's
  protocol, not this split: its numbers are quoted, not compared as equals).

  A_θ is the FCN of fcn.py, the energy `base.segmentation_energy(local_term=True)` (the
  FCN as local term, carried from the pretrained stage, plus DVN's value network);
  the primary loss is DVN's regression of σ(−E) onto the soft IoU (`primary='dvn'`; the
  paper's task loss is the IoU), L_aux the pixel BCE + λ·E. Stages: `pretrain`, exactly
  fcn.py's run (SEAL's SGD; reusable with compare's --reuse_stage=pretrain=fcn), then
  1000 implicit steps, energy Adam 1e-3, inner Adam 1e-4. Assumptions, not tuned.
  """
  config = base.get_segmentation_base_config(dataset)
  config.method = "implicit"
  config.energy = base.segmentation_energy(local_term=True)
  config.implicit = _implicit_options(net_l2=0.0, primary="dvn", score="soft_iou")
  config.optimizer = base.cosine_adam(1e-3)
  config.inner_optimizer = base.cosine_adam(1e-4)
  config.stage_order = "pretrain,implicit"
  # pretrain = fcn.py's config exactly (method, optimizer, steps), so its run is reusable.
  config.stages.pretrain = dict(
    method="local", train=dict(steps=config.train.steps), optimizer=base.segmentation_sgd()
  )
  config.stages.implicit = dict(method="implicit", train=dict(steps=1000))
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
  config.method = "implicit"
  config.energy = base.energy_like_model(config.model, 5 if dataset == "delicious" else 15)
  config.implicit = _implicit_options(net_l2=config.loss.l2)
  config.optimizer = base.cosine_adam(1e-3)
  config.inner_optimizer = base.cosine_adam(1e-4)
  base.mlp_pretrain_then(config, "implicit", steps=1500, synthetic_steps=1000)
  if dataset == "synthetic":
    config.energy.num_measurements = 16
    config.inner_optimizer.learning_rate = 1e-3
  return config


def get_search_space(dataset: str = "synthetic"):
  """What `python -m experiments.tune` selects for the implicit method: the pretrained MLP's
  capacity and learning rate (mlp.py's space), the `implicit` stage's learning rate, L2
  (with its copy `implicit.net_l2`) and the feature scaling
  (`search_spaces.staged_network`); each stage selects its checkpoint on the held-out
  rows."""
  del dataset  # the same space everywhere
  return search_spaces.staged_network(
    "implicit", (1e-4, 1e-3), energy_copy=True, l2_copies=("implicit.net_l2",)
  )

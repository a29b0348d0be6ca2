"""Inference networks (Tu, Pang & Gimpel 2020): an energy trained jointly with a
cost-augmented network F_Φ and a test-time network A_Ψ, on multi-label data (a SPEN
energy, MLP nets) or on sequences (the paper's tagging energy, BiLSTM nets).

--config=experiments/configs/infnet.py:<dataset>   (multi-label, or twitter_pos,
                                                   conll2003, conll2003_plus)
--config.infnet.objective=margin|perceptron|compound
--config.infnet.architecture=separated|shared|stacked
--config.infnet.truncate=energy|both|none   --config.infnet.ce_weight=0   (Table 1 ablation)
--config.infnet.carry_energy=False   (the energy starts fresh; the nets still pretrained)
--config.energy.local_scale=0.1   (sequences: temper the carried local term, so the hinge
                                   is active from the start; SequenceEnergy.local_scale)
--config.stage_order=infnet   (no pretraining: everything from scratch, as the paper)

Stages:
1. `pretrain`: the MLP baseline (experiments/configs/mlp.py, BCE).
2. `infnet`: k I steps on (Φ, Ψ), then one E step on Θ, per batch
   (energynets/objectives/infnet/). Its `init_from` carries the pretrained MLP into
   A_Ψ, into F_Φ (`separated`: a copy; `shared`: a copy of the head; `stacked`: fresh,
   W acts on [A_Ψ(x); y]) and into the energy's local term, whose feature network has
   the MLP's shape (the paper pretrains the feature network and both inference networks
   with local CE for parsing, appendix; SPEN pretrains its local MLP). Prediction is
   σ(A_Ψ(x)), one forward pass.

Choices (the paper's experiments are sequence labeling; its multi-label predecessor,
Tu & Gimpel 2018, is not among the five papers):
- energy: the SPEN energy (local + label-measurement term, 15 softplus measurements, 5
  for delicious, as spen_ssvm.py); synthetic: 16 (an assumption, as seal_dynamic.py);
- the paper's best setting: compound objective (λ = 1), stacked networks, local CE of
  weight 1 on both nets, zero truncation only in the energy step, k = 5, Δ = L1;
- optimizers: `config.optimizer` trains the energy (Adam, as the paper), and
  `config.test_net_optimizer` / `config.cost_net_optimizer` the nets (Adam, as the
  paper's NER runs; its POS runs used SGD with momentum for the nets with CE). The nets
  take k steps per batch, so their schedules span `k · train.steps` steps. A_Ψ starts
  pretrained, hence its 10x smaller learning rate; the stacked F_Φ starts fresh, and at
  1e-4 it lagged (on synthetic E(x, F_Φ(x)) stayed far above E(x, y), so the margin
  term never became active), hence 1e-3. Assumptions, not tuned on the real datasets;
- `loss.l2` weighs ½‖W‖² on the energy, `infnet.net_l2` on the nets (the MLP's 1e-5).
"""

import ml_collections

from experiments import search_spaces
from experiments.choices import infnet as infnet_choices
from experiments.configs import base
from experiments.configs import mlp

TASKS = ("multilabel", "sequence")


def get_sequence_config(dataset: str):
  """The paper's tagging setting: energy Eq. (7) (+ TLM terms via
  --config.energy.tlm_variants=forward|forward,backward|forward,backward,word_forward,
  word_backward), whose local term is a BiLSTM tagger like both nets; everything Adam at
  5e-4 (the paper's NER setting; its POS nets used SGD with momentum). Stages: the
  BiLSTM-CE run (bilstm.py), then infnet for 1000 updates (3000 on NER) of k = 5 I steps:
  A_Ψ, the energy's local term and a `separated` F_Φ start from the pretrained tagger;
  the stacked F_Φ and W start fresh. The paper trains from scratch; the pretraining is a
  CPU-budget choice (it also makes BiLSTM-CE the exact starting point of every row)."""
  config = base.get_sequence_base_config(dataset)
  config.method = "infnet"
  config.energy = base.sequence_energy()
  config.infnet = infnet_choices.block()
  config.optimizer = base.cosine_adam(5e-4)
  config.test_net_optimizer = base.cosine_adam(5e-4)
  config.cost_net_optimizer = base.cosine_adam(5e-4)
  base.sequence_pretrain_then(config, "infnet", steps=3000 if dataset.startswith("conll") else 1000)
  return config


def get_config(dataset: str = "synthetic"):
  return base.config_for_task(
    dataset, multilabel=get_multilabel_config, sequence=get_sequence_config
  )


def get_multilabel_config(dataset: str) -> ml_collections.ConfigDict:
  """The config of a multi-label dataset variant."""
  config = mlp.get_config(dataset)
  config.method = "infnet"
  config.energy = base.energy_like_model(config.model, 5 if dataset == "delicious" else 15)
  config.infnet = infnet_choices.block(net_l2=config.loss.l2)
  config.optimizer = base.cosine_adam(1e-3)
  config.test_net_optimizer = base.cosine_adam(1e-4)
  config.cost_net_optimizer = base.cosine_adam(1e-3)
  base.mlp_pretrain_then(config, "infnet", steps=1500, synthetic_steps=1500)
  if dataset == "synthetic":
    config.energy.num_measurements = 16
  return config


def get_search_space(dataset: str = "synthetic"):
  """What `python -m experiments.tune` selects for InfNet: the pretrained MLP's capacity and
  learning rate (mlp.py's space), the `infnet` stage's learning rate, L2 (with its copy
  `infnet.net_l2`) and the feature scaling (`search_spaces.staged_network`); each stage
  selects its checkpoint on the held-out rows."""
  del dataset  # the same space everywhere
  return search_spaces.staged_network(
    "infnet", (1e-4, 1e-3), energy_copy=True, l2_copies=("infnet.net_l2",)
  )

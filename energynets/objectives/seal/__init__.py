"""`seal`: Structured Energy As Loss (Lee et al. 2022): an energy network trains a task-net.

Two networks: a feed-forward *task-net* `F_Φ(x) -> logits [B, L]` (any flax module
called as `net(x, train=...)`, e.g. `nets.MLP`), which alone makes the prediction
`σ(F_Φ(x))`, and a *loss-net* `E_Θ(x, ȳ) -> [B]` (any energy: e.g. a `SPENEnergy`, with
its own feature network, local term and label-measurement term; low energy = good
output), used only as a trainable loss for the task-net.

Task-net loss (Eq. 1), averaged over the batch:

    L_F(Φ; Θ) = λ1 · E_Θ(x, σ(F_Φ(x))) + λ2 · Σ_i BCE(y_i, σ(F_Φ(x))_i)

(`energy_weight` λ1, `bce_weight` λ2). The loss-net is a fixed function inside L_F: its
parameters are `stop_gradient`-ed and by default it runs deterministically (no dropout:
a loss should not be noisy), as does the task-net that draws the loss-net's samples.
`train_mode=True` puts both in training mode there, as SEAL's public trainer does (it
calls `model.train()` for both networks throughout): the samples and P_N then come from
a dropped-out task-net, and the loss-net's dropout is on inside L_F.
`neg_value_term=True` replaces E by `−σ(−E)`, the predicted score of a regression
loss-net (what SEAL's public code does for its DVN loss-nets); the default is the
paper's Eq. 1.
`score_weight=w` also subtracts `w · mean s(σ(F_Φ(x)), y)`, the task score the
loss-net is meant to stand for, used directly (w = 0, the default: Eq. 1 alone).

The family's options are one value, `SealOptions` (which networks train, λ1, λ2, w,
`neg_value_term`, score, `train_mode`, prediction, `fresh_task_net`, the schedule
`loss_net_steps` / `rounds`); the loss-net objective L_E is another
(`loss_net_objective=`), a small frozen dataclass carrying its own options whose
`loss(LossNetInputs)` computes L_E for a batch. A user's own value with that method
plugs in the same way:

    objective = seal_objective(loss_net, task_net, optax.adam(1e-3), optax.adam(1e-3),
                               options=SealOptions(energy_weight=0.5),
                               loss_net_objective=SealRegressionS(num_samples=5))

The loss-net (an energy) comes first, then the task-net, then their optimizers in the
same order; a first argument that is not an energy is refused (TypeError).

The library's loss-net objectives, with ŷ or the samples always `stop_gradient`-ed (the
loss-net loss is differentiated at fixed outputs):

- `SealMargin` (Eq. 6): `[Δ(ŷ, y) − E(x, ŷ) + E(x, y)]_+`. SEAL-dynamic
  uses the special case the paper identifies with InfNet: ŷ = the task-net output
  σ(F_{Φ_{t−1}}(x)); the task-net loss keeps no margin term. SEAL-static pretrains the
  loss-net as SPEN does: ŷ from loss-augmented GBI, `gbi_scan` on `E − Δ` from uniform for
  `loss_aug_gbi.num_steps`. Δ (`margin_cost`) is a `task_losses` surrogate value (default
  `L1()`, the InfNet/DESIGN choice; the paper does not state it) or `OneMinusScore()`,
  `1 − s(ŷ, y)`.
- `SealRegression` (Eq. 7, DVN): the cross-entropy between the soft-F1
  score s(ȳ, y) and σ(−E(x, ȳ)) (`dvn.value_regression_loss`; the printed `log(1 + σ)`
  is a typo for `log(1 − σ)`). SEAL-dynamic uses ȳ = the task-net output (one sample per
  example); SEAL-static uses DVN's samples (`dvn.draw_samples`: the GBI prediction, an adversarial
  sample and the gold output by default, `dvn_samples` / `dvn_sample_weights`), GBI
  by `loss_aug_gbi`.
- `SealRegressionS`: the regression loss summed over the sample set
  S = {σ(F(x))} ∪ {σ(F(x) + σ_n ε_k)}_{k=1..K}, ε_k ~ N(0, I): the task-net output and
  K = `num_samples` Gaussian perturbations of its logits, std σ_n = `noise_std` (the
  paper perturbs "the task-net output" without saying where; logit space keeps the
  samples in [0,1]^L, and keeping the unperturbed output follows SEAL's public code).
- Extra samples (`extra_samples`, weights `extra_sample_weights`; our addition, for
  `SealRegression` and `SealRegressionS` outside static `SealRegression`): DVN's GBI-free
  sources (`dvn.Gold()`, the gold output; `dvn.Random()`, a uniform random output;
  `dvn.OtherGold()`, another example's gold) added to the regression's sample set.
  Trained only on the task-net's own near-gold outputs, a regression loss-net can learn
  how confident a mask is rather than whether it fits the input; another example's gold
  is as confident as the gold and is scored low unless it happens to fit.
- `SealNCE` (Eq. 8-9, Ma & Collins' ranking NCE):
  `−log [exp(s(y⁰)) / Σ_{k=0..K} exp(s(yᵏ))]`, `s(y) = −E(x, y) − log P_N(y)`, with y⁰
  the gold output *included in the denominator* (the printed Eq. 8 sums from k = 1, which
  is not a ranking loss: it would reward pushing the gold's score up without bound;
  SEAL's public code is the cross-entropy over [gold; samples]). The K = `num_samples`
  noise samples are Bernoulli draws of `P_N(y) = Π_i σ(G(x))_i^{y_i} (1−σ(G(x))_i)^{1−y_i}`
  where G is the task-net of the previous step (dynamic) or the frozen pretrained
  feed-forward net (static); log P_N is exact (binary y).

Static and dynamic (`train_loss_net`, `train_task_net`), one state structure
`{"task_net": ParamGroup, "loss_net": ParamGroup}` for all three phases; a group that a
phase does not train has an `optax.EmptyState` optimizer state and never moves:

- dynamic, both networks (the default; Eq. 4-5): each `update` first takes one loss-net
  step on L_E with samples from the current task-net Φ_{t−1}, then one task-net step on L_F with the
  *updated* loss-net Θ_t, on the same batch (`loss_net_steps` and `rounds` repeat
  these as SEAL's public trainer does: t rounds of s loss-net steps + 1 task-net step).
- the loss-net alone (`train_task_net=False`; SEAL-static, stage 1): the task-net group is
  frozen and serves as the fixed noise network Ψ of static NCE (and of `regression_s`);
  margin and regression use GBI samples instead and ignore it.
- the task-net alone (`train_loss_net=False`; SEAL-static, stage 2): against the frozen
  loss-net. It must continue a state with a trained loss-net (`init_from`); `init`
  raises, since a random frozen loss-net is no loss at all.

Stages hand state over with `init_from`: a `local_bce` state `{"net": ...}` gives the
task-net (e.g. the pretrained noise net Ψ), a SPEN/DVN state `{"energy": ...}` gives the
loss-net (e.g. an SSVM-trained SPEN as the static margin loss-net), a SEAL state gives
both. `fresh_task_net=True` re-initializes the task-net instead of carrying it (SEAL's
public static runs train the task-net from scratch against the pretrained loss-net).

Prediction: by default the task-net (SEAL: one forward pass, `σ(F(x))`); with
`predict_gbi` (the ablation "energy network with GBI", e.g. the NCE-trained energy as a
predictor), `gbi_while` on the loss-net's energy with those options, from uniform 0.5 or
from the task-net's output (`predict_from_task_net`).

Metrics of `update`: each trained group's metrics with a `loss_net_` / `task_net_`
prefix (its `loss`, `grad_norm` and terms); `loss` is the sum of the trained groups'
losses and `grad_norm` the global norm of all their gradients (what the trainer logs and
guards against NaN). `task_net_score_grad_cosine` measures how much of the task score
the loss-net hands the task-net: the cosine between the loss-net term's gradient in ȳ
and the score's (`score`), per example at the task-net's output, averaged. NCE and the
margin are invariant to a per-input shift of E, so under them the energy level
(`task_net_energy`, hence `loss`) may drift freely; the shift does not depend on ȳ and
so never reaches the task-net's gradient.

`seal_losses` builds L_E and L_F as pure functions (what `seal_objective` steps on, and
what tests differentiate). `task_net_ranking` is the ablation "ranking loss without a
loss-net" (§5): the NCE ranking loss applied to the task-net itself,
`s(y) = Σ_i log P(y_i | x; Φ)`, noise from the task-net's own Bernoulli samples, plus
λ2·BCE.

Multi-label and sequences. The task-net is any `net(x, train=...) -> logits`; the
loss-net is any `Energy` (`energies.protocol`: a library energy such as `SPENEnergy` or
`SequenceEnergy`, or a user's own through `energy_from_module` / `energy_from_function`),
reached only through its fields: `encode` once per x, then `energy` of every sample,
checked against the first batch at `init`. What depends on the outputs comes from
`outputs.for_domain(energy.domain)`: on the Box (multi-label labels, segmentation masks)
the link is σ, the local loss BCE and noise per-label Bernoulli; on the per-token Simplex
(e.g. a `SequenceEnergy`) the task-net is a tagger, outputs are per-token
distributions (softmax link, token CE, one categorical draw per token, GBI over the
simplices), and every Δ, score and sample log-probability counts real tokens only
(`mask_padding`; the soft F1 of per-token distributions over real tokens is the soft
token accuracy). Static `SealRegression` (DVN's GBI samples) is multi-label only.

Modules: `blocks` (pure building blocks: the NCE ranking loss, samples, Δ, the
loss-augmented output), `loss_net_objectives` (L_E as values), `options` (`SealOptions`),
`training` (`seal_losses`, `seal_objective`), `ranking` (`task_net_ranking`). Their public
names are all importable from this package. Configs name these values;
`experiments/choices/seal.py` maps a config's `seal` block onto them.
"""

from energynets.objectives.seal.blocks import BOX
from energynets.objectives.seal.blocks import OneMinusScore
from energynets.objectives.seal.blocks import bernoulli_log_prob
from energynets.objectives.seal.blocks import bernoulli_samples
from energynets.objectives.seal.blocks import gaussian_perturbations
from energynets.objectives.seal.blocks import loss_augmented_output
from energynets.objectives.seal.blocks import margin_delta
from energynets.objectives.seal.blocks import nce_ranking_loss
from energynets.objectives.seal.blocks import sample_energies
from energynets.objectives.seal.loss_net_objectives import LossNetInputs
from energynets.objectives.seal.loss_net_objectives import LossNetObjective
from energynets.objectives.seal.loss_net_objectives import SealMargin
from energynets.objectives.seal.loss_net_objectives import SealNCE
from energynets.objectives.seal.loss_net_objectives import SealRegression
from energynets.objectives.seal.loss_net_objectives import SealRegressionS
from energynets.objectives.seal.options import SealOptions
from energynets.objectives.seal.ranking import task_net_ranking
from energynets.objectives.seal.training import SealLosses
from energynets.objectives.seal.training import gradient_cosine
from energynets.objectives.seal.training import seal_losses
from energynets.objectives.seal.training import seal_objective

__all__ = [
  "BOX",
  "LossNetInputs",
  "LossNetObjective",
  "OneMinusScore",
  "SealLosses",
  "SealMargin",
  "SealNCE",
  "SealOptions",
  "SealRegression",
  "SealRegressionS",
  "bernoulli_log_prob",
  "bernoulli_samples",
  "gaussian_perturbations",
  "gradient_cosine",
  "loss_augmented_output",
  "margin_delta",
  "nce_ranking_loss",
  "sample_energies",
  "seal_losses",
  "seal_objective",
  "task_net_ranking",
]

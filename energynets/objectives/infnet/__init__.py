"""`infnet`: an energy trained jointly with inference networks (Tu, Pang & Gimpel 2020).

Two feed-forward networks replace gradient-based inference (GBI): a cost-augmented
network F_Φ for the hinge's inner maximization, and a test-time network A_Ψ for
prediction,

    F_Φ(x) ≈ argmin_{ȳ ∈ [0,1]^L}  E_Θ(x, ȳ) − Δ(ȳ, y)                (Eq. 3)
    A_Ψ(x) ≈ argmin_{ȳ ∈ [0,1]^L}  E_Θ(x, ȳ)                          (Eq. 2)

and the energy E_Θ (LOW energy = good; any `Energy`, reached only through its fields:
`encode` once per x, `energy(params, encoding, ȳ) -> [B]`) is trained on their outputs.
Per example, with ŷ_F = F_Φ(x), ŷ_A = A_Ψ(x) and y the gold labels,

    margin-rescaled hinge  h_F = Δ(ŷ_F, y) − E(x, ŷ_F) + E(x, y)        (Eq. 4)
    perceptron             h_A =          − E(x, ŷ_A) + E(x, y)        (Eq. 5, 2nd term)

    energy step (Θ)      min  mean( [h_F]_+ )                     InfNetMargin()
                         min  mean( [h_A]_+ )                     InfNetPerceptron()
                         min  mean( [h_F]_+ + λ_c [h_A]_+ )       InfNetCompound() (Eq. 6)
                              + l2 · ½‖W_Θ‖²

    inference step (Φ, Ψ)  min  mean( E(x, ŷ_F) − Δ(ŷ_F, y) )  + c · CE(F_Φ(x), y)
                                + λ_A · mean( E(x, ŷ_A) )      + c · CE(A_Ψ(x), y)
                                + net_l2 · ½‖W_{Φ,Ψ}‖²

i.e. the nets maximize the untruncated game value Δ(F) − E(F) − λE(A) of §3 (E(x, y)
does not depend on Φ, Ψ) and also fit the gold labels (the local CE of §4.3, weight
c = `ce_weight`, 1 in the paper, 0 for the ablation). Δ is the L1 distance
Σ_l|ŷ_l − y_l| (`task_losses.task_loss(·, ·, L1())`, the paper's choice; for binary y it
is the multilinear extension of the Hamming loss). CE is `multilabel_bce` on the nets'
logits (BCE summed over labels, averaged over examples), and ŷ = σ(logits): the nets
output logits [B, L].
Prediction is A_Ψ(x) = σ(logits) — one forward pass, no search.

Sequences (the paper's POS and NER experiments) use the same objective with an energy
on the per-token Simplex (a `SequenceEnergy`) and taggers as nets: outputs are per-token
logits `[B, T, L]`, ŷ the per-token softmax, CE the token cross-entropy over real tokens
and Δ the L1 distance over real tokens (padded positions, all-zero gold rows, never
count); the stacked F_Φ is then exactly the paper's `softmax(W_q[A_Ψ(x)_t; y_t] + b_q)`
per position. The pieces come from `outputs.OutputStructure`, picked from the energy's
domain (`output=` overrides it).

The energy step's loss is a value, the energy objective (`energy_objective=`): a small
frozen dataclass carrying its own options whose `loss(InfNetEnergyInputs)` computes the
loss of a batch from E at the gold output and at the nets' outputs; a user's own value
with that method plugs in the same way (`InfNetEnergyObjective`). The family's other
options are one value, `InfNetOptions` (λ_A, CE weight, k, Δ, L2), whose architecture
(`InfNetSeparated()`, `InfNetShared()`, `InfNetStacked()` or your own
`InfNetArchitecture`) and truncation (`InfNetTruncation`) are values too.

Choices, with reasons:

- One `update` = k = `num_inner_steps` inference steps ("I steps") on (Φ, Ψ), then one
  energy step ("E step") on Θ (§4.2: k = 5 balanced the two players; k = 1, Tu & Gimpel
  2018's setting, lets the nets lag). The I steps are a `jax.lax.scan` carrying the two
  nets' `ParamGroup`s, so one `jax.jit` covers the whole alternation. All k I steps use
  the update's batch (the trainer hands one batch per update); their dropout masks
  differ. The E step sees the nets after their k steps.
- Zero truncation ([·]_+) only in the energy step (`InfNetTruncation()`, §4.1): a
  truncated hinge gives the nets no gradient on examples the energy already separates,
  which early in training are exactly those where the nets are bad, and training
  failed without CE (Table 1). `InfNetTruncation(inference_step=True)` also truncates
  F_Φ's term (the nets then maximize mean([h_F]_+), Tu & Gimpel 2018, Table 1's "zero
  trunc. yes" rows); `InfNetTruncation(energy_step=False)` truncates nothing. A_Ψ's term
  is never truncated: its problem is Eq. 2, which has no hinge (the paper's I-step
  objective has −λE(x, A_Ψ(x)) bare).
- λ_A (`energy_weight`) defaults to the compound weight λ_c under `InfNetCompound` — one
  λ in the paper's minimax — and to 1 otherwise (`InfNetPerceptron`: A_Ψ is the
  perceptron's inference network; `InfNetMargin`: A_Ψ solves Eq. 2 for the current
  energy).
- `InfNetMargin` trains A_Ψ jointly instead of fine-tuning it from Φ after training as Tu &
  Gimpel 2018 did (the paper, §2, calls that fine-tune "minimal change"): A_Ψ does not
  enter the energy's loss, so this is the same problem solved alongside, at no extra
  stage. A stage that only fine-tunes the nets against a fixed energy is this objective
  with `optax.set_to_zero()` as the energy optimizer, continuing from this state.
- `InfNetPerceptron` has no F_Φ (`uses_cost_net = False`): the state then holds no
  `cost_net` and `architecture` is unused.
- Architectures of (F_Φ, A_Ψ) (§3.1, Fig. 1), with `net(x) -> [B, L]` logits (an `MLP`):
  `InfNetSeparated()`: F_Φ and A_Ψ two independent copies of `net`; `InfNetShared()`: one
  feature network (`net`'s hidden layers, read with `return_features=True`) and two
  heads, A_Ψ's the net's own `head` and F_Φ's a second `Dense(L)` — the shared features
  are trained by both nets' terms; `InfNetStacked()`: F_Φ(x, y) = σ(W[A_Ψ(x); y] + b),
  W [2L → L], the
  multi-label form of the paper's per-position `softmax(W_q[A_Ψ(x)_t; y_t] + b_q)`, with
  `stop_gradient` at A_Ψ(x) so that F_Φ's terms never move Ψ ("we block the gradient at
  A_Ψ when updating Φ"). Both nets' parameters move in every I step, each with its own
  optimizer, on the one joint loss above; the shared feature network belongs to A_Ψ's
  group (`test_net`: it is needed at test time) and is updated by A_Ψ's optimizer.
- Within the E step the energy runs in training mode (dropout, one mask for y, ŷ_F and
  ŷ_A through one `encode`) and the nets' outputs are deterministic (`train=False`) and
  `stop_gradient`-ed: the energy is pushed up at what the nets actually predict. Within
  the I steps the nets run in training mode and the energy is a fixed, deterministic
  critic whose encoding of x is computed once for all k steps.
- `update`'s `loss` and `grad_norm` are the energy step's (the objective Θ minimizes;
  the trainer's non-finite guard reads `loss`, and non-finite nets make it non-finite
  too, since it evaluates E at their outputs); the last I step's values are reported as
  `infnet_*`.

Staged training (`init_from`). The paper pretrains nothing for its sequence tasks but
pretrains the feature network and both inference networks with local CE for parsing
(appendix); SPEN pretrains its local MLP. `init_from(prev_state, rng, batch)` carries
what the previous stage trained, fresh-initializes the rest (from `rng`) and starts new
optimizer states:

- energy ← `prev["energy"]` (a SPEN `ssvm`/`spen_pretrain` state or an infnet state;
  shapes must match), else a `local_bce` state's `prev["net"]` becomes the energy's
  `local_net` when the energy's parameters have such a group of the same shapes (a
  SPEN's local classifier; other energies start fresh);
- A_Ψ ← `prev["test_net"]` (an infnet state; shapes must match), else `prev["net"]`
  (`local_bce`), else the energy's pretrained `local_net` (itself a multi-label MLP
  classifier), each when shapes match;
- F_Φ ← `prev["cost_net"]` when shapes match; otherwise `InfNetSeparated` copies A_Ψ's
  pretrained parameters and `InfNetShared` copies A_Ψ's head (F_Φ starts at the
  pretrained classifier, as the parsing appendix pretrains both nets with CE);
  `InfNetStacked` is fresh (W acts on [A_Ψ(x); y], which no local classifier has).

What was carried and what was fresh is logged.

Modules: `energy_objectives` (the E-step loss as values), `architectures` (the
architectures as values and F_Φ's extra heads), `options` (`InfNetOptions`,
`InfNetTruncation`), `losses` (`energy_evaluator`, `infnet_losses`), `training`
(`inference_network`, `carry_params`). Their public names are all importable from this
package.
"""

from energynets.objectives.infnet.architectures import CostHead
from energynets.objectives.infnet.architectures import InfNetArchitecture
from energynets.objectives.infnet.architectures import InfNetSeparated
from energynets.objectives.infnet.architectures import InfNetShared
from energynets.objectives.infnet.architectures import InfNetStacked
from energynets.objectives.infnet.architectures import StackedCostNet
from energynets.objectives.infnet.energy_objectives import EnergyOf
from energynets.objectives.infnet.energy_objectives import InfNetCompound
from energynets.objectives.infnet.energy_objectives import InfNetEnergyInputs
from energynets.objectives.infnet.energy_objectives import InfNetEnergyObjective
from energynets.objectives.infnet.energy_objectives import InfNetMargin
from energynets.objectives.infnet.energy_objectives import InfNetPerceptron
from energynets.objectives.infnet.losses import InfNetLosses
from energynets.objectives.infnet.losses import NetParams
from energynets.objectives.infnet.losses import energy_evaluator
from energynets.objectives.infnet.losses import infnet_losses
from energynets.objectives.infnet.options import InfNetOptions
from energynets.objectives.infnet.options import InfNetTruncation
from energynets.objectives.infnet.training import carry_params
from energynets.objectives.infnet.training import inference_network

__all__ = [
  "CostHead",
  "EnergyOf",
  "InfNetArchitecture",
  "InfNetCompound",
  "InfNetEnergyInputs",
  "InfNetEnergyObjective",
  "InfNetLosses",
  "InfNetMargin",
  "InfNetOptions",
  "InfNetPerceptron",
  "InfNetSeparated",
  "InfNetShared",
  "InfNetStacked",
  "InfNetTruncation",
  "NetParams",
  "StackedCostNet",
  "carry_params",
  "energy_evaluator",
  "inference_network",
  "infnet_losses",
]

"""`implicit`: an energy trained by the implicit gradient of a bilevel problem
(Shankar & Piratla, "Implicit Training of Energy Model for Structured Prediction").

An inference network A_θ (`net(x, train=...) -> logits [B, L]`, prediction σ(A_θ(x)))
learns from an energy E_φ (any `Energy`, low = good, reached only through its `encode`
and `energy` fields) used as a loss; the energy is
trained so that the network trained on it does well on a primary loss (the same with a
tagger and a `SequenceEnergy`, the implicit paper's POS / NER setting: σ becomes the
per-token softmax, BCE the token CE, Bernoulli negatives categorical ones per token, and
every Δ and score counts real tokens only; `outputs.for_domain` of the energy's domain
picks these pieces):

    inner  θ*(φ) = argmin_θ L_aux(θ, φ),
           L_aux = BCE(y, σ(A_θ(x))) + λ · mean E_φ(x, σ(A_θ(x)))   (+ net_l2 ½‖W_θ‖²)  (Eq. 6)
    outer  min_φ L_prim(θ*(φ), φ)                         (+ l2 ½‖W_φ‖², explicit only)

and the outer gradient is Eq. 4 (`diff.implicit_gradient`): the explicit `∂_φ L_prim`
plus the implicit term `−(∂²L_aux/∂φ∂θ) H⁻¹ ∂_θ L_prim`, `H⁻¹` by the truncated von
Neumann series (the paper) or CG (`inverse_hvp`). Every Hessian product is exact
(`jax.jvp` of `jax.grad`), where the paper used finite differences — a documented
deviation.

The primary loss is a value (`primary=`): a small frozen dataclass carrying its own
options whose `loss(ImplicitPrimaryInputs)` computes L_prim of a batch from the net's
logits, the gold output, the energy of any samples and the task score; a user's own value
with that method plugs in the same way (`ImplicitPrimary`). The family's other options
are one value, `ImplicitOptions`:

    implicit_objective(energy, net, optimizer, inner_optimizer,
                       options=ImplicitOptions(inner_steps=3, inverse_hvp=diff.Neumann(5)),
                       primary=ImplicitCD(num_samples=4))

(the experiment configs' flat `implicit` block is mapped onto these values by
`experiments/choices/implicit.py`).

The library's primary losses, per example, ȳ_A = σ(A_θ(x)):

- `ImplicitSSVM`: `[Δ(ȳ_A, y) − E(x, ȳ_A) + E(x, y)]_+`, Δ = `margin_cost`
  (L1 by default, as InfNet; `OneMinusScore()` is 1 − soft-F1). The network's output is the
  margin's ŷ, the paper's "ȳ replaced by the prediction of the inference net".
- `ImplicitCD`: the contrastive divergence with a cost,
  `L_CD = −log [exp(−E(x, y)) / Σ_{k=0..K} exp(−E(x, ȳ_k) + s(ȳ_k, y))]`, ȳ_0 = y,
  s = 1 − `score` (s(y, y) = 0). The paper prints `log[...]`, i.e. the sign flipped:
  minimizing that would *raise* the gold's energy. ȳ_1..K are K = `num_samples`
  Bernoulli samples of σ(A_θ(x)) that keep a gradient path to θ (`negatives`):
  `StraightThroughNegatives()` (hard samples forward, ∂ȳ/∂p = I backward) or
  `RelaxedNegatives(temperature)` (binary-concrete samples); `include_net_output` adds σ(A_θ(x))
  itself as one more negative. Hard samples without a path would make ∂_θ L_prim = 0
  and the implicit term vanish (the tests check it does not).
- `ImplicitDVN`: the DVN regression (`dvn.value_regression_loss`) of σ(−E(x, ȳ)) to the
  soft-F1 s(ȳ, y), on ȳ ∈ {σ(A_θ(x)), y}: the network's output (the path to θ) and the
  gold output that anchors the top of the scale (DVN's sources `'inference'` and
  `'gold'`, with the network replacing GBI).

One `update` (Algorithm 1, one `jax.jit`): T_inner = `inner_steps` steps of
`inner_optimizer` on L_aux from the current θ (warm start: θ_{t+1} is where the inner
loop ended, and the inner optimizer's state persists across updates), then one step of
`optimizer` on φ with the implicit gradient at that θ. A step whose inverse-HVP solve failed
(relative residual above `max_residual`: the truncated Neumann series diverges where
α λ_max(H) > 2, and the energy's curvature can spike during training) steps on the
explicit term alone and reports `implicit_used` = 0. `implicit_term=False` drops the
implicit term always: the energy then follows `∂_φ L_prim` only, which is the alternating
(InfNet-style) training the paper argues is biased — the ablation of the method.

Choices, with reasons:

- The batch is the update's batch for the inner steps, L_prim and both Hessians (the
  paper's Algorithm 1 samples one (x, y) per outer iteration).
- Dropout: the inner steps run the net in training mode with a fresh mask each; the
  Hessian and cross-Hessian are those of L_aux under one further fixed mask (a sample of
  the stochastic inner objective, as the batch is). L_prim reads the net in eval mode
  (the prediction it is about). The energy is deterministic in both L_aux and L_prim:
  the bilevel problem is about one function E_φ (with dropout in L_prim only, the
  network learns to exploit the deterministic energy; docs/papers/implicit.md).
- The energy's L2 is part of L_prim's explicit term; the net's L2 is part of L_aux (so
  it also regularizes H).
- L_prim is differentiated as the function it is: CD's cost s(ȳ_k, y) and DVN's
  target s(ȳ, y) move with θ through ȳ. (DVN itself regresses at fixed targets, which
  changes nothing for ∂_φ, since s does not depend on φ; but a `stop_gradient` on the
  target would make ∂_θ L_prim, hence the implicit term, the derivative of some other
  function: the finite-difference test of the bilevel value catches it.)

Metrics of `update`: `loss` (L_prim), `grad_norm` (of the total outer gradient; the
trainer's non-finite guard reads both), `explicit_norm`, `implicit_norm`,
`prim_grad_theta_norm` (‖∂_θ L_prim‖: zero means no implicit term), `ihvp_residual`
(relative residual of the inverse-HVP solve: how well K terms solved it),
`implicit_used` (1 if the implicit term entered the step), and the last
inner step's `aux_loss`, `aux_bce`, `aux_energy`, `aux_grad_norm`.

Staged training (`init_from`): the energy continues a previous stage by its
`Energy.continue_from`: a previous energy state (`prev["energy"]`), or for the library's
energies a `local_bce` MLP (a `local_token_ce` tagger, or a CRF's tagger and transitions,
on sequences) as its `local_net`; the inference net continues `prev["inference_net"]`,
else the first of `prev["test_net"]` (infnet), `prev["net"]` (local_bce, local_token_ce)
or, when the energy's parameters have a `local_net` group shaped like the net (a SPEN's
local classifier), that group, else starts fresh. The paper starts both at random;
pretraining is the configs' choice.

Modules: `primary_losses` (L_prim as values, and the sampled negatives),
`options` (`ImplicitOptions`), `training` (`ImplicitLosses`,
`implicit_objective`). Their public names are all importable from this package.
"""

from energynets.objectives.implicit.options import ImplicitOptions
from energynets.objectives.implicit.primary_losses import ImplicitCD
from energynets.objectives.implicit.primary_losses import ImplicitDVN
from energynets.objectives.implicit.primary_losses import ImplicitPrimary
from energynets.objectives.implicit.primary_losses import ImplicitPrimaryInputs
from energynets.objectives.implicit.primary_losses import ImplicitSSVM
from energynets.objectives.implicit.primary_losses import NegativeSampler
from energynets.objectives.implicit.primary_losses import RelaxedNegatives
from energynets.objectives.implicit.primary_losses import StraightThroughNegatives
from energynets.objectives.implicit.primary_losses import bernoulli_negatives
from energynets.objectives.implicit.primary_losses import check_negatives
from energynets.objectives.implicit.primary_losses import contrastive_divergence_loss
from energynets.objectives.implicit.primary_losses import sampled_negatives
from energynets.objectives.implicit.training import ImplicitLosses
from energynets.objectives.implicit.training import implicit_objective

__all__ = [
  "ImplicitCD",
  "ImplicitDVN",
  "ImplicitLosses",
  "ImplicitOptions",
  "ImplicitPrimary",
  "ImplicitPrimaryInputs",
  "ImplicitSSVM",
  "NegativeSampler",
  "RelaxedNegatives",
  "StraightThroughNegatives",
  "bernoulli_negatives",
  "check_negatives",
  "contrastive_divergence_loss",
  "implicit_objective",
  "sampled_negatives",
]

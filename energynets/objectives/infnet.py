"""`infnet`: an energy trained jointly with inference networks (Tu, Pang & Gimpel 2020).

Two feed-forward networks replace gradient-based inference (GBI): a cost-augmented
network F_Φ for the hinge's inner maximization, and a test-time network A_Ψ for
prediction,

    F_Φ(x) ≈ argmin_{ȳ ∈ [0,1]^L}  E_Θ(x, ȳ) − Δ(ȳ, y)                (Eq. 3)
    A_Ψ(x) ≈ argmin_{ȳ ∈ [0,1]^L}  E_Θ(x, ȳ)                          (Eq. 2)

and the energy E_Θ (a `SPENEnergy`; LOW energy = good) is trained on their outputs.
Per example, with ŷ_F = F_Φ(x), ŷ_A = A_Ψ(x) and y the gold labels,

    margin-rescaled hinge  h_F = Δ(ŷ_F, y) − E(x, ŷ_F) + E(x, y)        (Eq. 4)
    perceptron             h_A =          − E(x, ŷ_A) + E(x, y)        (Eq. 5, 2nd term)

    energy step (Θ)      min  mean( [h_F]_+ )                     objective='margin'
                         min  mean( [h_A]_+ )                     objective='perceptron'
                         min  mean( [h_F]_+ + λ_c [h_A]_+ )       objective='compound' (Eq. 6)
                              + l2 · ½‖W_Θ‖²

    inference step (Φ, Ψ)  min  mean( E(x, ŷ_F) − Δ(ŷ_F, y) )  + c · CE(F_Φ(x), y)
                                + λ_A · mean( E(x, ŷ_A) )      + c · CE(A_Ψ(x), y)
                                + net_l2 · ½‖W_{Φ,Ψ}‖²

i.e. the nets maximize the untruncated game value Δ(F) − E(F) − λE(A) of §3 (E(x, y)
does not depend on Φ, Ψ) and also fit the gold labels (the local CE of §4.3, weight
c = `ce_weight`, 1 in the paper, 0 for the ablation). Δ is the L1 distance Σ_l|ŷ_l − y_l|
(`ssvm.task_loss(·, ·, 'l1')`, the paper's choice; for binary y it is the multilinear
extension of the Hamming loss). CE is `multilabel_bce` on the nets' logits (BCE summed
over labels, averaged over examples), and ŷ = σ(logits): the nets output logits [B, L].
Prediction is A_Ψ(x) = σ(logits) — one forward pass, no search.

Sequences (the paper's POS and NER experiments) use the same objective with a
`SequenceEnergy` and taggers as nets: outputs are per-token logits `[B, T, L]`, ŷ the
per-token softmax, CE the token cross-entropy over real tokens and Δ the L1 distance
over real tokens (padded positions, all-zero gold rows, never count); the stacked F_Φ
is then exactly the paper's `softmax(W_q[A_Ψ(x)_t; y_t] + b_q)` per position. The
pieces come from `outputs.OutputStructure`, picked from the energy (`output=`
overrides it).

Choices, with reasons:

- One `update` = k = `num_inner_steps` inference steps ("I steps") on (Φ, Ψ), then one
  energy step ("E step") on Θ (§4.2: k = 5 balanced the two players; k = 1, Tu & Gimpel
  2018's setting, lets the nets lag). The I steps are a `jax.lax.scan` carrying the two
  nets' `ParamGroup`s, so one `jax.jit` covers the whole alternation. All k I steps use
  the update's batch (the trainer hands one batch per update); their dropout masks
  differ. The E step sees the nets after their k steps.
- Zero truncation ([·]_+) only in the energy step (`truncate='energy'`, §4.1): a
  truncated hinge gives the nets no gradient on examples the energy already separates,
  which early in training are exactly those where the nets are bad, and training
  failed without CE (Table 1). `truncate='both'` also truncates F_Φ's term (the nets
  then maximize mean([h_F]_+), Tu & Gimpel 2018, Table 1's "zero trunc. yes" rows);
  `'none'` truncates nothing. A_Ψ's term is never truncated: its problem is Eq. 2,
  which has no hinge (the paper's I-step objective has −λE(x, A_Ψ(x)) bare).
- λ_A (`energy_weight`) defaults to the compound weight λ_c under `'compound'` — one λ
  in the paper's minimax — and to 1 otherwise (`'perceptron'`: A_Ψ is the perceptron's
  inference network; `'margin'`: A_Ψ solves Eq. 2 for the current energy).
- `'margin'` trains A_Ψ jointly instead of fine-tuning it from Φ after training as Tu &
  Gimpel 2018 did (the paper, §2, calls that fine-tune "minimal change"): A_Ψ does not
  enter the energy's loss, so this is the same problem solved alongside, at no extra
  stage. A stage that only fine-tunes the nets against a fixed energy is this objective
  with `optax.set_to_zero()` as the energy optimizer, continuing from this state.
- `'perceptron'` has no F_Φ: the state then holds no `cost_net` and `architecture` is
  unused.
- Architectures of (F_Φ, A_Ψ) (§3.1, Fig. 1), with `net(x) -> [B, L]` logits (an `MLP`):
  `'separated'`: F_Φ and A_Ψ two independent copies of `net`; `'shared'`: one feature
  network (`net`'s hidden layers, read with `return_features=True`) and two heads, A_Ψ's
  the net's own `head` and F_Φ's a second `Dense(L)` — the shared features are trained
  by both nets' terms; `'stacked'`: F_Φ(x, y) = σ(W[A_Ψ(x); y] + b), W [2L → L], the
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
  `local_net` when their shapes match;
- A_Ψ ← `prev["test_net"]` (an infnet state; shapes must match), else `prev["net"]`
  (`local_bce`), else the energy's pretrained `local_net` (itself a multi-label MLP
  classifier), each when shapes match;
- F_Φ ← `prev["cost_net"]` when shapes match; otherwise `'separated'` copies A_Ψ's
  pretrained parameters and `'shared'` copies A_Ψ's head (F_Φ starts at the pretrained
  classifier, as the parsing appendix pretrains both nets with CE); `'stacked'` is
  fresh (W acts on [A_Ψ(x); y], which no local classifier has).

What was carried and what was fresh is logged.
"""

from typing import Any, Callable, NamedTuple, Optional

from absl import logging
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets.objectives import base
from energynets.objectives import outputs
from energynets.objectives import ssvm

OBJECTIVES = ("margin", "perceptron", "compound")
ARCHITECTURES = ("separated", "shared", "stacked")
TRUNCATIONS = ("energy", "both", "none")

NetParams = dict[str, Any]  # {"test_net": Ψ, "cost_net": Φ (absent for 'perceptron')}
EnergyOf = Callable[[jax.Array], jax.Array]  # ȳ [B, L] -> E(x, ȳ) [B] for a fixed x


# ---------------------------------------------------------------------------------------
# The cost-augmented network's extra heads.


class CostHead(nn.Module):
  """`'shared'` F_Φ: `features [B, H] -> logits [B, L]` on A_Ψ's feature network."""
  num_labels: int

  @nn.compact
  def __call__(self, features: jax.Array) -> jax.Array:
    return nn.Dense(self.num_labels, name="head")(features)


class StackedCostNet(nn.Module):
  """`'stacked'` F_Φ: `(A_Ψ(x) [B, L] probabilities, y [B, L]) -> logits [B, L]`.

  `W[A_Ψ(x); y] + b`; the caller stops the gradient at A_Ψ(x).
  """
  num_labels: int

  @nn.compact
  def __call__(self, test_probs: jax.Array, y: jax.Array) -> jax.Array:
    inputs = jnp.concatenate([test_probs, y.astype(test_probs.dtype)], axis=-1)
    return nn.Dense(self.num_labels, name="head")(inputs)


# ---------------------------------------------------------------------------------------
# The energy as the losses see it.


def energy_evaluator(energy: nn.Module, params, x: jax.Array, *, train: bool = False,
                     rng: Optional[jax.Array] = None) -> EnergyOf:
  """`ȳ [B, L] -> E(x, ȳ) [B]` for a fixed `x [B, D]`.

  An energy with `encode(x, train)` and `energy_from_encoding(encoding, y)` (as
  `SPENEnergy` has) encodes x once here, and every evaluation reuses it (same dropout
  mask); any other module is called as `energy(x, y, train=...)` with the same `rng`.
  """
  rngs = {"dropout": rng} if train and rng is not None else None
  variables = {"params": params}
  if hasattr(energy, "encode") and hasattr(energy, "energy_from_encoding"):
    encoding = energy.apply(variables, x, train=train, rngs=rngs, method="encode")
    return lambda y: energy.apply(variables, encoding, y, method="energy_from_encoding")
  return lambda y: energy.apply(variables, x, y, train=train, rngs=rngs)


# ---------------------------------------------------------------------------------------
# The two losses.


class InfNetLosses(NamedTuple):
  """The pure functions `inference_network` is built from (exposed for tests and reuse).

  Attributes:
    net_logits: `(net_params, x [B, D], y [B, L], train, rng) -> (test_logits [B, L],
      cost_logits [B, L] or None)`; `y` only feeds the `'stacked'` F_Φ.
    init_nets: `(rng, batch) -> net_params`, fresh `{"test_net", "cost_net"}`.
    inference_loss: `(net_params, energy_of, batch, rng) -> (loss, metrics)`, the I-step
      loss (module docstring) at a fixed energy `energy_of = energy_evaluator(...)`.
    energy_loss: `(energy_params, batch, y_cost, y_test, rng) -> (loss, metrics)`, the
      E-step loss at fixed net outputs (`[B, L]` probabilities; `y_cost` is None for
      `'perceptron'`, `y_test` is unused by `'margin'`).
    structure: the `OutputStructure` (link, local CE, padding) the losses use.
  """
  net_logits: Callable[..., tuple[jax.Array, Optional[jax.Array]]]
  init_nets: Callable[[jax.Array, base.Batch], NetParams]
  inference_loss: Callable[..., tuple[jax.Array, base.Metrics]]
  energy_loss: Callable[..., tuple[jax.Array, base.Metrics]]
  structure: outputs.OutputStructure = outputs.MULTILABEL


def _check_options(objective, architecture, truncate, surrogate, compound_weight,
                   energy_weight, ce_weight, l2, net_l2) -> None:
  if objective not in OBJECTIVES:
    raise ValueError(f"unknown objective {objective!r}; expected one of {OBJECTIVES}")
  if architecture not in ARCHITECTURES:
    raise ValueError(f"unknown architecture {architecture!r}; expected one of "
                     f"{ARCHITECTURES}")
  if truncate not in TRUNCATIONS:
    raise ValueError(f"unknown truncate {truncate!r}; expected one of {TRUNCATIONS}")
  if surrogate not in ssvm.SURROGATES:
    raise ValueError(f"unknown surrogate {surrogate!r}; expected one of {ssvm.SURROGATES}")
  for name, value in (("compound_weight", compound_weight), ("energy_weight", energy_weight),
                      ("ce_weight", ce_weight), ("l2", l2), ("net_l2", net_l2)):
    if value is not None and not value >= 0:
      raise ValueError(f"{name} must be >= 0, got {value}")


def infnet_losses(energy: nn.Module, net: nn.Module, *, objective: str = "compound",
                  architecture: str = "stacked", compound_weight: float = 1.0,
                  energy_weight: Optional[float] = None, ce_weight: float = 1.0,
                  truncate: str = "energy", surrogate: str = "l1", l2: float = 0.0,
                  net_l2: float = 0.0,
                  output: str | outputs.OutputStructure | None = None) -> InfNetLosses:
  """The I-step and E-step losses and the nets' forward pass (see `inference_network`)."""
  _check_options(objective, architecture, truncate, surrogate, compound_weight,
                 energy_weight, ce_weight, l2, net_l2)
  structure = (outputs.for_energy(energy) if output is None
               else outputs.get_structure(output))
  link = structure.link

  def delta_of(y_hat, y):  # Δ over real positions (sequences: padding excluded)
    return ssvm.task_loss(structure.mask_padding(y_hat, y), y, surrogate)
  uses_cost = objective in ("margin", "compound")
  uses_test_in_energy = objective in ("perceptron", "compound")
  if energy_weight is None:
    energy_weight = compound_weight if objective == "compound" else 1.0

  def net_logits(net_params, x, y, train=False, rng=None):
    test_rng = cost_rng = None
    if train:
      test_rng, cost_rng = jax.random.split(rng)
    test_vars = {"params": net_params["test_net"]}
    test_kwargs = {"train": train, "rngs": {"dropout": test_rng} if train else None}
    if not uses_cost:
      return net.apply(test_vars, x, **test_kwargs), None
    if architecture == "shared":
      # One pass of the feature network feeds both heads (one dropout mask).
      test_logits, features = net.apply(test_vars, x, return_features=True, **test_kwargs)
      cost_logits = CostHead(test_logits.shape[-1]).apply(
          {"params": net_params["cost_net"]}, features)
      return test_logits, cost_logits
    test_logits = net.apply(test_vars, x, **test_kwargs)
    if architecture == "separated":
      cost_logits = net.apply({"params": net_params["cost_net"]}, x, train=train,
                              rngs={"dropout": cost_rng} if train else None)
    else:  # stacked: F_Φ's terms must not reach Ψ
      test_probs = jax.lax.stop_gradient(link(test_logits))
      cost_logits = StackedCostNet(test_logits.shape[-1]).apply(
          {"params": net_params["cost_net"]}, test_probs, y)
    return test_logits, cost_logits

  def init_nets(rng, batch):
    test_rng, cost_rng = jax.random.split(rng)
    x, y = batch["x"], batch["y"]
    params = {"test_net": flax.core.unfreeze(net.init({"params": test_rng}, x)["params"])}
    if not uses_cost:
      return params
    num_labels = y.shape[-1]
    if architecture == "separated":
      cost = net.init({"params": cost_rng}, x)["params"]
    elif architecture == "shared":
      _, features = net.apply({"params": params["test_net"]}, x, return_features=True)
      cost = CostHead(num_labels).init({"params": cost_rng}, features)["params"]
    else:
      probs = jnp.zeros(y.shape, x.dtype)
      cost = StackedCostNet(num_labels).init({"params": cost_rng}, probs, y)["params"]
    params["cost_net"] = flax.core.unfreeze(cost)
    return params

  def inference_loss(net_params, energy_of, batch, rng):
    y = batch["y"]
    test_logits, cost_logits = net_logits(net_params, batch["x"], y, train=True, rng=rng)
    y_test = link(test_logits)
    e_test = jnp.mean(energy_of(y_test))
    ce_test = structure.local_loss(test_logits, y)
    loss = energy_weight * e_test + ce_weight * ce_test
    metrics = {"energy_test": e_test, "ce_test": ce_test}
    if uses_cost:
      y_cost = link(cost_logits)
      delta = delta_of(y_cost, y)
      e_cost = energy_of(y_cost)
      if truncate == "both":  # Tu & Gimpel 2018: maximize the truncated hinge
        cost_term = -jnp.mean(jax.nn.relu(delta - e_cost + energy_of(y)))
      else:  # −(Δ − E(F)); E(x, y) is constant in Φ
        cost_term = jnp.mean(e_cost - delta)
      ce_cost = structure.local_loss(cost_logits, y)
      loss = loss + cost_term + ce_weight * ce_cost
      metrics.update(cost_augmented=jnp.mean(delta - e_cost), delta=jnp.mean(delta),
                     ce_cost=ce_cost)
    if net_l2:
      loss = loss + net_l2 * base.l2_penalty(net_params)
    return loss, metrics

  def energy_loss(energy_params, batch, y_cost, y_test, rng):
    energy_of = energy_evaluator(energy, energy_params, batch["x"], train=True, rng=rng)
    y = batch["y"]
    e_gold = energy_of(jnp.asarray(y, _float_dtype(energy_params)))
    truncated = jax.nn.relu if truncate != "none" else (lambda v: v)
    loss = 0.0
    metrics = {"energy_gold": jnp.mean(e_gold)}
    if uses_cost:
      y_cost = jax.lax.stop_gradient(y_cost)
      delta = delta_of(y_cost, y)
      e_cost = energy_of(y_cost)
      margin = delta - e_cost + e_gold
      hinge = jnp.mean(truncated(margin))
      loss = loss + hinge
      metrics.update(hinge_margin=hinge, active_margin=_fraction(margin > 0),
                     energy_cost=jnp.mean(e_cost), delta=jnp.mean(delta))
    if uses_test_in_energy:
      y_test = jax.lax.stop_gradient(y_test)
      e_test = energy_of(y_test)
      gap = e_gold - e_test
      perceptron = jnp.mean(truncated(gap))
      loss = loss + (compound_weight if objective == "compound" else 1.0) * perceptron
      metrics.update(hinge_perceptron=perceptron, active_perceptron=_fraction(gap > 0),
                     energy_test=jnp.mean(e_test))
    if l2:
      loss = loss + l2 * base.l2_penalty(energy_params)
    return loss, metrics

  return InfNetLosses(net_logits, init_nets, inference_loss, energy_loss, structure)


def _float_dtype(params) -> jnp.dtype:
  """The dtype of a parameter pytree's first leaf (gold labels are cast to it)."""
  leaves = jax.tree.leaves(params)
  return leaves[0].dtype if leaves else jnp.float32


def _fraction(mask: jax.Array) -> jax.Array:
  return jnp.mean(mask.astype(jnp.float32))


# ---------------------------------------------------------------------------------------
# Carrying parameters between stages.


def carry_params(prev_state, fresh_energy, fresh_nets: NetParams, architecture: str,
                 carry_energy: bool = True) -> tuple[Any, NetParams, dict[str, str]]:
  """(energy params, net params, {group: source}) continuing `prev_state`.

  See the module docstring for the rules; `fresh_*` supply every group not carried
  and the shapes a carried group must have. `carry_energy=False` keeps the fresh
  energy (the nets are still carried).
  """
  prev = {k: getattr(v, "params", v) for k, v in prev_state.items()}
  if not {"energy", "net", "test_net"} & set(prev):
    raise ValueError(f"cannot continue from a state with keys {sorted(prev)}; expected "
                     "'energy' (a SPEN or infnet stage), 'net' (local_bce) or 'test_net'")
  sources = {}
  energy_params = fresh_energy
  if not carry_energy:
    sources["energy"] = "fresh (carry_energy=False)"
  elif "energy" in prev:
    energy_params = base.carried(prev["energy"], fresh_energy, "the previous energy")
    sources["energy"] = "energy"
  elif "local_net" in fresh_energy and base.first_match([("net", prev.get("net"))],
                                                    fresh_energy["local_net"]):
    energy_params = dict(fresh_energy, local_net=flax.core.unfreeze(prev["net"]))
    sources["energy"] = "net -> local_net"
  else:
    sources["energy"] = "fresh"

  nets = dict(fresh_nets)
  energy_local = prev["energy"].get("local_net") if "energy" in prev else None
  if "test_net" in prev:
    nets["test_net"] = base.carried(prev["test_net"], fresh_nets["test_net"],
                                     "the previous test-time network")
    sources["test_net"] = "test_net"
  else:
    match = base.first_match([("net", prev.get("net")), ("energy.local_net", energy_local)],
                         fresh_nets["test_net"])
    if match:
      sources["test_net"], nets["test_net"] = match
    else:
      sources["test_net"] = "fresh"

  if "cost_net" in fresh_nets:
    reference = fresh_nets["cost_net"]
    pretrained = sources["test_net"] != "fresh"
    candidates = [("cost_net", prev.get("cost_net"))]
    if architecture == "separated" and pretrained:
      candidates.append((f"{sources['test_net']} (copy of test_net)", nets["test_net"]))
    elif architecture == "shared" and pretrained and "head" in nets["test_net"]:
      candidates.append((f"{sources['test_net']} head (copy of test_net's)",
                         {"head": nets["test_net"]["head"]}))
    match = base.first_match(candidates, reference)
    if match:
      sources["cost_net"], nets["cost_net"] = match
    else:
      sources["cost_net"] = "fresh"
  return energy_params, nets, sources


# ---------------------------------------------------------------------------------------
# The objective.


def inference_network(
    energy: nn.Module,
    net: nn.Module,
    energy_optimizer: optax.GradientTransformation,
    test_optimizer: optax.GradientTransformation,
    cost_optimizer: Optional[optax.GradientTransformation] = None,
    *,
    objective: str = "compound",
    architecture: str = "stacked",
    compound_weight: float = 1.0,
    energy_weight: Optional[float] = None,
    ce_weight: float = 1.0,
    num_inner_steps: int = 5,
    truncate: str = "energy",
    surrogate: str = "l1",
    l2: float = 0.0,
    net_l2: float = 0.0,
    output: str | outputs.OutputStructure | None = None,
    carry_energy: bool = True,
) -> base.Objective:
  """The joint energy / inference-network objective (see the module docstring).

  Args:
    energy: E_Θ, a `SPENEnergy` (or any module `energy(x, y, train) -> [B]`, ideally
      with `encode` / `energy_from_encoding`).
    net: the inference networks' architecture, `net(x, train=..., return_features=...)
      -> [B, L]` logits (an `energynets.nets.MLP`); `'shared'` needs `return_features`
      and a final layer named `head`.
    energy_optimizer: for Θ (the paper: Adam).
    test_optimizer: for Ψ, and the shared feature network under `'shared'` (the paper:
      SGD with momentum with CE, Adam without it for POS; Adam for NER).
    cost_optimizer: for Φ; None uses `test_optimizer`'s transformation (own state).
    objective: `'margin'` (margin-rescaled hinge on F_Φ), `'perceptron'` (on A_Ψ) or
      `'compound'` (their sum, the perceptron weighted by `compound_weight`).
    architecture: `'separated'`, `'shared'` or `'stacked'` (F_Φ from [A_Ψ(x); y]).
    compound_weight: λ_c, the perceptron term's weight in the compound energy loss.
    energy_weight: λ_A, the weight of E(x, A_Ψ(x)) in A_Ψ's loss; None: λ_c under
      `'compound'` (the paper's one λ), else 1.
    ce_weight: weight of the local CE of both nets (paper: 1; 0 for the ablation).
    num_inner_steps: k ≥ 1 I steps per E step (paper: 5).
    truncate: where the hinge is zero-truncated: `'energy'` (the E step only; the
      paper), `'both'` (also F_Φ's I-step term; Tu & Gimpel 2018) or `'none'`.
    surrogate: Δ, a name of `ssvm.SURROGATES` (paper: `'l1'`).
    l2: weight of `½‖W‖²` on the energy's weight matrices.
    net_l2: weight of `½‖W‖²` on the inference nets' weight matrices.
    output: the `OutputStructure` (or its name); None: `outputs.for_energy(energy)`,
      i.e. per-token softmax outputs for a `SequenceEnergy`, σ per label otherwise.
    carry_energy: whether `init_from` carries a previous stage into the energy (see the
      module docstring); False starts it fresh while the nets are still carried. A
      pretrained local term can make every margin inactive from the start: a
      token-CE tagger's confident logits put E(x, y) far below E(x, F_Φ(x)) − Δ
      (Twitter POS: −289 vs −217 with Δ = 19), so the hinge and its gradient stay zero.

  Returns:
    An `Objective` whose state is `{"energy", "test_net", "cost_net"}` `ParamGroup`s
    (no `cost_net` under `'perceptron'`). `update`'s metrics: `loss` and `grad_norm`
    (the E step), `energy_gold`, `hinge_margin`, `active_margin`, `energy_cost`,
    `delta` (margin terms), `hinge_perceptron`, `active_perceptron`, `energy_test`
    (perceptron terms), and the last I step's `infnet_loss`, `infnet_grad_norm`,
    `infnet_energy_test`, `infnet_ce_test` (+ `infnet_cost_augmented` = mean
    Δ − E(x, F_Φ(x)), the paper's l1, `infnet_delta`, `infnet_ce_cost`).
    `predict(state, x)` is σ(A_Ψ(x)) `[B, L]`.
  """
  if not isinstance(num_inner_steps, int) or num_inner_steps < 1:
    raise ValueError(f"num_inner_steps must be an integer >= 1, got {num_inner_steps!r}")
  losses = infnet_losses(energy, net, objective=objective, architecture=architecture,
                         compound_weight=compound_weight, energy_weight=energy_weight,
                         ce_weight=ce_weight, truncate=truncate, surrogate=surrogate,
                         l2=l2, net_l2=net_l2, output=output)
  optimizers = {"energy": energy_optimizer, "test_net": test_optimizer,
                "cost_net": cost_optimizer if cost_optimizer is not None else test_optimizer}

  def init_energy(rng, batch):
    x = batch["x"]
    y = jnp.zeros(batch["y"].shape, x.dtype)
    return flax.core.unfreeze(energy.init({"params": rng}, x, y)["params"])

  def make_state(energy_params, net_params):
    state = {"energy": base.init_group(energy_params, optimizers["energy"])}
    for name, params in net_params.items():
      state[name] = base.init_group(params, optimizers[name])
    return state

  def init(rng, batch):
    energy_rng, nets_rng = jax.random.split(rng)
    return make_state(init_energy(energy_rng, batch), losses.init_nets(nets_rng, batch))

  def init_from(prev_state, rng, batch):
    energy_rng, nets_rng = jax.random.split(rng)
    energy_params, net_params, sources = carry_params(
        prev_state, init_energy(energy_rng, batch), losses.init_nets(nets_rng, batch),
        architecture, carry_energy)
    logging.info("infnet init_from: %s", ", ".join(f"{k} <- {v}" for k, v in
                                                   sorted(sources.items())))
    return make_state(energy_params, net_params)

  def update(state, batch, rng):
    inner_rng, energy_rng = jax.random.split(rng)
    net_names = [k for k in ("test_net", "cost_net") if k in state]
    # The energy is a fixed critic for all k I steps: encode x once.
    energy_params = jax.lax.stop_gradient(state["energy"].params)
    energy_of = energy_evaluator(energy, energy_params, batch["x"])

    def inference_step(groups, step_rng):
      params = {k: g.params for k, g in groups.items()}
      metrics, grads = base.metrics_and_grads(losses.inference_loss, params, energy_of,
                                              batch, step_rng)
      groups = {k: base.apply_gradients(groups[k], grads[k], optimizers[k]) for k in groups}
      return groups, metrics

    # Unrolled: XLA:CPU ran the loop around the taggers' BiLSTMs 7.5x slower than the
    # unrolled body (Twitter POS, k = 5: 2.5 s vs 0.33 s per update); k is small.
    groups, inner_metrics = jax.lax.scan(
        inference_step, {k: state[k] for k in net_names},
        jax.random.split(inner_rng, num_inner_steps), unroll=True)

    net_params = {k: g.params for k, g in groups.items()}
    test_logits, cost_logits = losses.net_logits(net_params, batch["x"], batch["y"])
    y_test = losses.structure.link(test_logits)
    y_cost = None if cost_logits is None else losses.structure.link(cost_logits)
    energy_group, metrics = base.minimize_step(losses.energy_loss, optimizers["energy"],
                                               state["energy"], batch, y_cost, y_test,
                                               energy_rng)
    metrics.update({f"infnet_{k}": v[-1] for k, v in inner_metrics.items()})
    return dict(groups, energy=energy_group), metrics

  def predict(state, x):
    logits = net.apply({"params": state["test_net"].params}, x, train=False)
    return losses.structure.link(logits)

  return base.Objective(init, update, predict, init_from)

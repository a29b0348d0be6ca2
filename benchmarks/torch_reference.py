"""PyTorch reference: the SPEN energy, T-step GBI, a SEAL-dynamic NCE step, an E2E step.

`benchmarks.suite` times these next to the JAX library on the same shapes and reports
JAX / PyTorch ratios, eager and compiled. The eager forms are written the way one
would write them in eager PyTorch (autograd for ∇_y E, `torch.optim.Adam`); the
functional forms at the end (`SealDynamicFunctional`, `E2EStep(mode='compiled')`,
`compiled_gbi_loop`, `compiled_encode`) compute the same numbers as functions of
tensors with `torch.func` gradients, which `torch.compile` turns into one graph each
(`tests/test_benchmark_suite.py` checks them against the eager forms and JAX). All
mirror the library
exactly, so that the two compute the same numbers from the same weights
(`tests/test_benchmark_suite.py` checks energy, ∇_y E, GBI's y_T and SEAL's losses and
gradients against JAX):

- `SPENEnergy`: `energynets.energies.SPENEnergy` without the conditional term (the
  configs use none): F(x) and the local logits from an MLP (`energynets.nets.MLP`:
  dropout on the input and on every hidden layer), the energy
  `−Σ_i y_i ℓ_i(x) + c2ᵀ g(C1 y + c1)`. `load_flax_params` copies a Flax
  parameter tree into it (a Flax `Dense` kernel is `[in, out]`, a torch `Linear`
  weight `[out, in]`).
- `gbi`: F(x) once, then T steps of `energynets.inference.gbi.gbi_step` (projected,
  entropic mirror or logit-space descent; SGD, heavy-ball momentum or Adam with its
  `eps_root`), τ = 0, fixed T (what `gbi_scan` returns as y_T).
- `SealDynamic.step`: one update of `energynets.objectives.seal` in its dynamic phase
  with the NCE loss-net objective (Eq. 4-5: a loss-net step on the ranking loss with K
  Bernoulli samples of the current task-net, then a task-net step on
  `λ1·E(x, σ(F(x))) + λ2·BCE` against the updated loss-net; separate Adam optimizers,
  the task-net's with gradient clipping; fused Adam kernels, PyTorch's fastest eager
  optimizer on CPU). The loss-net's parameters are frozen
  (`requires_grad_(False)`) during the task-net step, as the JAX version's
  `stop_gradient`, so autograd does not differentiate through its feature network.

Optional: needs `torch` (the `bench` extra: `pip install -e ".[bench]"`; a CPU-only
build of torch is enough).
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

ACTIVATIONS = {
  "relu": torch.relu,
  "softplus": F.softplus,
  "tanh": torch.tanh,
  "sigmoid": torch.sigmoid,
  "hardtanh": lambda v: torch.clamp(v, -1.0, 1.0),
}
# energynets.domains.DEFAULT_EPS: the clip of every logarithm of the Box.
EPS = 1e-6


class MLP(torch.nn.Module):
  """`energynets.nets.MLP`: `x [B, D] -> [B, num_outputs]` (and F(x), the features)."""

  def __init__(
    self,
    num_inputs: int,
    hidden: Sequence[int],
    num_outputs: int,
    activation: str = "relu",
    dropout: float = 0.0,
    input_dropout: float = 0.0,
  ):
    super().__init__()
    sizes = [num_inputs, *hidden]
    self.hidden = torch.nn.ModuleList(
      [torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
    )
    self.head = torch.nn.Linear(sizes[-1], num_outputs)
    self.activation = ACTIVATIONS[activation]
    self.dropout, self.input_dropout = dropout, input_dropout

  def forward(self, x: torch.Tensor, return_features: bool = False):
    if self.input_dropout:
      x = F.dropout(x, self.input_dropout, self.training)
    for layer in self.hidden:
      x = self.activation(layer(x))
      if self.dropout:
        x = F.dropout(x, self.dropout, self.training)
    outputs = self.head(x)
    return (outputs, x) if return_features else outputs


class SPENEnergy(torch.nn.Module):
  """`energynets.energies.SPENEnergy` (no conditional term): `E(x, y) -> [B]`."""

  def __init__(
    self,
    num_features: int,
    num_labels: int,
    feature_hidden: Sequence[int],
    feature_activation: str = "relu",
    num_measurements: int = 15,
    activation: str = "softplus",
    dropout: float = 0.0,
    input_dropout: float = 0.0,
  ):
    super().__init__()
    self.local_net = MLP(
      num_features, feature_hidden, num_labels, feature_activation, dropout, input_dropout
    )
    self.measurements = torch.nn.Linear(num_labels, num_measurements)  # C1, c1
    self.weights = torch.nn.Linear(num_measurements, 1, bias=False)  # c2
    self.activation = ACTIVATIONS[activation]

  def encode(self, x: torch.Tensor) -> torch.Tensor:
    """The local logits ℓ(x) (all the energy needs of x without the conditional term)."""
    return self.local_net(x)

  def energy_from_encoding(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """`y [..., L] -> [...]`: any leading axes (a batch, or a batch of sample sets)."""
    if y.dim() > logits.dim():
      logits = logits.unsqueeze(1)
    label_term = self.weights(self.activation(self.measurements(y))).squeeze(-1)
    return -(y * logits).sum(-1) + label_term

  def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return self.energy_from_encoding(self.encode(x), y)


# ---------------------------------------------------------------------------------------
# Weights from the JAX side.


def _dense(linear: torch.nn.Linear, params) -> None:
  with torch.no_grad():
    linear.weight.copy_(torch.from_numpy(np.array(params["kernel"], np.float32).T))
    if linear.bias is not None:
      linear.bias.copy_(torch.from_numpy(np.array(params["bias"], np.float32)))


def load_flax_mlp(mlp: MLP, params: Any) -> MLP:
  """Copies a Flax `energynets.nets.MLP` parameter tree into `mlp`; returns it."""
  for i, layer in enumerate(mlp.hidden):
    _dense(layer, params[f"hidden_{i}"])
  _dense(mlp.head, params["head"])
  return mlp


def load_flax_spen(energy: SPENEnergy, params: Any) -> SPENEnergy:
  """Copies a Flax `SPENEnergy` parameter tree (`local_net`, `global`) into `energy`."""
  if "conditional" in params:
    raise ValueError("the PyTorch reference has no conditional term")
  load_flax_mlp(energy.local_net, params["local_net"])
  _dense(energy.measurements, params["global"]["measurements"])
  _dense(energy.weights, params["global"]["weights"])
  return energy


# ---------------------------------------------------------------------------------------
# Gradient-based inference.


def _to_y(z: torch.Tensor, method: str) -> torch.Tensor:
  return torch.sigmoid(z) if method == "logit" else z


def _logit(y: torch.Tensor) -> torch.Tensor:
  y = y.clamp(EPS, 1.0 - EPS)
  return torch.log(y) - torch.log1p(-y)


def gbi(
  energy: SPENEnergy,
  x: torch.Tensor,
  num_steps: int = 20,
  method: str = "mirror",
  optimizer: str = "momentum",
  learning_rate: float = 0.1,
  momentum: float = 0.95,
  b1: float = 0.9,
  b2: float = 0.999,
  adam_eps: float = 1e-8,
  adam_eps_root: float = 1e-16,
  init: str = "uniform",
  logits: torch.Tensor | None = None,
  gradient: str = "autograd",
) -> torch.Tensor:
  """y_T of `num_steps` GBI steps, as `energynets.inference.gbi.gbi_scan` with entropy
  weight 0.

  Args:
    energy: the SPEN energy (put in eval mode: no dropout).
    x: inputs `[B, D]` (unused when `logits` is given).
    num_steps, method, optimizer, learning_rate, momentum, b1, b2, adam_eps,
      adam_eps_root: the GBI options by the configs' names
      (`experiments.choices.gbi`).
    init: 'uniform' (0.5) or 'local' (σ(ℓ(x))).
    logits: a precomputed F(x) (the loop alone); None: computed once here.
    gradient: how ∇_y E is taken, both generic: 'autograd' (`torch.autograd.grad`,
      fastest eagerly) or 'func' (`torch.func.grad`, what `torch.compile` traces into
      one graph).

  Returns:
    y_T `[B, L]`.
  """
  if energy.training:
    energy.eval()
  with torch.no_grad():
    logits = energy.encode(x) if logits is None else logits
    y0 = torch.sigmoid(logits) if init == "local" else torch.full_like(logits, 0.5)
  z = _logit(y0) if method == "logit" else y0

  def grad_at(z):
    if gradient == "func":
      return torch.func.grad(
        lambda z_: energy.energy_from_encoding(logits, _to_y(z_, method)).sum()
      )(z)
    with torch.enable_grad():  # also when the caller runs under torch.no_grad()
      z = z.detach().requires_grad_(True)
      e = energy.energy_from_encoding(logits, _to_y(z, method))
      (g,) = torch.autograd.grad(e.sum(), z)
    return g

  g = grad_at(z)
  mu = torch.zeros_like(z)
  nu = torch.zeros_like(z)
  with torch.no_grad():
    for t in range(1, num_steps + 1):
      if optimizer == "sgd":
        d = g
      elif optimizer == "momentum":
        mu = momentum * mu + g
        d = mu
      elif optimizer == "adam":
        mu = b1 * mu + (1.0 - b1) * g
        nu = b2 * nu + (1.0 - b2) * g * g
        mu_hat = mu / (1.0 - b1**t)
        nu_hat = nu / (1.0 - b2**t)
        d = mu_hat / (torch.sqrt(nu_hat + adam_eps_root) + adam_eps)
      else:
        raise ValueError(f"unknown GBI optimizer {optimizer!r}")
      if method == "projected":
        z = (z - learning_rate * d).clamp(0.0, 1.0)
      elif method == "mirror":
        # σ(logit y − ηd): the same step as Box.mirror_step, in the form that is fastest
        # eagerly (the library's one-exp form, op by op, took twice as long here).
        z = torch.sigmoid(_logit(z) - learning_rate * d)
      elif method == "logit":
        z = z - learning_rate * d
      else:
        raise ValueError(f"unknown GBI method {method!r}")
      g = grad_at(z)
  return _to_y(z, method)


# ---------------------------------------------------------------------------------------
# SEAL-dynamic with the NCE loss-net objective.


def bernoulli_log_prob(logits: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
  """`logits [B, L], ys [B, S, L] -> [B, S]`: `log Π_i P(y_i | σ(logits_i))`."""
  logits = logits.unsqueeze(1).expand_as(ys)
  return -F.binary_cross_entropy_with_logits(logits, ys, reduction="none").sum(-1)


def nce_ranking_loss(energies: torch.Tensor, log_noise: torch.Tensor) -> torch.Tensor:
  """`[B, 1+K] x2 -> [B]`: `−log softmax(−E − log P_N)_0`, the gold in column 0."""
  scores = -energies - log_noise
  return torch.logsumexp(scores, -1) - scores[:, 0]


def _adam(params, lr: float, fused: bool) -> torch.optim.Optimizer:
  """Adam; `fused` asks for the single-kernel update (on CPU since torch 2.4; 1.3x faster
  SEAL steps than the default per-tensor loop here), the fastest eager option."""
  params = list(params)
  if fused:
    try:
      return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):  # an older torch or an unsupported device
      pass
  return torch.optim.Adam(params, lr=lr)


class SealDynamic:
  """One SEAL-dynamic update (`step`), the NCE loss-net objective, as
  `energynets.objectives.seal.seal_objective` with `SealOptions()` (dynamic) and
  `SealNCE()`."""

  def __init__(
    self,
    task_net: MLP,
    loss_net: SPENEnergy,
    num_samples: int = 10,
    energy_weight: float = 1.0,
    bce_weight: float = 1.0,
    task_learning_rate: float = 1e-3,
    loss_learning_rate: float = 1e-3,
    task_clip_norm: float = 10.0,
    generator: torch.Generator | None = None,
    fused_adam: bool = True,
  ):
    self.task_net, self.loss_net = task_net, loss_net
    self.num_samples = num_samples
    self.energy_weight, self.bce_weight = energy_weight, bce_weight
    self.task_clip_norm = task_clip_norm
    self.task_optimizer = _adam(task_net.parameters(), task_learning_rate, fused_adam)
    self.loss_optimizer = _adam(loss_net.parameters(), loss_learning_rate, fused_adam)
    self.generator = generator

  def nce_loss(
    self, x: torch.Tensor, y: torch.Tensor, task_logits: torch.Tensor, noise: torch.Tensor
  ) -> torch.Tensor:
    """L_E on given noise samples `[B, K, L]` of σ(task_logits) (loss-net in its
    current train/eval mode)."""
    ys = torch.cat([y.unsqueeze(1), noise], 1)  # gold first
    log_noise = bernoulli_log_prob(task_logits, ys)
    energies = self.loss_net.energy_from_encoding(self.loss_net.encode(x), ys)
    return nce_ranking_loss(energies, log_noise).mean()

  def task_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """L_F = λ1·mean E(x, σ(F(x))) + λ2·BCE (task-net in its current mode; the loss-net
    runs without dropout)."""
    logits = self.task_net(x)
    self.loss_net.eval()
    energy = self.loss_net(x, torch.sigmoid(logits))
    bce = F.binary_cross_entropy_with_logits(logits, y, reduction="none").sum(-1).mean()
    return self.energy_weight * energy.mean() + self.bce_weight * bce

  def step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """A loss-net step then a task-net step on the batch; (L_E, L_F) before the steps."""
    # Loss-net: samples from the current task-net (no dropout, no gradient).
    self.task_net.eval()
    with torch.no_grad():
      task_logits = self.task_net(x)
      probs = torch.sigmoid(task_logits).unsqueeze(1).expand(-1, self.num_samples, -1)
      noise = torch.bernoulli(probs, generator=self.generator)
    self.loss_net.train()
    nce = self.nce_loss(x, y, task_logits, noise)
    self.loss_optimizer.zero_grad(set_to_none=True)
    nce.backward()
    self.loss_optimizer.step()
    # Task-net: against the updated loss-net, which is a constant here.
    self.task_net.train()
    for p in self.loss_net.parameters():
      p.requires_grad_(False)
    try:
      loss = self.task_loss(x, y)
      self.task_optimizer.zero_grad(set_to_none=True)
      loss.backward()
    finally:
      for p in self.loss_net.parameters():
        p.requires_grad_(True)
    if self.task_clip_norm:
      torch.nn.utils.clip_grad_norm_(self.task_net.parameters(), self.task_clip_norm)
    self.task_optimizer.step()
    return float(nce.detach()), float(loss.detach())


# ---------------------------------------------------------------------------------------
# Functional forms (parameters as dicts of tensors) and whole compiled updates.
#
# `torch.compile` turns a function of tensors into one graph when nothing in it breaks
# the trace: gradients by `torch.func.grad` (not `.backward()`), the optimizer written
# out, no module state changed inside. These forms compute the same updates as the
# eager references above from the same modules' parameters (`named_parameters()` names).


def params_of(*modules: torch.nn.Module, prefixes: Sequence[str] = ()) -> dict:
  """Detached copies of the modules' parameters, keyed `prefix + name`."""
  prefixes = list(prefixes) or [""] * len(modules)
  return {
    f"{prefix}{name}": p.detach().clone()
    for module, prefix in zip(modules, prefixes)
    for name, p in module.named_parameters()
  }


def _linear(params: dict, name: str, x: torch.Tensor) -> torch.Tensor:
  return F.linear(x, params[f"{name}.weight"], params.get(f"{name}.bias"))


def mlp_apply(
  mlp: MLP, params: dict, x: torch.Tensor, train: bool, prefix: str = ""
) -> torch.Tensor:
  """`MLP.forward` on `params` (keys `prefix + 'hidden.i.weight'`...); dropout if `train`."""
  if mlp.input_dropout:
    x = F.dropout(x, mlp.input_dropout, train)
  for i in range(len(mlp.hidden)):
    x = mlp.activation(_linear(params, f"{prefix}hidden.{i}", x))
    if mlp.dropout:
      x = F.dropout(x, mlp.dropout, train)
  return _linear(params, f"{prefix}head", x)


def spen_encode(
  energy: SPENEnergy, params: dict, x: torch.Tensor, train: bool, prefix: str = ""
) -> torch.Tensor:
  """`SPENEnergy.encode` on `params`."""
  return mlp_apply(energy.local_net, params, x, train, f"{prefix}local_net.")


def spen_energy_from_encoding(
  energy: SPENEnergy, params: dict, logits: torch.Tensor, y: torch.Tensor, prefix: str = ""
) -> torch.Tensor:
  """`SPENEnergy.energy_from_encoding` on `params`."""
  if y.dim() > logits.dim():
    logits = logits.unsqueeze(1)
  measured = energy.activation(_linear(params, f"{prefix}measurements", y))
  return -(y * logits).sum(-1) + _linear(params, f"{prefix}weights", measured).squeeze(-1)


def adam_init(params: dict) -> dict:
  """Adam's state: zero moments and a step count (a tensor, so that compiled code does
  not specialize on its value)."""
  return {
    "m": {k: torch.zeros_like(v) for k, v in params.items()},
    "v": {k: torch.zeros_like(v) for k, v in params.items()},
    "count": torch.zeros((), dtype=torch.float32, device=next(iter(params.values())).device),
  }


def adam_update(
  params: dict,
  grads: dict,
  state: dict,
  lr: float,
  b1: float = 0.9,
  b2: float = 0.999,
  eps: float = 1e-8,
) -> tuple[dict, dict]:
  """One step of Adam as `torch.optim.Adam` (and optax.adam) computes it.

  Returns:
    (new params, new state).
  """
  count = state["count"] + 1
  correction1, correction2 = 1 - b1**count, 1 - b2**count
  m = {k: b1 * state["m"][k] + (1 - b1) * g for k, g in grads.items()}
  v = {k: b2 * state["v"][k] + (1 - b2) * g * g for k, g in grads.items()}
  new = {
    k: p - lr * (m[k] / correction1) / (torch.sqrt(v[k] / correction2) + eps)
    for k, p in params.items()
  }
  return new, {"m": m, "v": v, "count": count}


def clip_grad_norm(grads: dict, max_norm: float) -> dict:
  """`torch.nn.utils.clip_grad_norm_` as a function: scales by
  `min(1, max_norm / (‖g‖ + 1e-6))`."""
  norm = torch.sqrt(sum((g * g).sum() for g in grads.values()))
  scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
  return {k: g * scale for k, g in grads.items()}


class SealDynamicFunctional:
  """`SealDynamic.step` as one function of tensors (`update`): the same losses, gradients
  by `torch.func.grad_and_value`, Adam and the task-net's clipping written out, the
  noise and dropout drawn inside; `compile=True` runs it through `torch.compile` (with
  `compile_options`).
  Initial parameters are copied from the modules, which then only describe the shapes."""

  def __init__(
    self,
    task_net: MLP,
    loss_net: SPENEnergy,
    num_samples: int = 10,
    energy_weight: float = 1.0,
    bce_weight: float = 1.0,
    task_learning_rate: float = 1e-3,
    loss_learning_rate: float = 1e-3,
    task_clip_norm: float = 10.0,
    compile: bool = False,
    compile_options: dict | None = None,
  ):
    self.task_net, self.loss_net = task_net, loss_net
    self.num_samples = num_samples
    self.energy_weight, self.bce_weight = energy_weight, bce_weight
    self.task_learning_rate, self.loss_learning_rate = task_learning_rate, loss_learning_rate
    self.task_clip_norm = task_clip_norm
    self.task_params, self.loss_params = params_of(task_net), params_of(loss_net)
    self.task_state, self.loss_state = adam_init(self.task_params), adam_init(self.loss_params)
    self.update = (
      torch.compile(self._update, **(compile_options or {})) if compile else self._update
    )

  def _nce_loss(self, loss_params, x, y, task_logits, noise):
    ys = torch.cat([y.unsqueeze(1), noise], 1)
    log_noise = bernoulli_log_prob(task_logits, ys)
    energies = spen_energy_from_encoding(
      self.loss_net, loss_params, spen_encode(self.loss_net, loss_params, x, True), ys
    )
    return nce_ranking_loss(energies, log_noise).mean()

  def _task_loss(self, task_params, loss_params, x, y):
    logits = mlp_apply(self.task_net, task_params, x, True)
    loss_logits = spen_encode(self.loss_net, loss_params, x, False)
    energy = spen_energy_from_encoding(
      self.loss_net, loss_params, loss_logits, torch.sigmoid(logits)
    )
    bce = F.binary_cross_entropy_with_logits(logits, y, reduction="none").sum(-1).mean()
    return self.energy_weight * energy.mean() + self.bce_weight * bce

  def _update(self, task_params, loss_params, task_state, loss_state, x, y):
    """`(task_params, loss_params, task_state, loss_state, x, y) -> (the four updated,
    L_E, L_F)`: a loss-net step then a task-net step, as `SealDynamic.step`."""
    with torch.no_grad():
      task_logits = mlp_apply(self.task_net, task_params, x, False)
      probs = torch.sigmoid(task_logits).unsqueeze(1).expand(-1, self.num_samples, -1)
      noise = torch.bernoulli(probs)
    loss_grads, nce = torch.func.grad_and_value(self._nce_loss)(
      loss_params, x, y, task_logits, noise
    )
    loss_params, loss_state = adam_update(
      loss_params, loss_grads, loss_state, self.loss_learning_rate
    )
    loss_net_now = {k: v.detach() for k, v in loss_params.items()}
    task_grads, task_loss = torch.func.grad_and_value(self._task_loss)(
      task_params, loss_net_now, x, y
    )
    if self.task_clip_norm:
      task_grads = clip_grad_norm(task_grads, self.task_clip_norm)
    task_params, task_state = adam_update(
      task_params, task_grads, task_state, self.task_learning_rate
    )
    return task_params, loss_params, task_state, loss_state, nce, task_loss

  def step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One update of the held parameters on the batch; (L_E, L_F) before it."""
    (self.task_params, self.loss_params, self.task_state, self.loss_state, nce, task_loss) = (
      self.update(self.task_params, self.loss_params, self.task_state, self.loss_state, x, y)
    )
    return nce, task_loss


# ---------------------------------------------------------------------------------------
# End-to-end SPEN: one training step through T unrolled GBI steps.


class E2EStep:
  """One update of `energynets.objectives.e2e` (the e2e config's joint stage): encode x
  (dropout), y_0 = σ(ℓ(x)), T steps of logit-space GBI `z ← z − η_t ∇_z E(x, σ(z))`
  with learned step sizes η_t = softplus(ρ_t), the loss Σ_t w_t/T · mean BCE(σ(z_t), y*)
  (w_t = 1/(T−t+1), the clip `loss_eps`) + l2·½Σ‖W‖² over the weight matrices, then
  Adam on the energy (`learning_rate`) and on ρ (`step_size_learning_rate`).

  `mode`: 'eager' (autograd: ∇_z E with `create_graph=True`, `.backward()` through the
  unroll, fused `torch.optim.Adam`), 'func' (the same update as one function of tensors
  with nested `torch.func.grad`, Adam written out) or 'compiled' ('func' through
  `torch.compile` with `compile_options`). Initial parameters are copied from `energy`.
  """

  def __init__(
    self,
    energy: SPENEnergy,
    num_steps: int = 20,
    step_size: float = 1.0,
    l2: float = 1e-5,
    learning_rate: float = 1e-4,
    step_size_learning_rate: float = 1e-2,
    loss_eps: float = 1e-6,
    mode: str = "eager",
    compile_options: dict | None = None,
  ):
    if mode not in ("eager", "func", "compiled"):
      raise ValueError(f"unknown mode {mode!r}")
    self.energy, self.num_steps, self.mode = energy, num_steps, mode
    self.l2, self.loss_eps = l2, loss_eps
    self.learning_rate, self.step_size_learning_rate = learning_rate, step_size_learning_rate
    device = next(energy.parameters()).device
    t = torch.arange(1, num_steps + 1, dtype=torch.float32, device=device)
    self.iterate_weights = 1.0 / (num_steps - t + 1.0) / num_steps
    rho = float(np.log(np.expm1(step_size)))
    self.params = params_of(energy)
    self.params["step_sizes"] = torch.full((num_steps,), rho, device=device)
    if mode == "eager":
      self.params = {k: v.requires_grad_(True) for k, v in self.params.items()}
      energy_params = [v for k, v in self.params.items() if k != "step_sizes"]
      self.optimizers = [
        _adam(energy_params, learning_rate, True),
        _adam([self.params["step_sizes"]], step_size_learning_rate, True),
      ]
    else:
      self.state = adam_init(self.params)
      self.update = (
        torch.compile(self._update, **(compile_options or {}))
        if mode == "compiled"
        else self._update
      )

  def loss(
    self, params: dict, x: torch.Tensor, y: torch.Tensor, train: bool = True, gradient: str = "func"
  ) -> torch.Tensor:
    """The e2e training loss at `params` (with 'step_sizes'); `gradient`: how ∇_z E is
    taken inside the unroll, 'func' (`torch.func.grad`) or 'autograd'
    (`torch.autograd.grad(create_graph=True)`); both differentiable again."""
    logits = spen_encode(self.energy, params, x, train)
    z = _logit(torch.sigmoid(logits))
    eta = F.softplus(params["step_sizes"])

    def total_energy(z_):
      return spen_energy_from_encoding(self.energy, params, logits, torch.sigmoid(z_)).sum()

    value = 0.0
    for t in range(self.num_steps):
      if gradient == "func":
        g = torch.func.grad(total_energy)(z)
      else:
        (g,) = torch.autograd.grad(total_energy(z), z, create_graph=True)
      z = z - eta[t] * g
      p = torch.sigmoid(z).clamp(self.loss_eps, 1.0 - self.loss_eps)
      bce = -(y * torch.log(p) + (1.0 - y) * torch.log1p(-p)).sum(-1).mean()
      value = value + self.iterate_weights[t] * bce
    l2 = 0.5 * sum((v * v).sum() for k, v in params.items() if k.endswith(".weight"))
    return value + self.l2 * l2

  def _update(self, params, state, x, y):
    """`(params, state, x, y) -> (params, state, loss)`: the functional step."""
    grads, value = torch.func.grad_and_value(self.loss)(params, x, y)
    step_params, step_state = (
      {"step_sizes": params["step_sizes"]},
      _sub_state(state, ("step_sizes",)),
    )
    energy_keys = tuple(k for k in params if k != "step_sizes")
    energy_params, energy_state = adam_update(
      {k: params[k] for k in energy_keys},
      {k: grads[k] for k in energy_keys},
      _sub_state(state, energy_keys),
      self.learning_rate,
    )
    step_params, step_state = adam_update(
      step_params, {"step_sizes": grads["step_sizes"]}, step_state, self.step_size_learning_rate
    )
    return ({**energy_params, **step_params}, _merge_states(energy_state, step_state), value)

  def gradients(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """(loss, gradients) at the current parameters, by this step's own mode (for tests)."""
    if self.mode == "eager":
      value = self.loss(self.params, x, y, gradient="autograd")
      grads = torch.autograd.grad(value, list(self.params.values()))
      return value.detach(), dict(zip(self.params, grads))
    grads, value = torch.func.grad_and_value(self.loss)(self.params, x, y)
    return value, grads

  def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One update of the held parameters; the loss before it."""
    if self.mode == "eager":
      value = self.loss(self.params, x, y, gradient="autograd")
      for optimizer in self.optimizers:
        optimizer.zero_grad(set_to_none=True)
      value.backward()
      for optimizer in self.optimizers:
        optimizer.step()
      return value.detach()
    self.params, self.state, value = self.update(self.params, self.state, x, y)
    return value


def _sub_state(state: dict, keys: Sequence[str]) -> dict:
  return {
    "m": {k: state["m"][k] for k in keys},
    "v": {k: state["v"][k] for k in keys},
    "count": state["count"],
  }


def _merge_states(a: dict, b: dict) -> dict:
  return {"m": {**a["m"], **b["m"]}, "v": {**a["v"], **b["v"]}, "count": a["count"]}


def compiled_gbi_loop(energy: SPENEnergy, **options) -> Any:
  """`logits -> y_T`: `gbi` from a precomputed F(x) with `torch.func` gradients, through
  `torch.compile` (`options`: `gbi`'s GBI options, and `compile_options`, a dict for
  `torch.compile`)."""
  compile_options = options.pop("compile_options", {})
  energy.eval()

  def loop(logits):
    return gbi(energy, None, logits=logits, gradient="func", **options)

  return torch.compile(loop, **compile_options)


def compiled_encode(energy: SPENEnergy, **compile_options) -> Any:
  """`x -> ℓ(x)` (F(x) and the local logits: the feed-forward prediction) through
  `torch.compile`."""
  energy.eval()
  return torch.compile(energy.encode, **compile_options)

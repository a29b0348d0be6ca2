"""Eager PyTorch reference: the SPEN energy, T-step GBI and a SEAL-dynamic NCE step.

`benchmarks.suite` times these next to the JAX library on the same shapes and reports
JAX / PyTorch ratios. They are written the way one would write them in eager PyTorch
(autograd for ∇_y E, `torch.optim.Adam`, no compilation), and mirror the library
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

from typing import Any, Optional, Sequence

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

  def __init__(self, num_inputs: int, hidden: Sequence[int], num_outputs: int,
               activation: str = "relu", dropout: float = 0.0, input_dropout: float = 0.0):
    super().__init__()
    sizes = [num_inputs, *hidden]
    self.hidden = torch.nn.ModuleList(
        [torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])])
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

  def __init__(self, num_features: int, num_labels: int, feature_hidden: Sequence[int],
               feature_activation: str = "relu", num_measurements: int = 15,
               activation: str = "softplus", dropout: float = 0.0,
               input_dropout: float = 0.0):
    super().__init__()
    self.local_net = MLP(num_features, feature_hidden, num_labels, feature_activation,
                         dropout, input_dropout)
    self.measurements = torch.nn.Linear(num_labels, num_measurements)  # C1, c1
    self.weights = torch.nn.Linear(num_measurements, 1, bias=False)    # c2
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


def gbi(energy: SPENEnergy, x: torch.Tensor, num_steps: int = 20, method: str = "mirror",
        optimizer: str = "momentum", learning_rate: float = 0.1, momentum: float = 0.95,
        b1: float = 0.9, b2: float = 0.999, adam_eps: float = 1e-8,
        adam_eps_root: float = 1e-16, init: str = "uniform",
        logits: Optional[torch.Tensor] = None) -> torch.Tensor:
  """y_T of `num_steps` GBI steps from `init` ('uniform' 0.5 or 'local' σ(ℓ(x))), as
  `energynets.inference.gbi.gbi_scan` with entropy weight 0; F(x) computed once (or
  given: `logits`, the loop alone)."""
  energy.eval()
  with torch.no_grad():
    logits = energy.encode(x) if logits is None else logits
    y0 = torch.sigmoid(logits) if init == "local" else torch.full_like(logits, 0.5)
  z = _logit(y0) if method == "logit" else y0

  def grad_at(z):
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
        mu_hat = mu / (1.0 - b1 ** t)
        nu_hat = nu / (1.0 - b2 ** t)
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
  `energynets.objectives.seal.seal_objective(phase='dynamic', objective='nce')`."""

  def __init__(self, task_net: MLP, loss_net: SPENEnergy, num_samples: int = 10,
               energy_weight: float = 1.0, bce_weight: float = 1.0,
               task_learning_rate: float = 1e-3, loss_learning_rate: float = 1e-3,
               task_clip_norm: float = 10.0, generator: Optional[torch.Generator] = None,
               fused_adam: bool = True):
    self.task_net, self.loss_net = task_net, loss_net
    self.num_samples = num_samples
    self.energy_weight, self.bce_weight = energy_weight, bce_weight
    self.task_clip_norm = task_clip_norm
    self.task_optimizer = _adam(task_net.parameters(), task_learning_rate, fused_adam)
    self.loss_optimizer = _adam(loss_net.parameters(), loss_learning_rate, fused_adam)
    self.generator = generator

  def nce_loss(self, x: torch.Tensor, y: torch.Tensor, task_logits: torch.Tensor,
               noise: torch.Tensor) -> torch.Tensor:
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

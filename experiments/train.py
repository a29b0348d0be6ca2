"""Importable experiment driver: config -> dataset, objective, training, results.json.

`train_and_evaluate(config, workdir)` is what `experiments/main.py` runs and what
`experiments/compare.py` loops over; notebooks can call it too.
"""

import ast
import contextlib
import fcntl
import importlib
import json
import os
import subprocess
import time
import types
from typing import Any, Callable

from absl import logging
import jax
import ml_collections
import numpy as np

from energynets import data as data_lib
from energynets import diff
from energynets import energies
from energynets import inference
from energynets import nets
from energynets import objectives
from energynets import train as train_lib
from energynets.train import run as run_lib
from energynets.train.optimizers import make_optimizer
from experiments import cli
from experiments import plots
from experiments import tasks


def initialize_distributed(coordinator_address: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None) -> None:
  """Joins this process to a multi-process (multi-host) run; call before any JAX work.

  `jax.distributed.initialize`: with all three arguments the process joins the
  coordinator at `coordinator_address` (`host:port` of process 0, which serves it);
  without them JAX detects the cluster itself (TPU pods, SLURM, Open MPI). Afterwards
  `jax.devices()` lists every process's devices, so `make_mesh` spans all hosts, and
  the loop feeds each process only its rows of every batch (`process_slice`,
  `shard_batch`); orbax writes each checkpoint once and only process 0 writes metrics
  and results.json.
  """
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id)
  logging.info("process %d of %d: %d local and %d global devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())


def get_config(method: str, dataset: str, overrides: tuple[str, ...] | list[str] = ()
               ) -> ml_collections.ConfigDict:
  """`experiments/configs/<method>.py:<dataset>` with `key=value` overrides applied.

  A `method` with a dot is the import path of a config module outside this repository
  (`my_pkg.configs.my_method`, with the same `get_config(dataset)`).

  Raises:
    cli.UserError (a ValueError): an unknown config name, a config module that does not
      import, a dataset variant the config rejects, or a bad override
      (`apply_overrides`), each in one line.
  """
  if "." not in method:
    try:
      module = importlib.import_module(f"experiments.configs.{method}")
    except ModuleNotFoundError as e:
      if e.name != f"experiments.configs.{method}":
        raise  # the config exists but imports something missing: a bug, keep its traceback
      here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
      known = sorted(n[:-3] for n in os.listdir(here)
                     if n.endswith(".py") and n not in ("__init__.py", "base.py"))
      raise cli.UserError(f"unknown config {method!r}; known: {', '.join(known)}, or the "
                          "import path of a config module (my_pkg.configs.name)") from None
  else:
    try:
      module = importlib.import_module(method)
    except Exception as e:  # any failure while importing user code: name it in one line
      raise cli.UserError(f"config module {method!r} does not import: {type(e).__name__}: "
                          f"{' '.join(str(e).split())}") from None
  try:
    config = module.get_config(dataset)
  except ValueError as e:  # the config rejects the variant (`unknown dataset variant ...`)
    raise cli.UserError(f"config {method}:{dataset}: {e}") from None
  config.lock()  # an override of a key the config lacks (a typo) is an error
  return apply_overrides(config, overrides)


def apply_overrides(config: ml_collections.ConfigDict, overrides: tuple[str, ...] | list[str]
                    ) -> ml_collections.ConfigDict:
  """`key=value` overrides (values parsed as Python literals, else strings), in place.

  Raises:
    cli.ConfigKeyError (a KeyError and a cli.UserError): a key that a locked config does
      not have, the closest key suggested (`unknown config key train.stepz; did you
      mean train.steps?`).
    cli.UserError: an override without `=`, or a value of a type the key does not take.
  """
  for item in overrides:
    key, sep, value = item.partition("=")
    if not sep:
      raise cli.UserError(f"a config override must be key=value, got {item!r}")
    try:
      parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      parsed = value  # a bare string such as optimizer.name=sgd
    if config.is_locked and (problem := cli.unknown_config_key(config, key)):
      raise cli.ConfigKeyError(problem)
    try:
      config.update_from_flattened_dict({key: parsed})
    except TypeError:  # ConfigDict keeps each field's type
      field = config
      for part in key.split("."):
        field = field[part]
      raise cli.UserError(f"config override {item}: {key} takes values of type "
                          f"{type(field).__name__}, not {value!r}") from None
  return config


def load_data(config: ml_collections.ConfigDict):
  """The dataset of `config.data` (its task's loader)."""
  return tasks.task_for(config).load(config)


def _mlp(config, dataset) -> nets.MLP:
  return nets.MLP(hidden=tuple(config.model.hidden), num_outputs=dataset.num_labels,
                  activation=config.model.activation, dropout=config.model.dropout,
                  input_dropout=config.model.input_dropout)


def _build_local(config, dataset, optimizer) -> objectives.Objective:
  # BCE per label; on segmentation data per pixel of the FCN's logit map.
  net = fcn(config) if _is_segmentation(dataset) else _mlp(config, dataset)
  l2 = config.loss.l2
  if config.loss.l2_c > 0:
    l2 = 1.0 / (config.loss.l2_c * len(dataset.train.x))
  # `loss.score` (mlp.py, fcn.py): BCE − w·score, the exact score a regression loss-net learns.
  score = config.loss.get("score", "")
  return objectives.local_bce(net, optimizer, l2=l2,
                              score=objectives.scores.get_score(score) if score else None,
                              score_weight=config.loss.get("score_weight", 0.0))


def tagger(config, dataset) -> nets.PackedTagger:
  """The BiLSTM tagger of `config.model` on the packed token array, sized by `dataset`'s
  vocabularies (a sequence dataset: `experiments.tasks.SequenceData`)."""
  m, source = config.model, dataset.source
  word_init = None
  if m.glove_path:
    matrix, found = data_lib.load_glove(m.glove_path, source.word_vocab, m.word_dim)
    logging.info("GloVe %s: %d of %d words found", m.glove_path, found,
                 len(source.word_vocab))
    word_init = nets.pretrained_embedding_init(matrix)
  size = lambda vocab: len(vocab) if vocab is not None else 0
  embedder = nets.TokenEmbedder(
      vocab_size=len(source.word_vocab), word_dim=m.word_dim, word_init=word_init,
      char_vocab_size=len(source.char_vocab) if m.char_filters else 0,
      char_dim=m.char_dim, char_filters=m.char_filters,
      num_pos=size(source.pos_vocab) if m.pos_dim else 0, pos_dim=m.pos_dim,
      num_chunk=size(source.chunk_vocab) if m.chunk_dim else 0, chunk_dim=m.chunk_dim,
      dropout=m.dropout)
  encoder = nets.BiLSTM(hidden_size=m.hidden, num_layers=m.num_layers, dropout=m.dropout)
  return nets.PackedTagger(embedder=embedder, encoder=encoder, num_tags=dataset.num_tags,
                           dropout=m.dropout)


def sequence_energy(config, dataset) -> energies.SequenceEnergy:
  """The `SequenceEnergy` of `config.energy` (Tu et al. 2020, Eq. 7-9) with `tagger`'s
  BiLSTM as its local net, so a `local_token_ce` stage's tagger carries into it."""
  e = config.energy
  return energies.SequenceEnergy(
      local_net=tagger(config, dataset), tlm_variants=_names(e.tlm_variants) or (),
      gamma=e.gamma, tlm_weight=e.tlm_weight, tlm_hidden=e.tlm_hidden,
      pairwise_scale=e.pairwise_scale, local_scale=e.local_scale)


def _is_sequence(dataset) -> bool:
  return isinstance(dataset, tasks.SequenceData)


def _is_segmentation(dataset) -> bool:
  return isinstance(dataset, data_lib.SegmentationDataset)


def fcn(config) -> nets.FCN:
  """The segmentation `FCN` of `config.model` (task-net, and the energy's local net)."""
  m = config.model
  return nets.FCN(features=tuple(m.features), strides=tuple(m.strides),
                  kernel_size=m.kernel_size, activation=m.activation, dropout=m.dropout,
                  skip_connections=m.skip_connections)


def segmentation_energy(config) -> energies.SegmentationEnergy:
  """The `SegmentationEnergy` of `config.energy`: its global term, and `fcn(config)` as
  the local term when `energy.local_term` (so a `local` FCN stage carries into it)."""
  e = config.energy
  return energies.SegmentationEnergy(
      local_net=fcn(config) if e.local_term else None, features=tuple(e.features),
      strides=tuple(e.strides), kernel_size=e.kernel_size, hidden=tuple(e.hidden),
      activation=e.activation, pooling=e.pooling)


def feed_forward_net(config, dataset):
  """The feed-forward (inference / task) network: the BiLSTM `tagger` on sequence data,
  the `FCN` on segmentation data, else the `MLP` of `config.model`."""
  if _is_sequence(dataset):
    return tagger(config, dataset)
  return fcn(config) if _is_segmentation(dataset) else _mlp(config, dataset)


def _build_local_token_ce(config, dataset, optimizer) -> objectives.Objective:
  return objectives.local_token_ce(tagger(config, dataset), optimizer, l2=config.loss.l2)


def _build_crf(config, dataset, optimizer) -> objectives.Objective:
  return objectives.crf_objective(tagger(config, dataset), dataset.num_tags, optimizer,
                                  l2=config.loss.l2)


def denoising_input_statistics(section, dataset) -> dict[str, float]:
  """`input_mean` / `input_std` for a denoising trunk: the mean and standard deviation of
  the training split's noisy images when `section.normalize_input`, else (0, 1).

  Fixed numbers, computed once from the data the run trains on (validation and test
  are not looked at), so a checkpoint evaluates the same on every machine.
  """
  if not section.get("normalize_input", False):
    return dict(input_mean=0.0, input_std=1.0)
  recorded = getattr(dataset, "input_statistics", None)
  if recorded is not None:  # a restored run's stand-in (`run_dataset`) carries the numbers
    return dict(recorded)
  images = np.asarray(dataset.train.x, np.float64)
  return dict(input_mean=float(images.mean()), input_std=float(images.std()))


def _build_local_squared_error(config, dataset, optimizer) -> objectives.Objective:
  c = config.cnn
  net = nets.CNNDenoiser(features=tuple(c.features), kernel_size=c.kernel_size,
                         activation=c.activation, padding=c.padding,
                         conv_impl=c.conv_impl, **denoising_input_statistics(c, dataset))
  return objectives.local_squared_error(net, optimizer)


def spen_energy(config, dataset) -> energies.SPENEnergy:
  """The `SPENEnergy` of `config.energy`, sized for `dataset`."""
  e = config.energy
  return energies.SPENEnergy(
      num_labels=dataset.num_labels, feature_hidden=tuple(e.feature_hidden),
      feature_activation=e.feature_activation, num_measurements=e.num_measurements,
      activation=e.activation, num_conditional=e.num_conditional, dropout=e.dropout,
      input_dropout=e.input_dropout)


def image_energy(config, dataset):
  """The denoising energy of `config.energy` (`kind`: 'deep_prior' or 'foe'; only the
  DeepPrior's trunk reads `normalize_input`, see `denoising_input_statistics`)."""
  e = config.energy
  common = dict(noise_variance=e.noise_variance, learn_noise_variance=e.learn_noise_variance,
                padding=e.padding, conv_impl=e.conv_impl)
  if e.kind == "deep_prior":
    return energies.DeepPriorEnergy(features=tuple(e.features), kernel_size=e.kernel_size,
                                    activation=e.activation, pooling=e.pooling,
                                    **denoising_input_statistics(e, dataset), **common)
  if e.kind == "foe":
    return energies.FieldOfExperts(num_filters=e.num_filters, filter_size=e.filter_size,
                                   temperature=e.temperature, **common)
  raise ValueError(f"unknown energy.kind {e.kind!r}; expected 'deep_prior' or 'foe'")


def _build_spen_pretrain(config, dataset, optimizer) -> objectives.Objective:
  return objectives.spen_pretrain(spen_energy(config, dataset), optimizer, l2=config.loss.l2)


def _names(text: str) -> tuple[str, ...] | None:
  """A config string of names separated by commas or `+` as a tuple; None when empty
  (the default). `+` lets a name list ride in a comma-separated flag such as compare's
  --methods (`infnet:energy.tlm_variants=forward+backward`)."""
  return tuple(n.strip() for n in str(text).replace("+", ",").split(",") if n.strip()) or None


def energy_module(config, dataset):
  """`config.energy` as a module: the energy an import path `config.energy.module`
  (`"package.module:function"`, called as `function(config, dataset)`) returns, else a
  `SequenceEnergy` on sequence data, a `SegmentationEnergy` on segmentation data, a
  denoising energy when it names a `kind`, else a `SPENEnergy`."""
  outside = config.energy.get("module", "")
  if outside:
    return run_lib.import_path(outside, "config.energy.module")(config, dataset)
  if _is_sequence(dataset):
    return sequence_energy(config, dataset)
  if _is_segmentation(dataset):
    return segmentation_energy(config)
  if "kind" in config.energy:
    return image_energy(config, dataset)
  return spen_energy(config, dataset)


def _build_ssvm(config, dataset, optimizer) -> objectives.Objective:
  """SSVM: config.loss (shared with the feed-forward methods) holds `SSVMOptions`'
  fields, config.gbi / config.predict_gbi the two inferences."""
  options = objectives.options_from_config(
      objectives.SSVMOptions, config.loss, strict=False,
      loss_aug_gbi=inference.GBIConfig(**config.gbi),
      predict_gbi=inference.GBIConfig(**config.predict_gbi))
  return objectives.ssvm_hinge(energy_module(config, dataset), optimizer, options=options)


def _build_dmf(config, dataset, optimizer) -> objectives.Objective:
  d = config.dmf
  return objectives.deep_mean_field(
      _mlp(config, dataset), optimizer, num_iters=d.num_iters,
      rank=None if d.rank < 0 else d.rank, l2=config.loss.l2, train_unary=d.train_unary,
      features=d.features, damping=d.damping)


def _build_seal(config, dataset, optimizer) -> objectives.Objective:
  """SEAL: config.optimizer trains the task-net, config.loss_net_optimizer the loss-net;
  config.seal (SealOptions' fields, `objective` and the loss-net objective's options)
  maps onto the options and the loss-net objective value; config.gbi is the static
  loss-net's GBI, config.predict_gbi that of seal.predict=gbi. Each update takes
  seal.rounds task-net steps and rounds × seal.loss_net_steps loss-net steps, so the
  schedules span that many steps (`optimizer`, built for one step per update, is
  rebuilt)."""
  del optimizer
  options, loss_net_objective = objectives.seal_options_from_config(
      config.seal.to_dict(), loss_aug_gbi=inference.GBIConfig(**config.gbi),
      predict_gbi=inference.GBIConfig(**config.predict_gbi))
  task_steps = config.train.steps * options.rounds
  return objectives.seal_objective(
      feed_forward_net(config, dataset), energy_module(config, dataset),
      make_optimizer(config.optimizer, task_steps),
      make_optimizer(config.loss_net_optimizer, task_steps * options.loss_net_steps),
      options=options, loss_net_objective=loss_net_objective)


def _build_seal_ranking(config, dataset, optimizer) -> objectives.Objective:
  """SEAL's ablation without a loss-net: seal.energy_weight (λ1) weighs the ranking loss."""
  s = config.seal
  return objectives.task_net_ranking(feed_forward_net(config, dataset), optimizer,
                                     num_samples=s.num_samples,
                                     ranking_weight=s.energy_weight, bce_weight=s.bce_weight,
                                     output="sequence" if _is_sequence(dataset) else "multilabel")


def _build_dvn(config, dataset, optimizer) -> objectives.Objective:
  """DVN: config.dvn and config.loss's `init` and `l2` are `DVNOptions`' fields."""
  options = objectives.options_from_config(
      objectives.DVNOptions, config.dvn, init=config.loss.init, l2=config.loss.l2,
      inference_gbi=inference.GBIConfig(**config.gbi),
      adversarial_gbi=inference.GBIConfig(**config.adversarial_gbi),
      predict_gbi=inference.GBIConfig(**config.predict_gbi))
  return objectives.deep_value_network(energy_module(config, dataset), optimizer,
                                       options=options)


def _build_infnet(config, dataset, optimizer) -> objectives.Objective:
  """Inference networks: `optimizer` (config.optimizer) trains the energy, and
  config.test_net_optimizer / config.cost_net_optimizer A_Ψ / F_Φ, which take
  infnet.num_inner_steps steps per update, so their schedules span that many steps.
  config.infnet (`InfNetOptions`' fields, `objective` and the energy objectives' options)
  maps onto the options and the energy objective value; config.loss.l2 is the energy's
  L2."""
  options, energy_objective = objectives.infnet_options_from_config(
      config.infnet.to_dict(), l2=config.loss.l2)
  net_steps = config.train.steps * options.num_inner_steps
  return objectives.inference_network(
      energy_module(config, dataset), feed_forward_net(config, dataset), optimizer,
      make_optimizer(config.test_net_optimizer, net_steps),
      make_optimizer(config.cost_net_optimizer, net_steps), options=options,
      energy_objective=energy_objective)


def _build_e2e(config, dataset, optimizer) -> objectives.Objective:
  """End-to-end SPEN: config.optimizer trains the energy, config.step_size_optimizer the
  learned GBI step sizes; config.e2e and config.loss's `trainable` and `l2` are
  `E2EOptions`' fields, config.gbi the unrolled inference of training and test."""
  options = objectives.options_from_config(
      objectives.E2EOptions, config.e2e, gbi=inference.GBIConfig(**config.gbi),
      trainable=config.loss.trainable, l2=config.loss.l2)
  return objectives.e2e_objective(
      energy_module(config, dataset), optimizer, options=options,
      step_size_optimizer=make_optimizer(config.step_size_optimizer, config.train.steps))


def _build_implicit(config, dataset, optimizer) -> objectives.Objective:
  """Implicit training: `optimizer` (config.optimizer) trains the energy by the implicit
  gradient, config.inner_optimizer the inference net, which takes implicit.inner_steps
  steps per update, so its schedule spans that many steps. config.implicit
  (`ImplicitOptions`' fields, `primary` and the primary losses' options) maps onto the
  options and the primary loss value; its `inverse_hvp` block is a `diff.InverseHVP`
  record and config.loss.l2 the energy's L2."""
  options, primary = objectives.implicit_options_from_config(
      config.implicit.to_dict(), inverse_hvp=diff.InverseHVP(**config.implicit.inverse_hvp),
      l2=config.loss.l2)
  return objectives.implicit_objective(
      feed_forward_net(config, dataset), energy_module(config, dataset), optimizer,
      make_optimizer(config.inner_optimizer, config.train.steps * options.inner_steps),
      options=options, primary=primary)


# config.method -> builder(config, dataset, optimizer) -> Objective. A new method adds
# one objective file in energynets/objectives, one builder here and one config; code
# outside this repository names its builder by import path instead (`build_objective`).
OBJECTIVE_BUILDERS: dict[str, Callable[..., objectives.Objective]] = {
    "local": _build_local,
    "local_squared_error": _build_local_squared_error,
    "local_token_ce": _build_local_token_ce,
    "crf": _build_crf,
    "spen_pretrain": _build_spen_pretrain,
    "ssvm": _build_ssvm,
    "dmf": _build_dmf,
    "infnet": _build_infnet,
    "seal": _build_seal,
    "seal_ranking": _build_seal_ranking,
    "dvn": _build_dvn,
    "e2e": _build_e2e,
    "implicit": _build_implicit,
}


def build_objective(config: ml_collections.ConfigDict,
                    dataset) -> objectives.Objective:
  """The method named by `config.method`, built for `dataset`'s shapes.

  Args:
    config: an experiment config (one stage's).
    dataset: the task's dataset (or a restored run's stand-in, `run_dataset`).

  Returns:
    `OBJECTIVE_BUILDERS[config.method](config, dataset, optimizer)`, or, when
    `config.method` is an import path `"package.module:function"`, that function called
    the same way; `optimizer` is `config.optimizer` over `config.train.steps`.
  """
  builder = method_builder(config.method)
  if config.method != "local" and config.get("loss", {}).get("score", ""):
    raise ValueError(f"loss.score={config.loss.score!r} trains the feed-forward baselines "
                     f"(method 'local': mlp.py, fcn.py), not method {config.method!r}")
  optimizer = make_optimizer(config.optimizer, config.train.steps)
  return builder(config, dataset, optimizer)


def method_builder(method: str) -> Callable[..., objectives.Objective]:
  """The builder `(config, dataset, optimizer) -> Objective` of `config.method`: an
  `OBJECTIVE_BUILDERS` name or an import path `"package.module:function"`; a
  ValueError (one line, naming the method or path and the cause) otherwise."""
  if run_lib.is_import_path(method):
    return run_lib.import_path(method, "config.method")
  if method not in OBJECTIVE_BUILDERS:
    raise ValueError(f"unknown method {method!r}; known: {sorted(OBJECTIVE_BUILDERS)}, or "
                     "an import path 'package.module:function'")
  return OBJECTIVE_BUILDERS[method]


def check_builders(config: ml_collections.ConfigDict) -> None:
  """Resolves every stage's `method` and `energy.module` now, so that a misspelled
  method or an import path that does not import fails before anything trains.

  Raises:
    ValueError: one line naming the method or path and why it does not resolve.
  """
  for _, stage in stage_configs(config):
    method_builder(stage.method)
    outside = stage.get("energy", {}).get("module", "")
    if outside:
      run_lib.import_path(outside, "config.energy.module")


def flatten_dict(tree: dict, prefix: str = "") -> dict[str, Any]:
  """A nested dict as one level of dotted keys (`{'a': {'b': 1}}` -> `{'a.b': 1}`)."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(flatten_dict(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def stage_configs(config: ml_collections.ConfigDict
                  ) -> list[tuple[str, ml_collections.ConfigDict]]:
  """The training stages: `[(name, config)]`, one unnamed stage unless `stage_order` is set.

  `config.stages.<name>` holds a stage's overrides of the top-level config (same nested
  keys, e.g. `train.steps`, `optimizer.learning_rate`, `method`), applied in
  `config.stage_order` (comma-separated). Overriding a key the config does not have is
  an error, so a misspelled stage option cannot be silently ignored.
  """
  order = _names(config.get("stage_order", "")) or ()
  if not order:
    return [("", config)]
  base = config.to_dict()
  stages = base.pop("stages", {})
  base.pop("stage_order")
  unknown = [n for n in order if n not in stages]
  if unknown:
    raise ValueError(f"stage_order names {unknown}, which config.stages does not define "
                     f"(defined: {sorted(stages)})")
  result = []
  for name in order:
    stage = ml_collections.ConfigDict(base)
    stage.lock()  # unknown keys raise instead of being added
    try:
      stage.update_from_flattened_dict(flatten_dict(stages[name]))
    except (KeyError, AttributeError) as e:
      raise ValueError(f"stage {name!r} overrides {e}, which the config does not have") from e
    result.append((name, stage))
  return result


def code_revision() -> str:
  here = os.path.dirname(os.path.abspath(__file__))
  try:
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                         text=True, check=True).stdout.strip()
    # Untracked files, committed results (e.g. the table a benchmark is rewriting) and
    # markdown docs do not make the code dirty: none of them changes a number.
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
         ":(exclude)benchmarks/results", ":(exclude)*.md"], cwd=os.path.dirname(here),
        capture_output=True, text=True, check=True).stdout.strip()
    return rev + ("+dirty" if dirty else "")
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


# The selected model's soft test predictions, next to results.json.
PREDICTIONS_FILE = "test_predictions.npz"


# Held (flock) by the process that runs in a workdir; the OS drops it when that process
# ends, however it ends, so a killed run leaves no stale lock.
LOCK_FILE = ".lock"


@contextlib.contextmanager
def workdir_lock(workdir: str):
  """Refuses a workdir that another process is training in: two runs in one directory
  would overwrite each other's checkpoints and results. Process 0 alone locks in a
  multi-process run (its processes share the workdir)."""
  if jax.process_index() != 0:
    yield
    return
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, LOCK_FILE)
  handle = open(path, "w")
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    handle.close()
    raise RuntimeError(f"{workdir} is in use by another process (it holds {path}): wait "
                       "for that run to end or pick another workdir") from None
  try:
    yield
  finally:
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       allow_config_change: bool = False) -> dict[str, Any]:
  """Trains (stage by stage), selects on validation, evaluates on test; writes results.json.

  A run in `workdir` resumes at its last step (a finished one only re-evaluates). A
  workdir another process is using is refused (`workdir_lock`), and so is one whose run
  was trained with a config that differs from `config` in what it trains
  (`check_resumed_config`), unless `allow_config_change`.
  """
  with workdir_lock(workdir), matmul_precision(config):
    check_resumed_config(config, workdir, allow_config_change)
    return _train_and_evaluate(config, workdir)


# The config a workdir's run trains with, written at each start (`check_resumed_config`).
CONFIG_FILE = "config.json"

# Keys (the last two parts of a dotted key, a stage's too) that a resumed run may change:
# how it logs, evaluates and checkpoints, on how many devices, and where the data files
# live. `train.steps` may grow (train on); any other change alters what the saved
# checkpoints are the training of.
RESUMABLE_CHANGES = ("train.log_every", "train.eval_every", "train.checkpoint_every",
                     "train.tensorboard", "train.eval_batch_size", "train.num_devices",
                     "data.data_dir")


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
  """`key (old -> new)` for every key where config dict `new` trains differently from
  `old`: any changed key but `RESUMABLE_CHANGES` and a raised `train.steps`."""
  # Through JSON as the config is recorded (tuples become lists).
  before = flatten_dict(json.loads(json.dumps(old, default=_json_default)))
  after = flatten_dict(json.loads(json.dumps(new, default=_json_default)))
  changes = []
  for key in sorted(set(before) | set(after)):
    a, b = before.get(key, "<missing>"), after.get(key, "<missing>")
    tail = ".".join(key.split(".")[-2:])
    if a == b or tail in RESUMABLE_CHANGES:
      continue
    if tail == "train.steps" and isinstance(a, int) and isinstance(b, int) and b >= a:
      continue
    changes.append(f"{key} ({a!r} -> {b!r})")
  return changes


def _recorded_config(workdir: str) -> dict[str, Any] | None:
  """The config of the run in `workdir`: `CONFIG_FILE`, else results.json's (a run from
  before that file), else None; None as well for a workdir without checkpoints, whose
  first attempt failed before saving any and so starts afresh."""
  dirs = [os.path.join(workdir, "checkpoints")]
  stages = os.path.join(workdir, "stages")
  if os.path.isdir(stages):
    dirs += [os.path.join(stages, name, "checkpoints") for name in os.listdir(stages)]
  if not any(os.path.isdir(d) and any(n.isdigit() for n in os.listdir(d)) for d in dirs):
    return None
  for name, read in ((CONFIG_FILE, lambda record: record),
                     ("results.json", lambda record: record["meta"]["config"])):
    try:
      with open(os.path.join(workdir, name)) as f:
        return read(json.load(f))
    except (OSError, ValueError, KeyError, TypeError):
      continue
  return None


def check_resumed_config(config: ml_collections.ConfigDict, workdir: str,
                         allow_config_change: bool = False) -> None:
  """Refuses to resume the run in `workdir` with a config that trains differently, then
  records `config` as the workdir's (`CONFIG_FILE`).

  Args:
    config: the config about to train in `workdir`.
    workdir: the run's directory.
    allow_config_change: resume even so (the changes are logged as a warning).

  Raises:
    cli.UserError: `config_changes` of the recorded config and `config` is not empty and
      `allow_config_change` is False; one line listing the keys (old -> new).
  """
  new = config.to_dict()
  old = _recorded_config(workdir)
  changes = config_changes(old, new) if old is not None else []
  if changes and not allow_config_change:
    shown = changes[:8] + ([f"and {len(changes) - 8} more"] if len(changes) > 8 else [])
    raise cli.UserError(
        f"{workdir} holds a run trained with another config; it differs in "
        f"{', '.join(shown)}. Use a fresh --workdir, or pass --allow_config_change to "
        "continue that run with the new config")
  if changes:
    logging.warning("continuing the run in %s with a changed config: %s", workdir,
                    ", ".join(changes))
  if jax.process_index() == 0:  # the other processes of a multi-process run read it
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, CONFIG_FILE)
    with open(path + ".partial", "w") as f:
      json.dump(new, f, indent=2, sort_keys=True, default=_json_default)
    os.replace(path + ".partial", path)


def matmul_precision(config: ml_collections.ConfigDict):
  """`jax.default_matmul_precision(config.train.matmul_precision)` ('' or absent: JAX's
  own setting is left alone); an unknown name is a ValueError naming the key."""
  name = config.train.get("matmul_precision", "")
  if not name:
    return contextlib.nullcontext()
  try:
    with jax.default_matmul_precision(name):  # JAX checks the name on entry only
      pass
  except ValueError as e:
    raise ValueError(f"config.train.matmul_precision={name!r}: {e}") from None
  return jax.default_matmul_precision(name)


def _train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  started = time.time()
  check_builders(config)
  task = tasks.task_for(config)
  dataset = task.load(config)
  logging.info("%s dataset %s: train %s, validation %s, test %s", task.name, dataset.name,
               dataset.train.x.shape, dataset.validation.x.shape, dataset.test.x.shape)
  mesh = train_lib.make_mesh(config.train.num_devices or None)
  eval_bs = config.train.eval_batch_size
  stages = stage_configs(config)
  state, stage_meta = None, []
  num_train = len(dataset.train.x)
  for name, stage_config in stages:
    if stage_config.train.batch_size > num_train:
      # Full-batch training on a small dataset (e.g. br's 512 on genbase's 417 rows).
      full = num_train - num_train % mesh.size
      logging.warning("batch size %d exceeds the %d training examples of %s: using %d "
                      "(full batch)", stage_config.train.batch_size, num_train, dataset.name,
                      full)
      stage_config = ml_collections.ConfigDict(stage_config.to_dict())
      stage_config.train.batch_size = full
    objective = build_objective(stage_config, dataset)
    predict = train_lib.build_predict(objective, mesh)
    evaluate = _validation_evaluator(task, config, predict, dataset.validation, eval_bs, mesh)
    stage_dir = os.path.join(workdir, "stages", name) if name else workdir
    if name:
      logging.info("=== stage %r: method %s, %d steps", name, stage_config.method,
                   stage_config.train.steps)
    train_batch = None
    if task.train_batches is not None:
      train_batch = task.train_batches(config, dataset, stage_config.train.batch_size,
                                       stage_config.train.seed)
    result = train_lib.fit(objective, {"x": dataset.train.x, "y": dataset.train.y},
                           train_lib.LoopOptions.from_config(stage_config.train), stage_dir,
                           evaluate=evaluate, mesh=mesh, previous_state=state,
                           train_batch=train_batch)
    state, last_stage, last_result = result.state, (name, stage_config), result
    stage_meta.append({"stage": name, "method": stage_config.method,
                       "batch_size": stage_config.train.batch_size,
                       "selected_step": result.selected_step, "final_step": result.final_step})

  test_outputs = {}

  def soft_predictions(split):
    outputs = _split_predictions(task, config, predict, state, split.x, eval_bs, mesh)
    if split is dataset.test:
      test_outputs["test"] = outputs
    return outputs

  results = task.results(dataset, soft_predictions)
  diagnostics = DIAGNOSTICS.get(stages[-1][1].method)
  if diagnostics is not None:
    results.update(diagnostics(stages[-1][1], dataset, state))
  results["meta"] = {
      "dataset": dataset.name,
      "split": dataset.meta.get("split_rule"),
      "split_seed": config.data.split_seed,
      "fold": config.data.get("fold", 0),
      "seed": config.train.seed,
      "selected_step": stage_meta[-1]["selected_step"],
      "final_step": stage_meta[-1]["final_step"],
      "stages": stage_meta,
      # Wall time of this invocation: a resumed run counts only its own part.
      "train_seconds": time.time() - started,
      "num_devices": mesh.size,
      "code_revision": code_revision(),
      "task": task.name,
      "metric_definitions": task.metric_definitions,
      "dataset_meta": dataset.meta,
      "config": config.to_dict(),
  }
  if jax.process_index() == 0:
    measurements = _measurement_kernel(state)
    if measurements is not None:
      figure = os.path.join(workdir, "measurement_matrix.png")
      plots.plot_measurement_matrix(
          measurements, figure, f"C1 of {config.method} on {dataset.name} "
          f"({config.get('energy', {}).get('activation', '')})")
      results["meta"]["figures"] = [os.path.basename(figure)]
    if isinstance(test_outputs.get("test"), np.ndarray):
      # The selected model's soft test outputs, for figures and significance tests
      # without retraining; float32 as computed, since outputs near 0.5 (an untrained
      # DVN's) would cross the threshold when rounded.
      np.savez_compressed(os.path.join(workdir, PREDICTIONS_FILE),
                          test=np.asarray(test_outputs["test"], np.float32))
    with open(os.path.join(workdir, "results.json"), "w") as f:
      json.dump(results, f, indent=2, sort_keys=True, default=_json_default)
    _write_run(workdir, task, config, dataset, last_stage, last_result, results)
  return results


# The builder every experiments.main run records in run.json (`objective_from_run`).
RUN_BUILDER = "experiments.train:objective_from_run"

# How each task's outputs become labels: (decoding, threshold) of `Predictor.predict`;
# multi-label runs use the threshold tuned on validation instead.
_TASK_DECODING = {"multilabel": ("threshold", 0.5), "segmentation": ("threshold", 0.5),
                  "sequence": ("argmax", 0.5), "denoising": ("identity", 0.5)}


def _write_run(workdir: str, task, config, dataset, last_stage, result, results) -> None:
  """`workdir/run.json` of a finished experiment: the last stage's selected checkpoint,
  the model's input shapes and `objective_from_run` with the run's config."""
  name, stage_config = last_stage
  decoding, threshold = _TASK_DECODING[task.name]
  source = f"the {task.name} task's metric threshold"
  if "threshold" in results:
    threshold, source = float(results["threshold"]), "validation"
  # The rows the model sees (segmentation's test-time crops), one example each.
  x = task.rows_for_model(config, dataset.test.x[:1])
  y = task.rows_for_model(config, dataset.test.y[:1])
  kwargs = {"config": json.loads(json.dumps(config.to_dict(), default=_json_default)),
            "dataset": run_dataset_metadata(task, dataset)}
  run_lib.write_run(
      workdir, arrays=run_lib.array_specs({"x": x, "y": y}),
      checkpoint=run_lib.checkpoint_record(result.selected_value, result.selected_step,
                                           f"stages/{name}" if name else ""),
      init_batch_size=stage_config.train.batch_size,
      predict_batch_size=config.train.eval_batch_size, decoding=decoding,
      decoding_source=f"the {task.name} task", threshold=threshold, threshold_source=source,
      builder={"path": RUN_BUILDER, "kwargs": kwargs},
      metadata={"writer": "experiments.main", "task": task.name, "dataset": dataset.name,
                "method": stage_config.method, "stage": name,
                "selected_step": result.selected_step, "results": "results.json"})


def run_dataset_metadata(task, dataset) -> dict[str, Any]:
  """What the objective builders read from `dataset`, as JSON (`run_dataset` rebuilds a
  stand-in from it): sizes and vocabularies, never the data itself."""
  meta = {"task": task.name, "name": dataset.name, "num_train": len(dataset.train.x),
          "train_shape": list(np.shape(dataset.train.x)[1:])}
  if task.name == "multilabel":
    meta.update(num_labels=dataset.num_labels, num_features=dataset.num_features,
                label_names=list(dataset.label_names))
  elif task.name == "sequence":
    size = lambda vocab: len(vocab) if vocab is not None else None
    source = dataset.source
    meta.update(num_tags=dataset.num_tags, word_vocab=size(source.word_vocab),
                char_vocab=size(source.char_vocab), pos_vocab=size(source.pos_vocab),
                chunk_vocab=size(source.chunk_vocab), tag_names=list(dataset.train.tag_names),
                scheme=dataset.train.scheme)
  elif task.name == "denoising":
    images = np.asarray(dataset.train.x, np.float64)
    meta["input_statistics"] = dict(input_mean=float(images.mean()),
                                    input_std=float(images.std()))
  return meta


def run_dataset(meta: dict[str, Any]):
  """A stand-in for a run's dataset from `run_dataset_metadata`: the task's dataset type
  with the recorded sizes, its splits zero-filled views of the training shape (no memory,
  no files), so `build_objective` gives the run's objective without its data."""
  task, name = meta["task"], meta["name"]

  def zeros(*shape):
    return np.broadcast_to(np.zeros((), np.float32), shape)

  x = zeros(meta["num_train"], *meta["train_shape"])
  if task == "multilabel":
    split = data_lib.Split(x, zeros(meta["num_train"], meta["num_labels"]))
    return data_lib.MultiLabelDataset(
        name, split, split, split, label_names=tuple(meta["label_names"]),
        feature_names=tuple(f"x{i}" for i in range(meta["num_features"])), meta={})
  if task == "segmentation":
    split = data_lib.SegmentationSplit(x, zeros(*x.shape[:3]))
    channels = x.shape[-1]
    return data_lib.SegmentationDataset(name, split, split, split, np.zeros(channels),
                                        np.ones(channels), meta={})
  if task == "sequence":
    vocab = lambda n: range(n) if n is not None else None
    source = types.SimpleNamespace(
        word_vocab=vocab(meta["word_vocab"]), char_vocab=vocab(meta["char_vocab"]),
        pos_vocab=vocab(meta["pos_vocab"]), chunk_vocab=vocab(meta["chunk_vocab"]))
    split = tasks.SequenceSplit(x, zeros(meta["num_train"], x.shape[1], meta["num_tags"]),
                                zeros(*x.shape[:2]), tuple(meta["tag_names"]), meta["scheme"])
    return tasks.SequenceData(name, split, split, split, meta["num_tags"], source, {})
  if task == "denoising":
    split = types.SimpleNamespace(x=x, y=x)
    return types.SimpleNamespace(name=name, train=split, validation=split, test=split,
                                 natural=split, meta={},
                                 input_statistics=meta["input_statistics"])
  raise ValueError(f"unknown task {task!r} in a run's dataset record")


def objective_from_run(config: dict[str, Any], dataset: dict[str, Any]) -> objectives.Objective:
  """The objective of an `experiments.main` run, rebuilt without its data files (the
  builder its run.json records; `energynets.load_run` calls it).

  Args:
    config: the run's config, as a dict (JSON lists read as tuples).
    dataset: `run_dataset_metadata` of the run's dataset.

  Returns:
    The last training stage's objective (`build_objective` on `run_dataset(dataset)`).
    In a staged run its `init` goes through every stage (`init`, then each later
    stage's `init_from`), so it gives the state structure training ended with even
    where the last stage cannot start alone (SEAL's task-net phase).
  """
  full = ml_collections.ConfigDict(json_to_config(config))
  if full.get("model", {}).get("glove_path", ""):
    # Pretrained embeddings only initialize parameters the checkpoint replaces.
    full.model.glove_path = ""
  stand_in = run_dataset(dataset)
  built = [build_objective(stage, stand_in) for _, stage in stage_configs(full)]
  if len(built) == 1:
    return built[0]

  def init(rng, batch):
    state = built[0].init(rng, batch)
    for objective in built[1:]:
      state = objective.init_from(state, rng, batch)
    return state

  return built[-1]._replace(init=init)


def json_to_config(value):
  """A config dict read from JSON with its lists as the tuples the configs hold."""
  if isinstance(value, dict):
    return {k: json_to_config(v) for k, v in value.items()}
  if isinstance(value, list):
    return tuple(json_to_config(v) for v in value)
  return value


def _ssvm_search_statistics(config, dataset, state) -> dict[str, float]:
  """SPEN §7.4 on the test split: GBI steps per example and search error."""
  energy = energy_module(config, dataset)
  gbi_config = inference.GBIConfig(**config.predict_gbi)
  stats = jax.jit(lambda p, x, y: objectives.search_statistics(
      energy, p, x, y, gbi_config, init=config.loss.init))
  params, x, y = state["energy"].params, dataset.test.x, dataset.test.y
  # What the energy scores (segmentation's crops: statistics per crop).
  task = tasks.task_for(config)
  x, y = (task.rows_for_model(config, a) for a in (x, y))
  batch = config.train.eval_batch_size
  parts = [(len(x[i:i + batch]), stats(params, x[i:i + batch], y[i:i + batch]))
           for i in range(0, len(x), batch)]
  total = sum(n for n, _ in parts)
  out = {f"test/{k}": sum(n * float(v[k]) for n, v in parts) / total
         for k in parts[0][1] if k != "gbi_steps_max"}
  out["test/gbi_steps_max"] = float(max(int(v["gbi_steps_max"]) for _, v in parts))
  return out


# config.method of the last stage -> extra test diagnostics added to results.json.
DIAGNOSTICS: dict[str, Callable[..., dict[str, float]]] = {
    "ssvm": _ssvm_search_statistics,
    "dvn": _ssvm_search_statistics,  # the same SPEN state, predict_gbi and loss.init
}


def _measurement_kernel(state) -> np.ndarray | None:
  """C1ᵀ `[L, M]` of a SPEN energy's label-measurement term, if the state has one."""
  try:
    return np.asarray(state["energy"].params["global"]["measurements"]["kernel"])
  except (KeyError, TypeError, AttributeError):
    return None


def _validation_evaluator(task, config, predict, validation, eval_bs, mesh):
  """`evaluate(state)` for the loop: the task's validation metrics."""

  def evaluate(state):
    outputs = _split_predictions(task, config, predict, state, validation.x, eval_bs, mesh)
    return task.validation_metrics(validation, outputs)

  return evaluate


def _split_predictions(task, config, predict, state, x, eval_bs, mesh) -> np.ndarray:
  """The task's predictions of a split's rows `x`, the model run in eval batches."""
  rows = lambda model_x: train_lib.predict_in_batches(predict, state, model_x, eval_bs, mesh)
  return task.predict(config, rows, x)


def _json_default(value):
  if isinstance(value, (np.integer, np.floating)):
    return value.item()
  if isinstance(value, (tuple, set)):
    return list(value)
  return str(value)

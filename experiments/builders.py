"""Experiment builders: a config and a dataset -> networks, energies and the objective.

`build_objective` turns one stage's config into the `Objective` of `config.method`
(`OBJECTIVE_BUILDERS`, or a builder named by import path); the network and energy
builders (`tagger`, `fcn`, `spen_energy`, `energy_module`, ...) are the parts the
objective builders share, and are public so benchmarks build the same modules.
"""

from typing import Callable

from absl import logging
import jax.numpy as jnp
import ml_collections
import numpy as np

from energynets import data as data_lib
from energynets import diff
from energynets import energies
from energynets import inference
from energynets import nets
from energynets import objectives
from energynets.train import run as run_lib
from energynets.train.optimizers import make_optimizer
from experiments import configuration
from experiments import tasks


def load_data(config: ml_collections.ConfigDict):
  """The dataset of `config.data` (its task's loader)."""
  return tasks.task_for(config).load(config)


# config.train.compute_dtype -> the dtype the networks compute in (their `dtype`);
# parameters, optimizer state, GBI iterates, energies and losses stay float32.
COMPUTE_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def compute_dtype(config: ml_collections.ConfigDict):
  """The networks' compute dtype named by `config.train.compute_dtype`.

  Args:
    config: an experiment config (one stage's); a missing key means 'float32'.

  Returns:
    `COMPUTE_DTYPES[name]`, a jnp dtype.

  Raises:
    ValueError: one line naming the key, the value and the valid names.
  """
  name = config.get("train", {}).get("compute_dtype", "float32")
  if name not in COMPUTE_DTYPES:
    raise ValueError(f"config.train.compute_dtype={name!r}: expected one of "
                     f"{sorted(COMPUTE_DTYPES)}")
  return COMPUTE_DTYPES[name]


def _float32_only(config, what: str) -> None:
  # The denoising energies compute on the image being denoised (the GBI iterate itself,
  # which stays float32), and the CNN denoiser shares their convolution trunk, which
  # takes no compute dtype: a bfloat16 request is refused rather than ignored.
  if compute_dtype(config) != jnp.float32:
    raise ValueError(f"config.train.compute_dtype={config.train.compute_dtype!r} is not "
                     f"supported by {what}; use 'float32'")


def _mlp(config, dataset) -> nets.MLP:
  return nets.MLP(hidden=tuple(config.model.hidden), num_outputs=dataset.num_labels,
                  activation=config.model.activation, dropout=config.model.dropout,
                  input_dropout=config.model.input_dropout, dtype=compute_dtype(config))


def _build_local(config, dataset, optimizer) -> objectives.Objective:
  # BCE per label; on segmentation data per pixel of the FCN's logit map.
  net = fcn(config) if _is_segmentation(dataset) else _mlp(config, dataset)
  l2 = config.loss.l2
  if config.loss.l2_c > 0:
    l2 = 1.0 / (config.loss.l2_c * tasks.num_examples(dataset, "train"))
  # `loss.score` (mlp.py, fcn.py): BCE − w·score, the exact score a regression loss-net learns.
  score = config.loss.get("score", "")
  return objectives.local_bce(net, optimizer, l2=l2,
                              score=objectives.scores.get_score(score) if score else None,
                              score_weight=config.loss.get("score_weight", 0.0))


def tagger(config, dataset) -> nets.PackedTagger:
  """The BiLSTM tagger of `config.model` on the packed token array, sized by `dataset`'s
  vocabularies (a sequence dataset: `experiments.tasks.SequenceData`). With
  `model.glove_path` (a GloVe text file or package name, `data.load_glove`) its word
  embeddings start from those vectors; every sequence method's taggers are built here."""
  m, source = config.model, dataset.source
  word_init = None
  if m.glove_path:
    matrix, found = data_lib.load_glove(m.glove_path, source.word_vocab, m.word_dim)
    logging.info("GloVe %s: %d of %d words found", m.glove_path, found,
                 len(source.word_vocab))
    word_init = nets.pretrained_embedding_init(matrix)
  size = lambda vocab: len(vocab) if vocab is not None else 0
  dtype = compute_dtype(config)
  embedder = nets.TokenEmbedder(
      vocab_size=len(source.word_vocab), word_dim=m.word_dim, word_init=word_init,
      char_vocab_size=len(source.char_vocab) if m.char_filters else 0,
      char_dim=m.char_dim, char_filters=m.char_filters,
      num_pos=size(source.pos_vocab) if m.pos_dim else 0, pos_dim=m.pos_dim,
      num_chunk=size(source.chunk_vocab) if m.chunk_dim else 0, chunk_dim=m.chunk_dim,
      dropout=m.dropout, dtype=dtype)
  encoder = nets.BiLSTM(hidden_size=m.hidden, num_layers=m.num_layers, dropout=m.dropout,
                        dtype=dtype)
  return nets.PackedTagger(embedder=embedder, encoder=encoder, num_tags=dataset.num_tags,
                           dropout=m.dropout, dtype=dtype)


def sequence_energy(config, dataset) -> energies.SequenceEnergy:
  """The `SequenceEnergy` of `config.energy` (Tu et al. 2020, Eq. 7-9) with `tagger`'s
  BiLSTM as its local net, so a `local_token_ce` stage's tagger carries into it."""
  e = config.energy
  return energies.SequenceEnergy(
      local_net=tagger(config, dataset),
      tlm_variants=configuration.name_list(e.tlm_variants) or (),
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
                  skip_connections=m.skip_connections, dtype=compute_dtype(config))


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
  _float32_only(config, "the CNN denoiser")
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
      input_dropout=e.input_dropout, dtype=compute_dtype(config))


def image_energy(config, dataset):
  """The denoising energy of `config.energy` (`kind`: 'deep_prior' or 'foe'; only the
  DeepPrior's trunk reads `normalize_input`, see `denoising_input_statistics`)."""
  _float32_only(config, "the denoising energies")
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
  """Resolves every stage's `method`, `energy.module` and `train.compute_dtype` now, so
  that a misspelled method or dtype or an import path that does not import fails before
  anything trains.

  Raises:
    ValueError: one line naming the method, dtype or path and why it does not resolve.
  """
  for _, stage in configuration.stage_configs(config):
    method_builder(stage.method)
    compute_dtype(stage)
    outside = stage.get("energy", {}).get("module", "")
    if outside:
      run_lib.import_path(outside, "config.energy.module")

"""Objective builders: a config and a dataset -> the `Objective` of `config.method`.

`build_objective` turns one stage's config into the `Objective` of `config.method`
(`OBJECTIVE_BUILDERS`, or a builder named by import path). The networks and energies the
builders share come from `experiments.networks`; its public builders (`tagger`, `fcn`,
`spen_energy`, `energy_module`, ...) are re-exported here.
"""

from collections.abc import Callable
from typing import Any

import ml_collections

from energynets import objectives
from energynets.train import run as run_lib
from experiments import cli
from experiments import configuration
from experiments import tasks
from experiments.choices import gbi as gbi_choices
from experiments.choices import implicit as implicit_choices
from experiments.choices import infnet as infnet_choices
from experiments.choices import objectives as objective_choices
from experiments.choices import seal as seal_choices
from experiments.choices.optimizers import make_optimizer
from experiments.networks import COMPUTE_DTYPES
from experiments.networks import cnn_denoiser
from experiments.networks import compute_dtype
from experiments.networks import denoising_input_statistics
from experiments.networks import energy_module
from experiments.networks import fcn
from experiments.networks import feed_forward_net
from experiments.networks import image_energy
from experiments.networks import is_segmentation
from experiments.networks import is_sequence
from experiments.networks import mlp
from experiments.networks import segmentation_energy
from experiments.networks import sequence_energy
from experiments.networks import spen_energy
from experiments.networks import tagger

__all__ = [
  "COMPUTE_DTYPES",
  "OBJECTIVE_BUILDERS",
  "build_objective",
  "check_builders",
  "compute_dtype",
  "denoising_input_statistics",
  "energy_module",
  "fcn",
  "feed_forward_net",
  "image_energy",
  "load_data",
  "method_builder",
  "segmentation_energy",
  "sequence_energy",
  "spen_energy",
  "tagger",
]


def load_data(config: ml_collections.ConfigDict):
  """The dataset of `config.data` (its task's loader)."""
  return tasks.task_for(config).load(config)


def _build_local(config, dataset, optimizer) -> objectives.Objective:
  # BCE per label; on segmentation data per pixel of the FCN's logit map.
  net = fcn(config) if is_segmentation(dataset) else mlp(config, dataset)
  l2 = config.loss.l2
  if config.loss.l2_c > 0:
    l2 = 1.0 / (config.loss.l2_c * tasks.num_examples(dataset, "train"))
  return objectives.local_bce(net, optimizer, l2=l2, **_loss_score(config))


# The methods whose loss takes `loss.score`: BCE − w·score, the exact score a regression
# loss-net learns (mlp_soft_f1.py, dmf_soft_f1.py).
SCORED_METHODS = ("local", "dmf")


def _loss_score(config) -> dict[str, Any]:
  """`score` and `score_weight` of `config.loss` as a scored objective takes them."""
  score = config.loss.get("score", "")
  return {
    "score": objective_choices.score(score) if score else None,
    "score_weight": config.loss.get("score_weight", 0.0),
  }


def _build_local_token_ce(config, dataset, optimizer) -> objectives.Objective:
  return objectives.local_token_ce(tagger(config, dataset), optimizer, l2=config.loss.l2)


def _build_crf(config, dataset, optimizer) -> objectives.Objective:
  return objectives.crf_objective(
    tagger(config, dataset), dataset.num_tags, optimizer, l2=config.loss.l2
  )


def _build_local_squared_error(config, dataset, optimizer) -> objectives.Objective:
  return objectives.local_squared_error(cnn_denoiser(config, dataset), optimizer)


def _build_spen_pretrain(config, dataset, optimizer) -> objectives.Objective:
  return objectives.spen_pretrain(spen_energy(config, dataset), optimizer, l2=config.loss.l2)


def _build_ssvm(config, dataset, optimizer) -> objectives.Objective:
  """SSVM: config.loss (shared with the feed-forward methods) holds `SSVMOptions`'
  fields (`choices.objectives.ssvm_options`), config.gbi / config.predict_gbi the two
  inferences."""
  options = objective_choices.ssvm_options(
    config.loss,
    loss_aug_gbi=gbi_choices.gbi_config(config.gbi),
    predict_gbi=gbi_choices.gbi_config(config.predict_gbi),
  )
  return objectives.ssvm_hinge(energy_module(config, dataset), optimizer, options=options)


def _build_dmf(config, dataset, optimizer) -> objectives.Objective:
  d = config.dmf
  return objectives.deep_mean_field(
    mlp(config, dataset),
    optimizer,
    num_iters=d.num_iters,
    rank=None if d.rank < 0 else d.rank,
    l2=config.loss.l2,
    train_unary=d.train_unary,
    features=objective_choices.dmf_features(d.features),
    damping=d.damping,
    **_loss_score(config),
  )


def _build_seal(config, dataset, optimizer) -> objectives.Objective:
  """SEAL: config.optimizer trains the task-net, config.loss_net_optimizer the loss-net;
  config.seal (`objective`, the loss-net objectives' keys and SealOptions' keys, by
  name) maps onto the options and the loss-net objective value (`choices.seal`);
  config.gbi is the static loss-net's GBI, config.predict_gbi that of seal.predict=gbi.
  Each update takes seal.rounds task-net steps and rounds × seal.loss_net_steps loss-net
  steps, so the schedules span that many steps (`optimizer`, built for one step per
  update, is rebuilt)."""
  del optimizer
  options, loss_net_objective = seal_choices.seal_options_from_config(
    config.seal,
    loss_aug_gbi=gbi_choices.gbi_config(config.gbi),
    predict_gbi=gbi_choices.gbi_config(config.predict_gbi),
  )
  task_steps = schedule_steps(config) * options.rounds
  return objectives.seal_objective(
    energy_module(config, dataset),
    feed_forward_net(config, dataset),
    make_optimizer(config.loss_net_optimizer, task_steps * options.loss_net_steps),
    make_optimizer(config.optimizer, task_steps),
    options=options,
    loss_net_objective=loss_net_objective,
  )


def _build_seal_ranking(config, dataset, optimizer) -> objectives.Objective:
  """SEAL's ablation without a loss-net: seal.energy_weight (λ1) weighs the ranking loss."""
  s = config.seal
  return objectives.task_net_ranking(
    feed_forward_net(config, dataset),
    optimizer,
    num_samples=s.num_samples,
    ranking_weight=s.energy_weight,
    bce_weight=s.bce_weight,
    output=(objectives.outputs.SEQUENCE if is_sequence(dataset) else objectives.outputs.MULTILABEL),
  )


def _build_dvn(config, dataset, optimizer) -> objectives.Objective:
  """DVN: config.dvn (`choices.objectives.dvn_options`) and config.loss's `init` and
  `l2` make the `DVNOptions`."""
  options = objective_choices.dvn_options(
    config.dvn,
    init=config.loss.init,
    l2=config.loss.l2,
    inference_gbi=gbi_choices.gbi_config(config.gbi),
    adversarial_gbi=gbi_choices.gbi_config(config.adversarial_gbi),
    predict_gbi=gbi_choices.gbi_config(config.predict_gbi),
  )
  return objectives.deep_value_network(energy_module(config, dataset), optimizer, options=options)


def _build_infnet(config, dataset, optimizer) -> objectives.Objective:
  """Inference networks: `optimizer` (config.optimizer) trains the energy, and
  config.test_net_optimizer / config.cost_net_optimizer A_Ψ / F_Φ, which take
  infnet.num_inner_steps steps per update, so their schedules span that many steps.
  config.infnet (`InfNetOptions`' fields, `objective` and the energy objectives' options)
  maps onto the options and the energy objective value (`choices.infnet`);
  config.loss.l2 is the energy's L2."""
  options, energy_objective = infnet_choices.infnet_options_from_config(
    config.infnet, l2=config.loss.l2
  )
  net_steps = schedule_steps(config) * options.num_inner_steps
  return objectives.inference_network(
    energy_module(config, dataset),
    feed_forward_net(config, dataset),
    optimizer,
    make_optimizer(config.test_net_optimizer, net_steps),
    make_optimizer(config.cost_net_optimizer, net_steps),
    options=options,
    energy_objective=energy_objective,
  )


def _build_e2e(config, dataset, optimizer) -> objectives.Objective:
  """End-to-end SPEN: config.optimizer trains the energy, config.step_size_optimizer the
  learned GBI step sizes; config.e2e (`choices.objectives.e2e_options`) and
  config.loss's `trainable` and `l2` make the `E2EOptions`, config.gbi the unrolled
  inference of training and test."""
  options = objective_choices.e2e_options(
    config.e2e,
    gbi=gbi_choices.gbi_config(config.gbi),
    trainable=config.loss.trainable,
    l2=config.loss.l2,
  )
  return objectives.e2e_objective(
    energy_module(config, dataset),
    optimizer,
    options=options,
    step_size_optimizer=make_optimizer(config.step_size_optimizer, schedule_steps(config)),
  )


def _build_implicit(config, dataset, optimizer) -> objectives.Objective:
  """Implicit training: `optimizer` (config.optimizer) trains the energy by the implicit
  gradient, config.inner_optimizer the inference net, which takes implicit.inner_steps
  steps per update, so its schedule spans that many steps. config.implicit maps onto
  `ImplicitOptions` and the primary loss value, its `inverse_hvp` block onto a solver
  value (`choices.implicit`); config.loss.l2 is the energy's L2."""
  options, primary = implicit_choices.implicit_options_from_config(
    config.implicit, l2=config.loss.l2
  )
  return objectives.implicit_objective(
    energy_module(config, dataset),
    feed_forward_net(config, dataset),
    optimizer,
    make_optimizer(config.inner_optimizer, schedule_steps(config) * options.inner_steps),
    options=options,
    primary=primary,
  )


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


def build_objective(config: ml_collections.ConfigDict, dataset) -> objectives.Objective:
  """The method named by `config.method`, built for `dataset`'s shapes.

  Args:
    config: an experiment config (one stage's).
    dataset: the task's dataset (or a restored run's stand-in, `run_dataset`).

  Returns:
    `OBJECTIVE_BUILDERS[config.method](config, dataset, optimizer)`, or, when
    `config.method` is an import path `"package.module:function"`, that function called
    the same way; `optimizer` is `config.optimizer` over `schedule_steps(config)`.

  Raises:
    cli.UserError: an option of a built-in method that the library refuses (a
      ValueError of outside code is raised as it is).
  """
  builder = method_builder(config.method)
  outside = run_lib.is_import_path(config.method)
  try:
    if config.method not in SCORED_METHODS and config.get("loss", {}).get("score", ""):
      raise ValueError(
        f"loss.score={config.loss.score!r} trains methods {SCORED_METHODS} "
        f"(mlp.py, fcn.py, dmf.py), not method {config.method!r}"
      )
    optimizer = make_optimizer(config.optimizer, schedule_steps(config))
    return builder(config, dataset, optimizer)
  except ValueError as e:
    if outside:  # outside code's ValueError may be its bug: it keeps its traceback
      raise
    # These builders hand the config's values to the library, which checks them: its
    # refusal is a mistake in the options given, one line for the binaries.
    raise cli.UserError(f"method {config.method!r}: {e}") from None


def schedule_steps(config: ml_collections.ConfigDict) -> int:
  """The steps the learning-rate schedules span (one optimizer step per update):
  `train.schedule_steps`, or `train.steps` where it is 0 or absent."""
  return config.train.get("schedule_steps", 0) or config.train.steps


def method_builder(method: str) -> Callable[..., objectives.Objective]:
  """The builder `(config, dataset, optimizer) -> Objective` of `config.method`: an
  `OBJECTIVE_BUILDERS` name or an import path `"package.module:function"`; a
  ValueError (one line, naming the method or path and the cause) otherwise."""
  if run_lib.is_import_path(method):
    return run_lib.import_path(method, "config.method")
  if method not in OBJECTIVE_BUILDERS:
    raise ValueError(
      f"unknown method {method!r}; known: {sorted(OBJECTIVE_BUILDERS)}, or "
      "an import path 'package.module:function'"
    )
  return OBJECTIVE_BUILDERS[method]


# Methods whose stage, after a `local` stage, carries that stage's MLP into its energy as
# the local term (`LocalNetEnergy`'s carry), so the two networks must have one shape.
CARRY_MLP_INTO_ENERGY = ("dvn", "implicit")


def check_builders(config: ml_collections.ConfigDict) -> None:
  """Resolves every stage's `method`, `energy.module` and `train.compute_dtype` now, and
  checks that a stage carrying a `local` stage's MLP into its energy has an energy of that
  MLP's shape, so that a misspelled method or dtype, an import path that does not
  import, or a network of the wrong size fails before anything trains.

  Raises:
    ValueError: one line naming the method, dtype, path or keys and why they do not fit.
  """
  stages = configuration.stage_configs(config)
  for _, stage in stages:
    method_builder(stage.method)
    compute_dtype(stage)
    outside = stage.get("energy", {}).get("module", "")
    if outside:
      run_lib.import_path(outside, "config.energy.module")
  for (previous, before), (name, stage) in zip(stages, stages[1:]):
    if before.method != "local" or stage.method not in CARRY_MLP_INTO_ENERGY:
      continue
    model = before.get("model", {}).get("hidden")
    energy = stage.get("energy", {}).get("feature_hidden")
    if model is not None and energy is not None and tuple(model) != tuple(energy):
      raise ValueError(
        f"stage {name!r} carries the MLP of stage {previous!r} into its energy as the "
        f"local term, so model.hidden {tuple(model)} must equal energy.feature_hidden "
        f"{tuple(energy)}: set both"
      )

"""The config blocks of experiments/choices: each family's block at its defaults parses back
to the library's defaults, so a library default that changes without its block fails here;
and an unknown key is refused in one line."""

import inspect

import pytest

from energynets import inference
from energynets.objectives import dvn
from energynets.objectives import e2e
from energynets.objectives import implicit
from energynets.objectives import infnet
from energynets.objectives import seal
from energynets.objectives import ssvm
from experiments.choices import gbi as gbi_choices
from experiments.choices import implicit as implicit_choices
from experiments.choices import infnet as infnet_choices
from experiments.choices import objectives as objective_choices
from experiments.choices import optimizers as optimizer_choices
from experiments.choices import seal as seal_choices

GBI = inference.GBIConfig()


def test_gbi_blocks_parse_to_the_default_gbi_config():
  assert gbi_choices.gbi_config(gbi_choices.train_block()) == GBI
  assert gbi_choices.gbi_config(gbi_choices.predict_block()) == GBI
  assert gbi_choices.gbi_config(gbi_choices.block_defaults()) == GBI


def test_gbi_blocks_hold_their_keys_and_the_keys_passed():
  block = gbi_choices.train_block(method="projected", optimizer="adam", pick="last")
  assert set(block) == {*gbi_choices.TRAIN_KEYS, "pick"}
  assert "momentum" in gbi_choices.predict_block()  # the default optimizer is 'momentum'
  assert set(gbi_choices.predict_block(optimizer="sgd")) == set(gbi_choices.PREDICT_KEYS)


def test_ssvm_block_parses_to_the_default_options():
  options = objective_choices.ssvm_options(
    objective_choices.ssvm_block(), loss_aug_gbi=GBI, predict_gbi=GBI
  )
  assert options == ssvm.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=GBI)


def test_e2e_block_parses_to_the_default_options():
  options = objective_choices.e2e_options(objective_choices.e2e_block(), gbi=GBI)
  assert options == e2e.E2EOptions(gbi=GBI)


def test_dvn_block_parses_to_the_default_options():
  gbis = dict(inference_gbi=GBI, adversarial_gbi=GBI, predict_gbi=GBI)
  options = objective_choices.dvn_options(objective_choices.dvn_block(), **gbis)
  assert options == dvn.DVNOptions(**gbis, samples=dvn.DEFAULT_SAMPLES)


def test_implicit_block_parses_to_the_default_options_and_primary():
  options, primary = implicit_choices.implicit_options_from_config(implicit_choices.block())
  assert options == implicit.ImplicitOptions()
  default = inspect.signature(implicit.implicit_objective).parameters["primary"].default
  assert primary == default
  block = implicit_choices.block(primary="ssvm")
  assert implicit_choices.implicit_options_from_config(block)[1] == implicit.ImplicitSSVM()


def test_implicit_block_merges_an_inverse_hvp_override():
  block = implicit_choices.block(inverse_hvp=dict(alpha=0.002))
  assert block.inverse_hvp.to_dict() == {**implicit_choices.INVERSE_HVP_DEFAULTS, "alpha": 0.002}


def test_infnet_block_parses_to_the_default_options():
  options, objective = infnet_choices.infnet_options_from_config(infnet_choices.block())
  assert options == infnet.InfNetOptions()
  assert objective == infnet_choices.ENERGY_OBJECTIVES[infnet_choices.DEFAULT_OBJECTIVE]()


def test_seal_block_parses_to_the_default_options():
  options, objective = seal_choices.seal_options_from_config(seal_choices.block())
  assert options == seal.SealOptions()
  assert objective == seal.SealNCE()
  assert seal_choices.block().to_dict() == seal_choices.seal_config_defaults()


@pytest.mark.parametrize("name", ["adam", "momentum"])
def test_optimizer_block_holds_make_optimizers_defaults(name):
  block = optimizer_choices.block(name=name)
  # make_optimizer fills the keys it is not given with the block's defaults.
  given = dict(name=name, learning_rate=block.learning_rate)
  updates = []
  for cfg in (block, given):
    optimizer = optimizer_choices.make_optimizer(cfg, 4)
    params, state = {"w": 1.0}, None
    state = optimizer.init(params)
    for _ in range(3):
      step, state = optimizer.update({"w": 50.0}, state, params)
      params = {"w": params["w"] + step["w"]}
    updates.append(float(params["w"]))
  assert updates[0] == updates[1]


@pytest.mark.parametrize(
  "make",
  [
    gbi_choices.train_block,
    gbi_choices.predict_block,
    objective_choices.ssvm_block,
    objective_choices.e2e_block,
    objective_choices.dvn_block,
    implicit_choices.block,
    infnet_choices.block,
    seal_choices.block,
    optimizer_choices.block,
  ],
)
def test_an_unknown_key_is_one_line(make):
  with pytest.raises(ValueError, match=r"unknown .*\['no_such_key'\]; known: ") as e:
    make(no_such_key=1)
  assert "\n" not in str(e.value)


def test_an_unknown_inverse_hvp_key_is_one_line():
  with pytest.raises(ValueError, match=r"unknown inverse_hvp keys \['alhpa'\]") as e:
    implicit_choices.block(inverse_hvp=dict(alhpa=0.1))
  assert "\n" not in str(e.value)

"""Tests of options as values: `SSVMOptions`, `E2EOptions`, `DVNOptions`, the config
mapping `options_from_config` and the keyword form every objective also takes.

Oracles: the dataclass built field by field; the experiment configs themselves (every
key of a method's block must map onto a field, so none is silently ignored). Nothing
here compiles: options are checked when the objective is built.
"""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import optax

import energynets as en
from energynets.inference import GBIConfig
from energynets.objectives import base
from experiments import configuration

GBI = GBIConfig(num_steps=3)
PREDICT = GBIConfig(max_steps=5)


def _spen():
  return en.SPENEnergy(num_labels=4, feature_hidden=(), num_measurements=2)


class OptionsFromConfigTest(parameterized.TestCase):

  def test_list_fields_take_comma_or_plus_separated_strings_and_empty_is_none(self):
    options = en.options_from_config(
        en.SSVMOptions, {"trainable": "global", "loss_aug_init": "uniform+gold",
                         "surrogate": "l1"}, loss_aug_gbi=GBI, predict_gbi=PREDICT)
    self.assertEqual(options, en.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=PREDICT,
                                             trainable=("global",),
                                             loss_aug_init=("uniform", "gold"),
                                             surrogate="l1"))
    weights = en.options_from_config(en.DVNOptions, {"sample_weights": "1,0.5,2",
                                                     "samples": "gold,random,inference"},
                                     inference_gbi=GBI, predict_gbi=PREDICT)
    self.assertEqual(weights.sample_weights, (1.0, 0.5, 2.0))
    self.assertEqual(weights.samples, ("gold", "random", "inference"))
    empty = en.options_from_config(en.E2EOptions, {"trainable": ""}, gbi=GBI)
    self.assertIsNone(empty.trainable)

  def test_a_strict_block_refuses_an_unknown_key_and_a_shared_block_skips_it(self):
    with self.assertRaisesRegex(ValueError, r"unknown E2EOptions options \['los'\]; known"):
      en.options_from_config(en.E2EOptions, {"los": "bce"}, gbi=GBI)
    shared = en.options_from_config(en.SSVMOptions, {"l2_c": 1.0, "l2": 0.5}, strict=False,
                                    loss_aug_gbi=GBI, predict_gbi=PREDICT)
    self.assertEqual(shared.l2, 0.5)
    with self.assertRaisesRegex(ValueError, r"\['l2_cc'\]"):  # a Python value must be a field
      en.options_from_config(en.SSVMOptions, {}, strict=False, l2_cc=1.0,
                             loss_aug_gbi=GBI, predict_gbi=PREDICT)

  @parameterized.parameters(
      ("spen_ssvm", "synthetic"), ("spen_ssvm", "bibtex"), ("spen_ssvm", "yeast"),
      ("e2e", "synthetic"), ("e2e", "bibtex"), ("dvn", "synthetic"), ("dvn", "bibtex"))
  def test_every_key_of_the_method_blocks_is_a_field(self, method, dataset):
    config = configuration.get_config(method, dataset)
    block = {"spen_ssvm": "loss", "e2e": "e2e", "dvn": "dvn"}[method]
    cls = {"spen_ssvm": en.SSVMOptions, "e2e": en.E2EOptions, "dvn": en.DVNOptions}[method]
    fields = base.field_names(cls)
    keys = set(config[block])
    if method == "spen_ssvm":
      keys -= {"l2_c"}  # the feed-forward stages' key in the shared block
    self.assertEqual(sorted(keys - set(fields)), [])


class KeywordsOrValueTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("ssvm", en.ssvm_hinge, en.SSVMOptions, dict(loss_aug_gbi=GBI, predict_gbi=PREDICT)),
      ("e2e", en.e2e_objective, en.E2EOptions, dict(gbi=GBI)),
      ("dvn", en.deep_value_network, en.DVNOptions,
       dict(inference_gbi=GBI, predict_gbi=PREDICT)))
  def test_one_line_errors_for_a_misspelled_keyword_both_forms_or_a_wrong_type(
      self, build, cls, required):
    with self.assertRaisesRegex(ValueError, rf"unknown {cls.__name__} options \['l3'\]"):
      build(_spen(), optax.sgd(0.1), l3=1.0, **required)
    with self.assertRaisesRegex(ValueError, "either as options=.* or as keywords"):
      build(_spen(), optax.sgd(0.1), options=cls(**required), l2=1.0)
    with self.assertRaisesRegex(TypeError, f"options must be a {cls.__name__}"):
      build(_spen(), optax.sgd(0.1), options=dict(required))
    options = cls(**required)
    self.assertEqual(dataclasses.replace(options, l2=0.25).l2, 0.25)

  def test_invalid_values_are_refused_when_the_options_are_made(self):
    with self.assertRaisesRegex(ValueError, "unknown surrogate 'hinge'"):
      en.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=PREDICT, surrogate="hinge")
    with self.assertRaisesRegex(ValueError, "needs loss_aug_gbi"):
      en.SSVMOptions(predict_gbi=PREDICT)
    en.SSVMOptions(loss_aug_solver="exhaustive", predict_solver="exhaustive")
    with self.assertRaisesRegex(ValueError, "at least one unrolled GBI step"):
      en.E2EOptions(gbi=GBI._replace(num_steps=0))
    with self.assertRaisesRegex(ValueError, "unknown loss_reduction"):
      en.E2EOptions(gbi=GBI, loss_reduction="max")
    with self.assertRaisesRegex(ValueError, "unknown score 'f2'"):
      en.DVNOptions(inference_gbi=GBI, predict_gbi=PREDICT, score="f2")


if __name__ == "__main__":
  absltest.main()

"""Tests of options as values: `SSVMOptions`, `E2EOptions`, `DVNOptions`, and the config
blocks' parsers (`experiments.choices.objectives`) that turn names into those values.

Oracles: the dataclass built field by field; the experiment configs themselves (every
key of a method's block must map onto a field or a parsed name, so none is silently
ignored). Nothing here compiles: options are checked when the objective is built.
"""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import optax

import energynets as en
from energynets.inference import GBIConfig
from energynets.inference import unrolled
from energynets.objectives import dmf
from energynets.objectives import dvn
from energynets.objectives import e2e
from energynets.objectives import scores
from energynets.objectives import ssvm
from energynets.objectives import task_losses
from experiments import configuration
from experiments.choices import field_names
from experiments.choices import objectives as choices

GBI = GBIConfig(num_steps=3)
PREDICT = GBIConfig(max_steps=5)


def _spen():
  return en.SPENEnergy(num_labels=4, feature_hidden=(), num_measurements=2)


class ConfigBlocksTest(parameterized.TestCase):
  def test_ssvm_block_names_become_values_and_list_fields_split(self):
    options = choices.ssvm_options(
      {
        "trainable": "global",
        "loss_aug_init": "uniform+gold",
        "surrogate": "log",
        "surrogate_eps": 1e-2,
        "loss_aug_solver": "exhaustive",
        "predict_solver": "gbi",
        "l2_c": 1.0,
      },
      loss_aug_gbi=GBI,
      predict_gbi=PREDICT,
    )
    self.assertEqual(
      options,
      en.SSVMOptions(
        loss_aug_gbi=GBI,
        predict_gbi=PREDICT,
        trainable=("global",),
        loss_aug_init=("uniform", "gold"),
        surrogate=task_losses.Log(1e-2),
        loss_aug_solver=ssvm.ExhaustiveSolver(),
        predict_solver=ssvm.GBISolver(),
      ),
    )
    self.assertEqual(
      choices.ssvm_options({}, loss_aug_gbi=GBI, predict_gbi=PREDICT),
      en.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=PREDICT),
    )

  def test_e2e_and_dvn_blocks(self):
    options = choices.e2e_options(
      {
        "loss": "bce",
        "loss_eps": 1e-4,
        "loss_reduction": "mean",
        "gradient": "adjoint",
        "trainable": "",
      },
      gbi=GBI,
    )
    self.assertEqual(
      options,
      en.E2EOptions(
        gbi=GBI,
        loss=task_losses.Log(1e-4),
        loss_reduction=e2e.Mean(),
        gradient=unrolled.HVPAdjoint(),
      ),
    )
    self.assertEqual(choices.e2e_options({"loss": "squared"}, gbi=GBI).loss, task_losses.Squared())
    options = choices.dvn_options(
      {
        "samples": "gold,random,adversarial",
        "sample_weights": "1,0.5,2",
        "score": "soft_iou",
        "adversarial_init": "random",
        "adversarial_through_score": False,
      },
      inference_gbi=GBI,
      predict_gbi=PREDICT,
    )
    self.assertEqual(
      options.samples,
      (dvn.Gold(), dvn.Random(), dvn.Adversarial(through_score=False, random_start=True)),
    )
    self.assertEqual(options.sample_weights, (1.0, 0.5, 2.0))
    self.assertIs(options.score, scores.soft_iou)
    default = choices.dvn_options({}, inference_gbi=GBI, predict_gbi=PREDICT)
    self.assertEqual(default.samples, dvn.DEFAULT_SAMPLES)

  def test_every_name_maps_and_an_unknown_one_is_a_one_line_error(self):
    for name in ("squared", "log", "l1"):
      self.assertTrue(callable(choices.surrogate(name)))
    self.assertEqual(choices.surrogate("log", 0.1), task_losses.Log(0.1))
    self.assertEqual(set(choices.SSVM_SOLVERS), {"gbi", "exhaustive"})
    self.assertEqual(set(choices.E2E_LOSSES), {"bce", "squared"})
    self.assertEqual(set(choices.E2E_REDUCTIONS), {"sum", "mean"})
    self.assertEqual(set(choices.E2E_GRADIENTS), {"scan", "remat", "adjoint"})
    self.assertEqual(
      set(choices.DVN_SOURCES), {"inference", "adversarial", "gold", "random", "other_gold"}
    )
    for name, source in choices.DVN_SOURCES.items():
      self.assertEqual(source.name, name)
    self.assertEqual(choices.dvn_sources(choices.DEFAULT_DVN_SOURCES), dvn.DEFAULT_SAMPLES)
    self.assertEqual(choices.dmf_features("x"), dmf.RawInput())
    self.assertEqual(set(choices.DMF_FEATURES), {"probs", "logits", "hidden", "x"})
    self.assertIs(choices.score("soft_f1"), scores.soft_f1)
    for call, pattern in (
      (lambda: choices.surrogate("hinge"), "unknown surrogate 'hinge'"),
      (lambda: choices.score("f2"), "unknown score 'f2'"),
      (lambda: choices.dmf_features("penultimate"), "unknown DMF features"),
      (lambda: choices.dvn_sources("gold,nearby"), "unknown DVN sample source 'nearby'"),
      (
        lambda: choices.ssvm_options(
          {"predict_solver": "exact"}, loss_aug_gbi=GBI, predict_gbi=PREDICT
        ),
        "unknown inference solver",
      ),
      (
        lambda: choices.e2e_options({"loss_reduction": "max"}, gbi=GBI),
        "unknown e2e loss_reduction 'max'",
      ),
      (lambda: choices.e2e_options({"gradient": "fd"}, gbi=GBI), "unknown gradient"),
      (
        lambda: choices.e2e_options({"los": "bce"}, gbi=GBI),
        r"unknown E2EOptions options \['los'\]; known",
      ),
      (
        lambda: choices.dvn_options(
          {"adversarial_init": "gold"}, inference_gbi=GBI, predict_gbi=PREDICT
        ),
        "unknown adversarial_init",
      ),
    ):
      with self.assertRaisesRegex(ValueError, pattern):
        call()

  @parameterized.parameters(
    ("spen_ssvm", "synthetic"),
    ("spen_ssvm", "bibtex"),
    ("spen_ssvm", "yeast"),
    ("e2e", "synthetic"),
    ("e2e", "bibtex"),
    ("dvn", "synthetic"),
    ("dvn", "bibtex"),
  )
  def test_every_key_of_the_method_blocks_is_a_field_or_a_parsed_name(self, method, dataset):
    config = configuration.get_config(method, dataset)
    block = {"spen_ssvm": "loss", "e2e": "e2e", "dvn": "dvn"}[method]
    cls = {"spen_ssvm": en.SSVMOptions, "e2e": en.E2EOptions, "dvn": en.DVNOptions}[method]
    parsed = {
      "spen_ssvm": {"surrogate_eps", "l2_c"},
      "e2e": {"loss_eps"},
      "dvn": {"adversarial_init", "adversarial_through_score"},
    }[method]
    keys = set(config[block]) - parsed
    self.assertEqual(sorted(keys - set(field_names(cls))), [])


class OptionsValueTest(parameterized.TestCase):
  @parameterized.named_parameters(
    ("ssvm", en.ssvm_hinge, en.SSVMOptions, dict(loss_aug_gbi=GBI, predict_gbi=PREDICT)),
    ("e2e", en.e2e_objective, en.E2EOptions, dict(gbi=GBI)),
    ("dvn", en.deep_value_network, en.DVNOptions, dict(inference_gbi=GBI, predict_gbi=PREDICT)),
  )
  def test_options_are_one_value(self, build, cls, required):
    with self.assertRaisesRegex(TypeError, cls.__name__):
      build(_spen(), optax.sgd(0.1), options=dict(required))
    options = cls(**required)
    self.assertEqual(dataclasses.replace(options, l2=0.25).l2, 0.25)
    build(_spen(), optax.sgd(0.1), options=options)

  def test_invalid_values_are_refused_when_the_options_are_made(self):
    with self.assertRaisesRegex(TypeError, "surrogate"):
      en.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=PREDICT, surrogate="hinge")
    with self.assertRaisesRegex(ValueError, "needs loss_aug_gbi"):
      en.SSVMOptions(predict_gbi=PREDICT)
    with self.assertRaisesRegex(TypeError, "predict_solver"):
      en.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=PREDICT, predict_solver="gbi")
    en.SSVMOptions(loss_aug_solver=ssvm.ExhaustiveSolver(), predict_solver=ssvm.ExhaustiveSolver())
    with self.assertRaisesRegex(ValueError, "at least one unrolled GBI step"):
      en.E2EOptions(gbi=GBI._replace(num_steps=0))
    with self.assertRaisesRegex(TypeError, "loss_reduction"):
      en.E2EOptions(gbi=GBI, loss_reduction="max")
    with self.assertRaisesRegex(TypeError, "gradient"):
      en.E2EOptions(gbi=GBI, gradient="scan")
    with self.assertRaisesRegex(TypeError, "score"):
      en.DVNOptions(inference_gbi=GBI, predict_gbi=PREDICT, score="f2")
    with self.assertRaisesRegex(TypeError, "Source values"):
      en.DVNOptions(inference_gbi=GBI, predict_gbi=PREDICT, samples=("gold",))
    with self.assertRaisesRegex(ValueError, "distinct"):
      en.DVNOptions(inference_gbi=GBI, predict_gbi=PREDICT, samples=(dvn.Gold(), dvn.Gold()))


if __name__ == "__main__":
  absltest.main()

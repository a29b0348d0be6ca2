"""The energy protocol: a user's own energy trains with every objective, checked up front."""

import ast
import itertools
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import energynets as en
from energynets import testing
from energynets.energies import protocol
from energynets.objectives import ssvm

L, D, B = 3, 5, 8


LowRankPairEnergy = testing.LowRankPairEnergy


class WrongShapeEnergy(nn.Module):
  """Forgets to sum over labels: returns [B, L]."""

  @nn.compact
  def __call__(self, x, y):
    return -nn.Dense(y.shape[-1])(x) * y


def user_energy():
  return protocol.energy_from_module(LowRankPairEnergy(L), domain=en.Box(), y_shape=(L,))


def batch(seed=0, n=B):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, D)).astype(np.float32)
  y = (rng.uniform(size=(n, L)) < 0.5).astype(np.float32)
  return {"x": jnp.asarray(x), "y": jnp.asarray(y)}


GBI = en.GBIConfig(num_steps=5, learning_rate=0.1)
PREDICT = en.GBIConfig(num_steps=5, learning_rate=0.1, max_steps=10)


def objectives(energy):
  adam = optax.adam(1e-2)
  net = en.MLP((), L)
  return {
    "ssvm": lambda: en.ssvm_hinge(
      energy, adam, options=en.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=PREDICT)
    ),
    "e2e": lambda: en.e2e_objective(energy, adam, options=en.E2EOptions(gbi=GBI)),
    "inference_network": lambda: en.inference_network(
      energy, net, adam, adam, options=en.InfNetOptions(num_inner_steps=1)
    ),
    "seal_margin": lambda: en.seal_objective(
      energy, net, adam, adam, loss_net_objective=en.SealMargin()
    ),
    "seal_regression": lambda: en.seal_objective(
      energy, net, adam, adam, loss_net_objective=en.SealRegression()
    ),
    "seal_nce": lambda: en.seal_objective(
      energy, net, adam, adam, loss_net_objective=en.SealNCE(num_samples=3)
    ),
    "dvn": lambda: en.deep_value_network(
      energy, adam, options=en.DVNOptions(inference_gbi=GBI, predict_gbi=PREDICT)
    ),
    "implicit": lambda: en.implicit_objective(
      energy,
      net,
      adam,
      adam,
      options=en.ImplicitOptions(inner_steps=2),
      primary=en.ImplicitCD(num_samples=3),
    ),
  }


def energy_params(state):
  return state["loss_net"].params if "loss_net" in state else state["energy"].params


@pytest.mark.parametrize("name", sorted(objectives(None)))
def test_user_energy_trains_with_every_objective(name):
  objective = objectives(user_energy())[name]()
  data = batch()
  state = objective.init(jax.random.key(0), data)
  before = energy_params(state)
  update = jax.jit(objective.update)
  for step in range(2):
    state, metrics = update(state, data, jax.random.key(step + 1))
  assert np.isfinite(float(metrics["loss"]))
  changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), before, energy_params(state))
  assert any(jax.tree.leaves(changed)), f"{name} did not move the user's energy"
  prediction = objective.predict(state, data["x"])
  assert prediction.shape == (B, L)
  assert bool(jnp.all((prediction >= 0) & (prediction <= 1)))


@pytest.mark.parametrize("name", sorted(objectives(None)))
def test_wrong_shaped_energy_fails_at_init_in_one_line(name):
  energy = protocol.energy_from_module(WrongShapeEnergy(), domain=en.Box(), y_shape=(L,))
  objective = objectives(energy)[name]()
  with pytest.raises(protocol.EnergyShapeError) as error:
    objective.init(jax.random.key(0), batch())
  message = str(error.value)
  assert f"returned [{B}, {L}]; expected [B] = [{B}]" in message
  assert "\n" not in message


def test_function_adapter_equals_module_adapter():
  module = LowRankPairEnergy(L)
  data = batch()
  params = module.init(jax.random.key(0), data["x"], data["y"])["params"]
  from_fn = protocol.energy_from_function(
    lambda p, x, y: module.apply({"params": p}, x, y),
    domain=en.Box(),
    y_shape=(L,),
    init=params,
    name="low_rank",
  )
  from_module = user_energy()
  enc = from_fn.encode(params, data["x"])
  np.testing.assert_allclose(
    from_fn.energy(params, enc, data["y"]),
    from_module.energy(params, from_module.encode(params, data["x"]), data["y"]),
    rtol=1e-6,
  )
  objective = en.ssvm_hinge(
    from_fn, optax.sgd(0.1), options=en.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=PREDICT)
  )
  state = objective.init(jax.random.key(1), data)
  for got, want in zip(jax.tree.leaves(state["energy"].params), jax.tree.leaves(params)):
    np.testing.assert_array_equal(got, want)


def brute_force_minimum(energy, params, x):
  """The exact argmin over {0, 1}^L by enumerating every labeling (independent oracle)."""
  candidates = np.array(list(itertools.product([0.0, 1.0], repeat=L)), np.float32)
  enc = energy.encode(params, x)
  values = np.stack(
    [np.asarray(energy.energy(params, enc, jnp.broadcast_to(c, (len(x), L)))) for c in candidates],
    axis=1,
  )
  return candidates[values.argmin(1)], values.min(1)


def test_exact_inference_on_user_energy_matches_enumeration():
  energy = user_energy()
  data = batch(3, n=16)
  params = energy.init(jax.random.key(2), data["x"], data["y"])
  result = ssvm.exact_infer(energy, params, data["x"])
  y_oracle, e_oracle = brute_force_minimum(energy, params, data["x"])
  np.testing.assert_array_equal(np.asarray(result.y), y_oracle)
  np.testing.assert_allclose(np.asarray(result.objective), e_oracle, rtol=1e-5, atol=1e-6)


def test_plain_flax_module_is_refused_with_how_to_wrap_it():
  with pytest.raises(TypeError, match="energy_from_module"):
    en.ssvm_hinge(
      LowRankPairEnergy(L),
      optax.sgd(0.1),
      options=en.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=PREDICT),
    )


def test_y_of_the_wrong_shape_is_named():
  energy = protocol.energy_from_module(LowRankPairEnergy(L), domain=en.Box(), y_shape=(L + 1,))
  objective = en.ssvm_hinge(
    energy, optax.sgd(0.1), options=en.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=PREDICT)
  )
  with pytest.raises(
    protocol.EnergyShapeError,
    match=rf"y is \[{B}, {L}\] but LowRankPairEnergy expects y "
    rf"\[{B}, {L + 1}\]",
  ):
    objective.init(jax.random.key(0), batch())


def test_simplex_needs_positions():
  energy = protocol.energy_from_module(LowRankPairEnergy(L), domain=en.Simplex(), y_shape=(L,))
  with pytest.raises(
    protocol.EnergyShapeError, match=rf"y is \[{B}, {L}\] but the domain is per-token Simplex"
  ):
    protocol.check(energy, batch()["x"], batch()["y"])


def test_user_code_failure_is_one_line():
  def broken(params, x, y):
    return jnp.sum(x @ params["w"] * y, -1)  # w is [L, L], x is [B, D]

  energy = protocol.energy_from_function(
    broken, domain=en.Box(), y_shape=(L,), init={"w": jnp.ones((L, L))}
  )
  with pytest.raises(protocol.EnergyShapeError) as error:
    protocol.check(energy, batch()["x"], batch()["y"])
  assert str(error.value).startswith("broken failed on x [8, 5] and y [8, 3]: TypeError")
  assert "\n" not in str(error.value)


def test_unknown_group_name_is_refused_at_init():
  objective = en.ssvm_hinge(
    user_energy(),
    optax.sgd(0.1),
    options=en.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=PREDICT, trainable=("global",)),
  )
  with pytest.raises(
    ValueError,
    match=r"trainable names \['global'\] are not parameter "
    r"groups of the LowRankPairEnergy",
  ):
    objective.init(jax.random.key(0), batch())


def test_trainable_group_from_the_real_tree_trains_only_it():
  objective = en.ssvm_hinge(
    user_energy(),
    optax.sgd(0.5),
    options=en.SSVMOptions(loss_aug_gbi=GBI, predict_gbi=PREDICT, trainable=("local",)),
  )
  data = batch()
  state = objective.init(jax.random.key(0), data)
  new, _ = jax.jit(objective.update)(state, data, jax.random.key(1))
  old_p, new_p = state["energy"].params, new["energy"].params
  assert not np.allclose(old_p["local"]["kernel"], new_p["local"]["kernel"])
  np.testing.assert_array_equal(old_p["u"], new_p["u"])
  np.testing.assert_array_equal(old_p["v"], new_p["v"])


def test_spen_pretrain_needs_a_local_classifier():
  with pytest.raises(ValueError, match="has no local_logits"):
    en.spen_pretrain(user_energy(), optax.sgd(0.1))


@pytest.mark.parametrize(
  "module",
  [
    en.SPENEnergy(num_labels=L, feature_hidden=(), num_measurements=2),
    en.ICNNEnergy(num_labels=L, feature_hidden=()),
    en.FieldOfExperts(num_filters=2, filter_size=3),
    en.DeepPriorEnergy(features=(2,), kernel_size=3),
  ],
)
def test_library_energies_are_instances(module):
  energy = protocol.as_energy(module)
  assert isinstance(energy, protocol.Energy)
  assert protocol.as_energy(energy) is energy


def test_library_energy_checks_pass_on_their_data():
  energy = en.SPENEnergy(num_labels=L, feature_hidden=(4,), num_measurements=2).as_energy()
  data = batch()
  params = protocol.init_checked(
    energy, jax.random.key(0), data["x"], data["y"], trainable=("global",)
  )
  assert set(params) == {"local_net", "global"}
  image = jnp.zeros((2, 8, 8))
  foe = en.FieldOfExperts(num_filters=2, filter_size=3).as_energy()
  protocol.check(foe, image, image)


def test_no_objective_dispatches_on_an_energy_class():
  energy_classes = set(en.energies.__all__) | {"EnergyModel", "LocalNetEnergy"}
  root = pathlib.Path(en.__file__).parent / "objectives"
  offenders = []
  for path in root.glob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
      if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("isinstance", "hasattr")
      ):
        names = (
          {
            n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", None)
            for n in ast.walk(node.args[1])
          }
          if len(node.args) > 1
          else set()
        )
        if names & energy_classes or (
          node.func.id == "hasattr"
          and any(
            isinstance(a, ast.Constant) and a.value in ("encode", "energy_from_encoding")
            for a in node.args
          )
        ):
          offenders.append(f"{path.name}:{node.lineno}")
  assert not offenders, offenders


def test_a_module_energy_needs_its_domain():
  # No default fits every energy: Real() made an SSVM predict values far outside [0, 1].
  with pytest.raises(TypeError, match="domain"):
    protocol.energy_from_module(nn.Dense(1), y_shape=(3,))  # pylint: disable=missing-kwoa


def test_a_trainable_group_without_parameters_is_refused():
  params = {"local": {"w": jnp.ones(2)}, "global": {}}
  protocol.check_trainable(("local",), params)
  with pytest.raises(ValueError, match=r"\['global'\].*hold no parameters.*\('local',\)"):
    protocol.check_trainable(("local", "global"), params)

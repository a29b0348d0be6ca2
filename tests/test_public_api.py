"""The public API: every public name resolves, is documented, and is called by a smoke test.

The public surface is `energynets.__all__` and the `__all__` of every subpackage it
lists (`energynets.data`, `.diff`, `.domains`, `.energies`, `.inference`, `.metrics`,
`.nets`, `.objectives`, `.train`).

- `test_public_name_is_documented` (one case per name): the name resolves, and has a
  docstring of its own: a function's or class's `__doc__` (not an inherited one, not the
  signature that `NamedTuple` / `dataclass` generate), a module's docstring, or for a
  constant the docstring the API reference shows (the string literal after its
  assignment in the public module, read by pdoc). Public functions also carry type
  hints on every parameter and on the return value.
- `test_smoke` (one case per group below): calls the names of a family on tiny inputs
  and checks what comes back (shapes, ranges, known values). Each group declares the
  names it covers and reaches them through a recording proxy of the package, so a group
  that declares a name it never looks up fails.
- `test_every_public_name_is_smoke_tested`: the union of the groups' names covers every
  public name (a top-level re-export is covered by the group that calls the same
  object under its subpackage name), and no group declares a name that is not public.
  A new public name fails this test until a smoke group calls it.
"""

import dataclasses
import inspect
import math
import pathlib
import re
import textwrap
import typing

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pdoc.doc
import pytest

import energynets
from energynets import testing
from energynets.objectives import outputs

TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"

PUBLIC_MODULES = {energynets.__name__: energynets}
PUBLIC_MODULES.update(
  {
    obj.__name__: obj
    for obj in (getattr(energynets, n) for n in energynets.__all__)
    if inspect.ismodule(obj)
  }
)

# Public functions whose signatures lack a type hint (none now). Strict: a fixed one must
# leave this list.
KNOWN_MISSING_HINTS: set[str] = set()


def _public_names() -> list[str]:
  return [
    f"{module_name}.{name}"
    for module_name, module in PUBLIC_MODULES.items()
    for name in module.__all__
  ]


def _resolve(qualified: str):
  module_name, _, name = qualified.rpartition(".")
  return getattr(PUBLIC_MODULES[module_name], name)


# ---------------------------------------------------------------------------------------
# (a) Every public name resolves and is documented.


def _own_docstring(qualified: str) -> str:
  module_name, _, name = qualified.rpartition(".")
  obj = getattr(PUBLIC_MODULES[module_name], name)
  if inspect.ismodule(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj):
    doc = obj.__doc__ or ""
  elif inspect.isclass(obj):
    doc = obj.__dict__.get("__doc__") or ""  # not inherited from a base class
    # NamedTuple and dataclass write "Name(field, ...)" when a class has no docstring.
    if re.match(rf"{re.escape(obj.__name__)}\(", doc):
      doc = ""
  else:  # a constant or type alias: its docstring in the public module's source
    member = pdoc.doc.Module(PUBLIC_MODULES[module_name]).members.get(name)
    doc = member.docstring if member is not None else ""
  return doc.strip()


@pytest.mark.parametrize("qualified", _public_names())
def test_public_name_is_documented(qualified):
  _resolve(qualified)  # AttributeError if a name in __all__ does not exist
  assert _own_docstring(qualified), f"{qualified} has no docstring of its own"
  obj = _resolve(qualified)
  if inspect.isfunction(obj):
    signature = inspect.signature(obj)
    unhinted = [
      p.name
      for p in signature.parameters.values()
      if p.annotation is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if signature.return_annotation is inspect.Signature.empty:
      unhinted.append("return")
    if qualified in KNOWN_MISSING_HINTS:
      assert unhinted, f"{qualified} is fully hinted now: remove it from KNOWN_MISSING_HINTS"
    else:
      assert not unhinted, f"{qualified} has no type hint for {unhinted}"


def test_public_modules_export_only_their_all():
  """`from energynets[.sub] import *` gives exactly the documented names."""
  for module_name, module in PUBLIC_MODULES.items():
    namespace: dict = {}
    exec(f"from {module_name} import *", namespace)  # pylint: disable=exec-used
    namespace.pop("__builtins__")
    assert set(namespace) == set(module.__all__), module_name
    assert len(module.__all__) == len(set(module.__all__)), f"{module_name}: duplicates"


# ---------------------------------------------------------------------------------------
# (b) Smoke calls. A group is `fn(en, tmp_path)`, where `en` is `energynets` behind a
# proxy recording every public name looked up through it.


class _Recorder:
  """`energynets` (or a public subpackage) whose attribute lookups are recorded."""

  def __init__(self, module, used: set):
    self._module = module
    self._used = used

  def __getattr__(self, name):
    obj = getattr(self._module, name)
    qualified = f"{self._module.__name__}.{name}"
    self._used.add(qualified)
    if _covered_by_identity(obj):  # the same object under its other public names
      self._used.update(n for n in _public_names() if _resolve(n) is obj)
    if inspect.ismodule(obj) and obj.__name__ in PUBLIC_MODULES:
      return _Recorder(obj, self._used)
    return obj


SMOKE: dict[str, tuple[typing.Callable, tuple[str, ...]]] = {}


def smoke(*names: str):
  """Registers a smoke group covering `names` (relative to `energynets`)."""

  def register(fn):
    SMOKE[fn.__name__] = (fn, tuple(f"energynets.{n}" for n in names))
    return fn

  return register


# Tiny shapes shared by the groups: B examples, D features, L labels.
B, D, L = 8, 6, 5
KEY = jax.random.key(0)


def _multilabel_batch(seed: int = 0) -> dict:
  rs = np.random.RandomState(seed)
  x = rs.randn(B, D).astype(np.float32)
  y = (x[:, :L] + 0.3 * rs.randn(B, L) > 0).astype(np.float32)
  return {"x": jnp.asarray(x), "y": jnp.asarray(y)}


def _leaves(tree) -> list[np.ndarray]:
  return [np.asarray(a) for a in jax.tree.leaves(tree)]


def _moved(before, after) -> bool:
  return any(
    a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(_leaves(before), _leaves(after))
  )


def _check_objective(objective, batch, *, init=None, in_unit_interval=True):
  """`objective.init` (or `init(batch)`, e.g. an `init_from`), one `update` and `predict`,
  in one jit (one compilation): finite loss, parameters moved, prediction shaped like y.
  Returns the updated state."""

  @jax.jit
  def run(batch):
    state = objective.init(KEY, batch) if init is None else init(batch)
    new_state, metrics = objective.update(state, batch, jax.random.key(1))
    return state, new_state, metrics, objective.predict(new_state, batch["x"])

  state, new_state, metrics, y = run(batch)
  assert np.isfinite(float(metrics["loss"])), metrics
  assert _moved(state, new_state), "one update changed no parameter"
  y = np.asarray(y)
  assert y.shape == batch["y"].shape and np.all(np.isfinite(y))
  if in_unit_interval:
    assert np.all((y >= 0) & (y <= 1))
  return new_state


def _spen(en, **kw):
  options = dict(feature_hidden=(7,), num_measurements=3, feature_activation=en.nets.softplus)
  return en.energies.SPENEnergy(L, **dict(options, **kw))


# ---------------------------------------------------------------------------------------
# Domains.


@smoke(
  "domains",
  "domains.Box",
  "domains.Simplex",
  "domains.Real",
  "domains.Domain",
  "domains.DEFAULT_EPS",
)
def smoke_domains(en, tmp_path):
  del tmp_path
  d = en.domains
  protocol = [n for n, v in vars(d.Domain).items() if callable(v) and not n.startswith("_")]
  assert {"project", "mirror_step", "entropy", "decode", "uniform_init"} <= set(protocol)
  y = jnp.array([[0.2, 0.7, 0.1], [0.5, 0.25, 0.25]])
  g = jnp.array([[1.0, -1.0, 0.0], [0.0, 0.0, 2.0]])
  for domain in (d.Box(), d.Simplex(), d.Real()):
    assert domain.eps == d.DEFAULT_EPS
    assert all(hasattr(domain, method) for method in protocol)
    assert domain.entropy(y).shape == (2,)
    assert domain.uniform_init((2, 3)).shape == (2, 3)
    np.testing.assert_allclose(domain.from_logits(domain.to_logits(y)), y, atol=1e-5)
    stepped = domain.mirror_step(y, g, 0.5)
    assert stepped.shape == y.shape and np.all(np.isfinite(stepped))
  np.testing.assert_allclose(d.Box().project(jnp.array([[-1.0, 0.5, 2.0]])), [[0, 0.5, 1]])
  np.testing.assert_allclose(d.Simplex().mirror_step(y, g, 0.5).sum(-1), 1.0, rtol=1e-6)
  np.testing.assert_array_equal(d.Simplex().decode(y), [[0, 1, 0], [1, 0, 0]])
  np.testing.assert_array_equal(d.Box().decode(y), [[0, 1, 0], [1, 0, 0]])
  np.testing.assert_allclose(d.Real().entropy(y), 0.0)


# ---------------------------------------------------------------------------------------
# Energies and nets.


@smoke(
  "energies",
  "energies.SPENEnergy",
  "energies.Encoding",
  "energies.LocalNetEnergy",
  "energies.MeasurementEnergy",
  "energies.param_groups",
  "energies.ICNNEnergy",
  "energies.InputConvexNet",
  "energies.NonNegDense",
)
def smoke_multilabel_energies(en, tmp_path):
  del tmp_path
  e = en.energies
  batch = _multilabel_batch()
  x, y = batch["x"], jax.nn.sigmoid(batch["y"] - 0.5)
  spen = e.SPENEnergy(L, feature_hidden=(7,), num_measurements=3, num_conditional=2)
  assert isinstance(spen, e.LocalNetEnergy)
  params = spen.init(KEY, x, y)["params"]
  assert set(params) == set(e.param_groups(spen)) == {"local_net", "global", "conditional"}
  energy = spen.apply({"params": params}, x, y)
  encoding = spen.apply({"params": params}, x, method="encode")
  assert isinstance(encoding, e.Encoding) and encoding.logits.shape == (B, L)
  np.testing.assert_allclose(
    spen.apply({"params": params}, encoding, y, method="energy_from_encoding"), energy, rtol=1e-6
  )
  assert energy.shape == (B,)
  measure = e.MeasurementEnergy(num_measurements=3)
  assert measure.apply(measure.init(KEY, y), y).shape == (B,)
  icnn = e.ICNNEnergy(L, feature_hidden=(4,), hidden=(3,))
  assert icnn.apply(icnn.init(KEY, x, y), x, y).shape == (B,)
  net = e.InputConvexNet(hidden=(3,))
  assert net.apply(net.init(KEY, y), y).shape == (B,)
  dense = e.NonNegDense(features=2)
  dense_params = dense.init(KEY, y)
  out = dense.apply(dense_params, jnp.abs(y))
  assert out.shape == (B, 2) and np.all(np.asarray(out) >= 0)  # non-negative weights
  # Convex in y along a line (the point of an ICNN).
  icnn_params = icnn.init(KEY, x, y)
  a, b = jnp.zeros_like(y) + 0.1, jnp.zeros_like(y) + 0.9
  e_mid = icnn.apply(icnn_params, x, 0.5 * (a + b))
  assert np.all(
    np.asarray(e_mid)
    <= 0.5 * np.asarray(icnn.apply(icnn_params, x, a) + icnn.apply(icnn_params, x, b)) + 1e-5
  )


@smoke(
  "energies.Energy",
  "energies.EnergyShapeError",
  "energies.as_energy",
  "energies.check_energy",
  "energies.energy_from_function",
  "energies.energy_from_module",
)
def smoke_energy_protocol(en, tmp_path):
  del tmp_path
  e = en.energies
  batch = _multilabel_batch()

  def linear(params, x, y):
    return -jnp.sum((x[:, :L] * params["w"]) * y, axis=-1)

  from_fn = e.energy_from_function(
    linear, domain=en.domains.Box(), y_shape=(L,), init=lambda rng, x, y: {"w": jnp.ones((L,))}
  )
  assert isinstance(from_fn, e.Energy) and e.as_energy(from_fn) is from_fn
  e.check_energy(from_fn, batch["x"], batch["y"])
  params = from_fn.init(KEY, batch["x"], batch["y"])
  y0 = from_fn.start(from_fn.encode(params, batch["x"]), batch["x"], "uniform")
  np.testing.assert_allclose(y0, 0.5)
  objective = en.objectives.ssvm_hinge(
    from_fn,
    optax.sgd(0.1),
    options=en.objectives.SSVMOptions(
      loss_aug_gbi=en.inference.GBIConfig(num_steps=3),
      predict_gbi=en.inference.GBIConfig(num_steps=3, max_steps=5),
    ),
  )
  _check_objective(objective, batch)
  module = e.energy_from_module(_spen(en), domain=en.domains.Box(), y_shape=(L,))
  e.check_energy(module, batch["x"], batch["y"])
  with pytest.raises(e.EnergyShapeError, match="expects y"):
    e.check_energy(module, batch["x"], batch["y"][:, :2])


@smoke(
  "energies.FieldOfExperts",
  "energies.DeepPriorEnergy",
  "energies.GaussianDataTerm",
  "energies.soft_abs",
  "energies.softplus_t",
)
def smoke_image_energies(en, tmp_path):
  del tmp_path
  e = en.energies
  rs = np.random.RandomState(0)
  x = jnp.asarray(rs.rand(2, 8, 8).astype(np.float32))
  y = jnp.asarray(rs.rand(2, 8, 8).astype(np.float32))
  for module in (
    e.FieldOfExperts(num_filters=2, filter_size=3),
    e.DeepPriorEnergy(features=(3,), kernel_size=3),
    e.GaussianDataTerm(noise_variance=0.5),
  ):
    out = module.apply(module.init(KEY, x, y), x, y)
    assert out.shape == (2,) and np.all(np.isfinite(out))
  data = e.GaussianDataTerm(noise_variance=0.5, learn_noise_variance=False)
  np.testing.assert_allclose(
    data.apply(data.init(KEY, x, y), x, y), np.sum((y - x) ** 2, axis=(1, 2)) / (2 * 0.5), rtol=1e-5
  )
  u = jnp.array([-2.0, 0.0, 3.0])
  np.testing.assert_allclose(e.soft_abs(u, 100.0), jnp.abs(u) / 2, atol=0.01)  # a smooth |u|/2
  np.testing.assert_allclose(e.softplus_t(u, 1.0), jax.nn.softplus(u), rtol=1e-6)


@smoke(
  "energies.SegmentationEnergy",
  "energies.SegmentationEncoding",
  "energies.ConvScoreNet",
  "energies.segmentation_param_groups",
  "nets.FCN",
)
def smoke_segmentation(en, tmp_path):
  del tmp_path
  e = en.energies
  rs = np.random.RandomState(0)
  x = jnp.asarray(rs.rand(2, 8, 8, 3).astype(np.float32))
  y = jnp.asarray(rs.rand(2, 8, 8).astype(np.float32))
  fcn = en.nets.FCN(features=(2, 3), strides=(1, 2), kernel_size=3)
  assert fcn.apply(fcn.init(KEY, x), x).shape == (2, 8, 8)
  score = e.ConvScoreNet(features=(2,), strides=(2,), kernel_size=3, hidden=(3,))
  v = jnp.concatenate([x, y[..., None]], -1)
  assert score.apply(score.init(KEY, v), v).shape == (2,)
  energy = e.SegmentationEnergy(
    local_net=fcn, features=(2,), strides=(2,), kernel_size=3, hidden=(3,)
  )
  params = energy.init(KEY, x, y)["params"]
  assert set(params) == set(e.segmentation_param_groups(energy)) == {"local_net", "global"}
  encoding = energy.apply({"params": params}, x, method="encode")
  assert isinstance(encoding, e.SegmentationEncoding) and encoding.logits.shape == (2, 8, 8)
  assert energy.apply({"params": params}, x, y).shape == (2,)


@smoke(
  "energies.SequenceEnergy",
  "energies.SequenceEncoding",
  "energies.TLM_VARIANTS",
  "energies.GLOBAL_ENERGIES",
  "energies.TLMVariant",
  "energies.FORWARD",
  "energies.BACKWARD",
  "energies.WORD_FORWARD",
  "energies.WORD_BACKWARD",
  "energies.TagLM",
  "energies.TagLanguageModels",
  "energies.tlm_log_likelihoods",
  "energies.tlm_log_probs",
  "energies.tlm_pretrain_loss",
)
def smoke_sequence_energies(en, tmp_path):
  del tmp_path
  e = en.energies
  batch, mask, _ = testing.tiny_sequence_batch()
  num_tags, steps = testing.SEQ_TAGS, testing.SEQ_STEPS
  assert e.GLOBAL_ENERGIES["c"] == e.TLM_VARIANTS
  assert e.TLM_VARIANTS == (e.FORWARD, e.BACKWARD, e.WORD_FORWARD, e.WORD_BACKWARD)
  assert e.WORD_BACKWARD == e.TLMVariant("word_backward", backward=True, words=True)
  variants = e.GLOBAL_ENERGIES["a"]
  energy = e.SequenceEnergy(testing.tiny_tagger(), tlm_variants=variants, tlm_hidden=3)
  tlm = e.TagLM(num_tags=num_tags, hidden_size=3)
  models = e.TagLanguageModels(variants=(e.BACKWARD,), num_tags=num_tags, hidden_size=3)
  mask = jnp.asarray(mask)

  @jax.jit  # one compilation: the LSTMs are what is slow to compile
  def run(x, y):
    params = energy.init(KEY, x, y)["params"]
    model_params = models.init(KEY, y, mask, method="log_likelihoods")
    return dict(
      values=energy.apply({"params": params}, x, y),
      encoding=energy.apply({"params": params}, x, method="encode"),
      loglik=e.tlm_log_likelihoods(energy, params, y, mask),
      log_probs=e.tlm_log_probs(energy, params, y, mask),
      loss=e.tlm_pretrain_loss(energy, params, y, mask),
      tlm=tlm.apply(tlm.init(KEY, y), y),
      models=models.apply(model_params, y, mask, method="log_likelihoods"),
    )

  out = run(batch["x"], batch["y"])
  assert out["values"].shape == (testing.SEQ_BATCH,) and np.all(np.isfinite(out["values"]))
  assert isinstance(out["encoding"], e.SequenceEncoding)
  np.testing.assert_array_equal(out["encoding"].mask, mask)
  assert set(out["loglik"]) == {v.name for v in variants} and all(
    v.shape == (testing.SEQ_BATCH,) for v in out["loglik"].values()
  )
  assert out["log_probs"]["forward"].shape == (testing.SEQ_BATCH, steps, num_tags + 1)
  assert np.isfinite(float(out["loss"])) and float(out["loss"]) > 0
  assert out["tlm"].shape == (testing.SEQ_BATCH, steps + 1, num_tags + 1)
  assert set(out["models"]) == {"backward"} and np.all(np.asarray(out["models"]["backward"]) <= 0)


@smoke(
  "nets",
  "nets.MLP",
  "nets.Activation",
  "nets.softplus",
  "nets.hardtanh",
  "nets.CNNDenoiser",
  "nets.ConvStack",
  "nets.ConvImpl",
  "nets.Padding",
  "nets.VALID",
  "nets.SAME",
  "nets.REFLECT",
  "nets.auto_conv",
  "nets.lax_conv",
  "nets.patch_conv",
  "nets.sum_pool",
  "nets.mean_pool",
  "nets.flatten_pool",
)
def smoke_feedforward_nets(en, tmp_path):
  del tmp_path
  n = en.nets
  x = _multilabel_batch()["x"]
  mlp = n.MLP((7,), L)
  params = mlp.init(KEY, x)
  logits, features = mlp.apply(params, x, return_features=True)
  assert logits.shape == (B, L) and features.shape == (B, 7)
  for activation in (n.softplus, n.hardtanh):
    assert activation(jnp.zeros(3)).shape == (3,)
    assert n.MLP((7,), L, activation=activation).init(KEY, x)
  assert typing.get_args(n.Activation)[-1] is jax.Array  # functions of one array
  with pytest.raises(TypeError, match="MLP.activation='relu' is not a function"):
    n.MLP((7,), L, activation="relu").init(KEY, x)
  images = jnp.asarray(np.random.RandomState(0).rand(2, 8, 8).astype(np.float32))
  assert n.REFLECT == n.Padding("VALID", reflect=True) and n.SAME.keeps_size
  assert typing.get_args(n.ConvImpl)[-1] is nn.Module  # functions returning a module
  for padding in (n.VALID, n.SAME, n.REFLECT):
    for conv_impl in (n.auto_conv, n.lax_conv, n.patch_conv):
      stack = n.ConvStack(
        features=(3,), kernel_size=3, num_outputs=2, padding=padding, conv_impl=conv_impl
      )
      out = stack.apply(stack.init(KEY, images[..., None]), images[..., None])
      assert out.shape == ((2, 8, 8, 2) if padding.keeps_size else (2, 6, 6, 2))
  denoiser = n.CNNDenoiser(features=(3,), kernel_size=3)
  assert denoiser.apply(denoiser.init(KEY, images), images).shape == images.shape
  maps = images[..., None]
  assert n.sum_pool(maps).shape == n.mean_pool(maps).shape == (2, 1)
  assert n.flatten_pool(maps).shape == (2, 64)


@smoke(
  "nets.BiLSTM",
  "nets.BiLSTMTagger",
  "nets.CharCNN",
  "nets.PackedTagger",
  "nets.TokenEmbedder",
  "nets.pretrained_embedding_init",
)
def smoke_sequence_nets(en, tmp_path):
  del tmp_path
  n = en.nets
  batch, _, _ = testing.tiny_sequence_batch()
  tokens = en.data.unpack_tokens(np.asarray(batch["x"]))
  glove = np.random.RandomState(0).randn(testing.SEQ_VOCAB, 4).astype(np.float32)
  embedder = n.TokenEmbedder(
    testing.SEQ_VOCAB,
    word_dim=4,
    word_init=n.pretrained_embedding_init(glove),
    char_vocab_size=7,
    char_dim=2,
    char_filters=3,
  )
  emb_params = embedder.init(KEY, tokens)
  np.testing.assert_array_equal(emb_params["params"]["words"]["embedding"], glove)
  chars = n.CharCNN(7, char_dim=2, num_filters=3)
  lstm = n.BiLSTM(hidden_size=2)
  tagger = n.BiLSTMTagger(embedder=embedder, encoder=lstm, num_tags=testing.SEQ_TAGS)
  packed = n.PackedTagger(embedder=embedder, encoder=lstm, num_tags=testing.SEQ_TAGS)
  h = jnp.ones((testing.SEQ_BATCH, testing.SEQ_STEPS, 3))

  @jax.jit  # one compilation: the LSTMs are what is slow to compile
  def run(tokens, packed_x):
    params = tagger.init(KEY, tokens)
    return dict(
      embedded=embedder.apply(emb_params, tokens),
      chars=chars.apply(chars.init(KEY, tokens["chars"]), tokens["chars"]),
      lstm=lstm.apply(lstm.init(KEY, h, tokens["mask"]), h, tokens["mask"]),
      logits=tagger.apply(params, tokens),
      packed=packed.apply(params, packed_x),
    )

  out = run(tokens, batch["x"])
  shape = (testing.SEQ_BATCH, testing.SEQ_STEPS)
  assert out["embedded"].shape == shape + (7,) and out["chars"].shape == shape + (3,)
  assert out["lstm"].shape == shape + (4,)
  assert out["logits"].shape == shape + (testing.SEQ_TAGS,)
  # The packed tagger has the same parameters and outputs on the packed array.
  np.testing.assert_allclose(out["packed"], out["logits"], rtol=1e-5)


# ---------------------------------------------------------------------------------------
# Inference and differentiation.


def _toy_energy(en):
  """A SPEN on the tiny batch: `(energy_fn, params, x)`."""
  spen = _spen(en)
  batch = _multilabel_batch()
  params = spen.init(KEY, batch["x"], batch["y"])["params"]
  return (lambda p, x, y: spen.apply({"params": p}, x, y)), params, batch["x"]


@smoke(
  "inference",
  "inference.GBIConfig",
  "inference.GBIResult",
  "inference.GBIState",
  "inference.GBITrace",
  "inference.gbi_scan",
  "inference.gbi_step",
  "inference.gbi_while",
  "inference.init_state",
  "inference.make_objective",
  "inference.validate_config",
  "inference.EnergyFn",
  "inference.unrolled_gbi",
  "unrolled_gbi",
  "inference.GradientStrategy",
  "inference.Unrolled",
  "inference.Rematerialized",
  "inference.HVPAdjoint",
  "inference.Implicit",
  "inference.Parametrization",
  "inference.Projected",
  "inference.Mirror",
  "inference.Logit",
  "inference.Direction",
  "inference.SGD",
  "inference.Momentum",
  "inference.Adam",
)
def smoke_gbi(en, tmp_path):
  del tmp_path
  inf = en.inference
  energy, params, x = _toy_energy(en)
  assert callable(energy) and typing.get_origin(inf.EnergyFn) is not None
  box = en.domains.Box()
  y0 = box.uniform_init((B, L))
  config = inf.GBIConfig(
    parametrization=inf.Mirror(),
    direction=inf.Momentum(0.95),
    learning_rate=0.1,
    num_steps=10,
    max_steps=50,
    entropy_weight=0.01,
  )
  inf.validate_config(config)
  with pytest.raises(TypeError):
    inf.validate_config(config._replace(parametrization="mirror"))
  # The choices are values with the methods GBI calls.
  for value in (inf.Projected(), inf.Mirror(), inf.Logit()):
    assert all(callable(getattr(value, m)) for m in ("to_z", "to_y", "update"))
  assert callable(inf.Parametrization.update) and callable(inf.Direction.update)
  for value in (inf.SGD(), inf.Momentum(0.5), inf.Adam(b1=0.8)):
    d, _ = value.update(jnp.ones((B, L)), value.init(jnp.zeros((B, L))))
    assert d.shape == (B, L) and callable(value.init)

  @jax.jit  # one compilation for the drivers and the step functions
  def run(p):
    state = inf.init_state(energy, p, x, y0, box, config)
    return (
      inf.gbi_scan(energy, p, x, y0, box, config),
      inf.gbi_while(energy, p, x, y0, box, config),
      state,
      inf.gbi_step(energy, p, x, state, 0.1, box, config),
      inf.make_objective(energy, box, config)(p, x, y0),
    )

  (y_final, trace), result, state, stepped, objective_at_y0 = run(params)
  assert isinstance(trace, inf.GBITrace) and trace.ys.shape == (10, B, L)
  assert trace.energies.shape == (10, B)
  np.testing.assert_array_equal(y_final, trace.ys[-1])
  assert float(trace.energies[-1].mean()) < float(trace.initial_energy.mean())
  assert isinstance(result, inf.GBIResult) and result.y.shape == (B, L)
  assert np.all((np.asarray(result.steps) >= 1) & (np.asarray(result.steps) <= 50))
  assert isinstance(state, inf.GBIState)
  np.testing.assert_allclose(state.objective, objective_at_y0, rtol=1e-6)
  np.testing.assert_allclose(stepped.z, trace.ys[0], rtol=1e-5)

  # The three gradient strategies through the unroll agree.
  def loss(p, gradient):
    y_t, ys = en.unrolled_gbi(
      energy, p, x, y0, box, config._replace(num_steps=3), gradient=gradient
    )
    return jnp.sum((ys - 0.5) ** 2) + jnp.sum(y_t)

  # The strategies are values (any callable with GradientStrategy's signature).
  assert callable(inf.GradientStrategy.__call__)
  values = {"scan": inf.Unrolled(), "remat": inf.Rematerialized(), "adjoint": inf.HVPAdjoint()}
  grads = jax.jit(lambda p: {g: jax.grad(loss)(p, v) for g, v in values.items()})(params)
  for g in ("remat", "adjoint"):
    for a, b in zip(_leaves(grads["scan"]), _leaves(grads[g])):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  implicit = inf.Implicit(en.diff.ConjugateGradient(max_iter=5))
  by_value = jax.jit(lambda p: jax.grad(loss)(p, implicit))(params)
  assert all(np.all(np.isfinite(a)) for a in _leaves(by_value))


@smoke("inference.exhaustive_minimize", "inference.ExhaustiveResult", "inference.pairwise_table")
def smoke_exhaustive(en, tmp_path):
  del tmp_path
  inf = en.inference
  energy, params, x = _toy_energy(en)
  y_like = jnp.zeros((B, L))
  result = jax.jit(lambda p: inf.exhaustive_minimize(inf.pairwise_table(energy), p, x, y_like))(
    params
  )
  assert isinstance(result, inf.ExhaustiveResult) and result.y.shape == (B, L)
  assert set(np.unique(np.asarray(result.y))) <= {0.0, 1.0}
  np.testing.assert_allclose(energy(params, x, result.y), result.objective, rtol=1e-5)
  # No labeling scores below the reported minimum (GBI's rounded output included).
  gbi = inf.gbi_while(
    energy,
    params,
    x,
    en.domains.Box().uniform_init((B, L)),
    en.domains.Box(),
    inf.GBIConfig(max_steps=30),
  )
  rounded = (gbi.y >= 0.5).astype(jnp.float32)
  assert np.all(np.asarray(energy(params, x, rounded)) >= np.asarray(result.objective) - 1e-5)


@smoke(
  "inference.crf_log_likelihood",
  "inference.crf_log_partition",
  "inference.crf_marginals",
  "inference.crf_sequence_score",
  "inference.viterbi_decode",
)
def smoke_crf(en, tmp_path):
  del tmp_path
  inf = en.inference
  rs = np.random.RandomState(0)
  num_tags, steps = 3, 4
  unaries = jnp.asarray(rs.randn(2, steps, num_tags).astype(np.float32))
  transitions = jnp.asarray(rs.randn(num_tags, num_tags).astype(np.float32))
  mask = jnp.asarray(np.arange(steps) < np.array([[4], [2]]))
  log_z = inf.crf_log_partition(unaries, transitions, mask)
  tags, score = inf.viterbi_decode(unaries, transitions, mask)
  np.testing.assert_allclose(
    inf.crf_sequence_score(unaries, transitions, tags, mask), score, rtol=1e-5
  )
  np.testing.assert_allclose(
    inf.crf_log_likelihood(unaries, transitions, tags, mask), score - log_z, rtol=1e-5
  )
  marginals = np.asarray(inf.crf_marginals(unaries, transitions, mask))
  np.testing.assert_allclose(marginals.sum(-1)[np.asarray(mask)], 1.0, rtol=1e-5)
  # Brute force over the 3^4 sequences of the full-length row, in one batched call.
  every = jnp.asarray(list(np.ndindex(*(num_tags,) * steps)))
  scores = inf.crf_sequence_score(
    jnp.broadcast_to(unaries[:1], (len(every), steps, num_tags)),
    transitions,
    every,
    jnp.ones((len(every), steps), bool),
  )
  np.testing.assert_allclose(log_z[0], jax.nn.logsumexp(scores), rtol=1e-5)


@smoke(
  "diff",
  "diff.hvp",
  "diff.cross_hvp",
  "diff.hvp_and_cross_hvp",
  "diff.finite_difference_hvp",
  "diff.tree_vdot",
  "diff.neumann_inverse_hvp",
  "diff.cg_inverse_hvp",
  "diff.inverse_hvp",
  "diff.implicit_gradient",
  "diff.ImplicitGradient",
  "diff.implicit_solution",
  "diff.Neumann",
  "diff.ConjugateGradient",
  "diff.check_solver",
  "diff.InverseHVPSolver",
)
def smoke_diff(en, tmp_path):
  del tmp_path
  df = en.diff
  a = jnp.array([[3.0, 1.0], [1.0, 2.0]])
  f = lambda z: 0.5 * z @ a @ z + jnp.sum(jnp.sin(z))
  z, v = jnp.array([0.3, -0.2]), jnp.array([1.0, 2.0])
  hessian = a - jnp.diag(jnp.sin(z))
  np.testing.assert_allclose(df.hvp(f, z, v), hessian @ v, rtol=1e-5)
  np.testing.assert_allclose(df.finite_difference_hvp(f, z, v, eps=1e-3), hessian @ v, rtol=1e-3)
  g = lambda phi, y: jnp.sum(phi * y**2)  # ∂²g/∂φ∂y v = 2 y v
  phi, y = jnp.array([1.0, 2.0]), jnp.array([0.5, -1.0])
  np.testing.assert_allclose(df.cross_hvp(g, phi, y, v), 2 * y * v, rtol=1e-6)
  grad_y, hess_v, cross = df.hvp_and_cross_hvp(g, phi, y, v)
  np.testing.assert_allclose(grad_y, 2 * phi * y, rtol=1e-6)
  np.testing.assert_allclose(hess_v, 2 * phi * v, rtol=1e-6)
  np.testing.assert_allclose(cross, 2 * y * v, rtol=1e-6)
  assert float(df.tree_vdot({"a": v}, {"a": v})) == pytest.approx(5.0)
  exact = jnp.linalg.solve(a, v)
  apply_a = lambda u: a @ u
  np.testing.assert_allclose(df.cg_inverse_hvp(apply_a, v, num_terms=2), exact, atol=1e-5)
  neumann = df.neumann_inverse_hvp(apply_a, v, num_terms=200, alpha=0.25)
  np.testing.assert_allclose(neumann, exact, atol=1e-5)
  np.testing.assert_allclose(
    df.inverse_hvp(apply_a, v, df.ConjugateGradient(max_iter=2)), exact, atol=1e-5
  )
  # Solver values (any object with InverseHVPSolver's solve); a name is refused.
  assert callable(df.InverseHVPSolver.solve)
  df.check_solver(df.ConjugateGradient())
  with pytest.raises(TypeError, match="inverse-HVP solver"):
    df.check_solver("cg")
  np.testing.assert_allclose(df.ConjugateGradient(max_iter=2).solve(apply_a, v), exact, atol=1e-5)
  np.testing.assert_allclose(
    df.Neumann(num_terms=200, alpha=0.25).solve(apply_a, v), exact, atol=1e-5
  )
  # θ*(φ) = argmin ½‖θ − φ‖² + ½θᵀAθ = (I + A)⁻¹ φ; L_prim = Σθ, so dL/dφ = (I + A)⁻¹ 1.
  aux = lambda theta, phi: 0.5 * jnp.sum((theta - phi) ** 2) + 0.5 * theta @ a @ theta
  prim = lambda theta, phi: jnp.sum(theta)
  solve = jnp.linalg.solve(jnp.eye(2) + a, jnp.ones(2))
  phi0 = jnp.array([1.0, -1.0])
  theta_star = jnp.linalg.solve(jnp.eye(2) + a, phi0)
  solver = df.ConjugateGradient(max_iter=5)
  result = df.implicit_gradient(aux, prim, theta_star, phi0, solver)
  assert isinstance(result, df.ImplicitGradient) and float(result.residual) < 1e-4
  np.testing.assert_allclose(result.total, solve, rtol=1e-4)
  solution = df.implicit_solution(aux, solver)
  np.testing.assert_allclose(
    jax.grad(lambda p: jnp.sum(solution(theta_star, p)))(phi0), solve, rtol=1e-4
  )


# ---------------------------------------------------------------------------------------
# Objectives: init + one update + predict on a tiny batch.


@smoke(
  "objectives",
  "objectives.Objective",
  "objectives.ParamGroup",
  "objectives.init_group",
  "objectives.apply_gradients",
  "objectives.minimize_step",
  "objectives.metrics_and_grads",
  "objectives.l2_penalty",
  "objectives.multilabel_bce",
)
def smoke_objective_building_blocks(en, tmp_path):
  del tmp_path
  o = en.objectives
  batch = _multilabel_batch()
  params = {"dense": {"kernel": jnp.ones((D, L)) * 0.1, "bias": jnp.zeros(L)}}
  assert float(o.l2_penalty(params)) == pytest.approx(0.5 * D * L * 0.01)  # kernels only
  opt = optax.sgd(0.1)

  def loss_fn(p, batch):
    logits = batch["x"] @ p["dense"]["kernel"] + p["dense"]["bias"]
    return o.multilabel_bce(logits, batch["y"]), {}

  logits = jnp.zeros((B, L))
  assert float(o.multilabel_bce(logits, batch["y"])) == pytest.approx(L * math.log(2))
  metrics, grads = o.metrics_and_grads(loss_fn, params, batch)
  assert {"loss", "grad_norm"} <= set(metrics)
  group = o.init_group(params, opt)
  assert isinstance(group, o.ParamGroup)
  stepped = o.apply_gradients(group, grads, opt)
  np.testing.assert_allclose(
    stepped.params["dense"]["bias"], -0.1 * grads["dense"]["bias"], rtol=1e-6
  )
  minimized, metrics2 = o.minimize_step(loss_fn, opt, group, batch)
  np.testing.assert_allclose(
    minimized.params["dense"]["kernel"], stepped.params["dense"]["kernel"], rtol=1e-6
  )
  assert float(metrics2["loss"]) == pytest.approx(float(metrics["loss"]))
  # A custom method as an Objective, through the same checks as the library's.
  objective = o.Objective(
    init=lambda rng, b: {"net": o.init_group(params, opt)},
    update=lambda s, b, rng: (lambda g, m: ({"net": g}, m))(
      *o.minimize_step(loss_fn, opt, s["net"], b)
    ),
    predict=lambda s, x: jax.nn.sigmoid(x @ s["net"].params["dense"]["kernel"]),
  )
  _check_objective(objective, batch)


@smoke(
  "objectives.local_bce",
  "objectives.local_squared_error",
  "objectives.spen_pretrain",
  "objectives.ssvm_hinge",
  "objectives.search_statistics",
)
def smoke_local_and_ssvm(en, tmp_path):
  del tmp_path
  o, GBIConfig = en.objectives, en.inference.GBIConfig
  batch = _multilabel_batch()
  _check_objective(o.local_bce(en.nets.MLP((7,), L), optax.adam(1e-2)), batch)
  real = dict(batch, y=batch["y"] * 2.0 - 0.5)
  _check_objective(
    o.local_squared_error(en.nets.MLP((), L), optax.adam(1e-2)), real, in_unit_interval=False
  )
  spen = _spen(en)
  pretrained = _check_objective(o.spen_pretrain(spen, optax.adam(1e-2)), batch)
  ssvm = o.ssvm_hinge(
    spen,
    optax.adam(1e-2),
    options=o.SSVMOptions(loss_aug_gbi=GBIConfig(num_steps=3), predict_gbi=GBIConfig(max_steps=5)),
  )
  state = _check_objective(ssvm, batch, init=lambda b: ssvm.init_from(pretrained, KEY, b))
  stats = o.search_statistics(
    spen, state["energy"].params, batch["x"], batch["y"], GBIConfig(max_steps=5)
  )
  assert 1 <= float(stats["gbi_steps_mean"]) <= 5


@smoke("objectives.deep_mean_field", "objectives.e2e_objective", "objectives.e2e_losses")
def smoke_dmf_and_e2e(en, tmp_path):
  del tmp_path
  o = en.objectives
  batch = _multilabel_batch()
  _check_objective(o.deep_mean_field(en.nets.MLP((7,), L), optax.adam(1e-2), num_iters=2), batch)
  # (smoke_gbi checks that the gradient strategies agree.)
  options = o.E2EOptions(
    gbi=en.inference.GBIConfig(parametrization=en.inference.Logit(), num_steps=2),
    gradient=en.HVPAdjoint(),
  )
  _check_objective(o.e2e_objective(_spen(en), optax.adam(1e-2), options=options), batch)
  losses = o.e2e_losses(_spen(en), options=options)
  assert np.shape(losses.initial_step_sizes) == (2,)


@smoke("objectives.inference_network", "objectives.infnet_losses")
def smoke_infnet(en, tmp_path):
  del tmp_path
  o = en.objectives
  batch = _multilabel_batch()
  spen, net = _spen(en), en.nets.MLP((7,), L)
  _check_objective(
    o.inference_network(
      spen, net, optax.adam(1e-2), optax.adam(1e-2), options=o.InfNetOptions(num_inner_steps=1)
    ),
    batch,
  )
  losses = o.infnet_losses(spen, net, energy_objective=o.InfNetMargin())
  net_params = losses.init_nets(KEY, batch)
  assert {"test_net", "cost_net"} <= set(net_params)
  test_logits, cost_logits = losses.net_logits(net_params, batch["x"], batch["y"], False, None)
  assert test_logits.shape == cost_logits.shape == (B, L)


@smoke(
  "objectives.InfNetOptions",
  "objectives.InfNetMargin",
  "objectives.InfNetPerceptron",
  "objectives.InfNetCompound",
  "objectives.InfNetEnergyInputs",
  "objectives.InfNetEnergyObjective",
  "objectives.InfNetArchitecture",
  "objectives.InfNetSeparated",
  "objectives.InfNetShared",
  "objectives.InfNetStacked",
  "objectives.InfNetTruncation",
)
def smoke_infnet_options(en, tmp_path):
  del tmp_path
  o = en.objectives
  batch = _multilabel_batch()
  spen, net = _spen(en), en.nets.MLP((7,), L)
  assert o.InfNetOptions().architecture == o.InfNetStacked()
  assert o.InfNetOptions().truncate == o.InfNetTruncation(energy_step=True, inference_step=False)
  assert o.InfNetCompound(0.5).default_energy_weight == 0.5
  assert callable(o.InfNetEnergyObjective.loss)
  assert callable(o.InfNetArchitecture.logits)
  # Each architecture builds its F_Φ: a copy of the net, a head on its features, or W.
  for architecture, head_inputs in (
    (o.InfNetSeparated(), 7),
    (o.InfNetShared(), 7),
    (o.InfNetStacked(), 2 * L),
  ):
    losses = o.infnet_losses(spen, net, options=o.InfNetOptions(architecture=architecture))
    cost_net = losses.init_nets(KEY, batch)["cost_net"]
    assert cost_net["head"]["kernel"].shape == (head_inputs, L)
  inputs_type = o.InfNetEnergyInputs

  class SoftPerceptron:
    """A user's energy objective: the perceptron gap through softplus, without F_Φ."""

    uses_cost_net = False

    def loss(self, inputs):
      assert isinstance(inputs, inputs_type) and inputs.y_cost is None
      gap = jnp.mean(jax.nn.softplus(inputs.energy_gold - inputs.energy_of(inputs.y_test)))
      return gap, {"soft_gap": gap}

  options = o.InfNetOptions(num_inner_steps=1, architecture=o.InfNetSeparated())
  for objective in (o.InfNetMargin(), o.InfNetPerceptron(), SoftPerceptron()):
    state = _check_objective(
      o.inference_network(
        spen, net, optax.adam(1e-2), optax.adam(1e-2), options=options, energy_objective=objective
      ),
      batch,
    )
    assert ("cost_net" in state) == (objective == o.InfNetMargin())


@smoke("objectives.seal_objective", "objectives.seal_losses", "objectives.task_net_ranking")
def smoke_seal(en, tmp_path):
  del tmp_path
  o = en.objectives
  batch = _multilabel_batch()
  task_net, loss_net = en.nets.MLP((7,), L), _spen(en)
  state = _check_objective(
    o.seal_objective(
      loss_net,
      task_net,
      optax.adam(1e-2),
      optax.adam(1e-2),
      loss_net_objective=o.SealNCE(num_samples=2),
    ),
    batch,
  )
  losses = o.seal_losses(loss_net, task_net, loss_net_objective=o.SealRegression())
  task_params, loss_params = state["task_net"].params, state["loss_net"].params
  values = jax.jit(
    lambda t, l: (losses.task_net(t, l, batch, KEY)[0], losses.loss_net(l, t, batch, KEY)[0])
  )(task_params, loss_params)
  assert all(np.isfinite(float(v)) for v in values)
  _check_objective(o.task_net_ranking(task_net, optax.adam(1e-2), num_samples=2), batch)


@smoke(
  "objectives.SealOptions",
  "objectives.SealMargin",
  "objectives.SealRegression",
  "objectives.SealRegressionS",
  "objectives.SealNCE",
  "objectives.LossNetInputs",
  "objectives.LossNetObjective",
)
def smoke_seal_options(en, tmp_path):
  del tmp_path
  o = en.objectives
  batch = _multilabel_batch()
  task_net, loss_net = en.nets.MLP((7,), L), _spen(en)
  assert callable(o.LossNetObjective.loss)
  inputs_type = o.LossNetInputs

  class Squared:
    """A user's loss-net objective: the squared error of σ(−E) to the task score."""

    def loss(self, inputs):
      assert isinstance(inputs, inputs_type)
      y_hat = inputs.structure.link(inputs.task_logits)
      value = jax.nn.sigmoid(-inputs.energy.energy(inputs.params, inputs.encoding, y_hat))
      error = jnp.mean(jnp.square(value - inputs.score(y_hat, inputs.y)))
      return error, {"squared_error": error}

  for objective in (
    o.SealMargin(),
    o.SealRegression(),
    o.SealRegressionS(num_samples=2),
    o.SealNCE(num_samples=2),
    Squared(),
  ):
    _check_objective(
      o.seal_objective(
        loss_net,
        task_net,
        optax.adam(1e-2),
        optax.adam(1e-2),
        options=o.SealOptions(energy_weight=0.5),
        loss_net_objective=objective,
      ),
      batch,
    )


@smoke(
  "objectives.SSVMOptions",
  "objectives.E2EOptions",
  "objectives.DVNOptions",
  "objectives.Sampler",
  "objectives.GBISolver",
  "objectives.ExhaustiveSolver",
  "objectives.Squared",
  "objectives.Log",
  "objectives.L1",
)
def smoke_method_options(en, tmp_path):
  del tmp_path
  o, GBIConfig = en.objectives, en.inference.GBIConfig
  batch = _multilabel_batch()
  gbi, predict = GBIConfig(num_steps=2), GBIConfig(max_steps=3)
  y_hat, y = jnp.array([[0.25, 1.0]]), jnp.array([[0.0, 1.0]])
  for surrogate, expected in (
    (o.Squared(), 0.0625),
    (o.L1(), 0.25),
    (o.Log(1e-3), -np.log(0.75) - np.log(0.999)),
  ):
    np.testing.assert_allclose(o.task_losses.task_loss(y_hat, y, surrogate), [expected], rtol=1e-5)
  ssvm = o.SSVMOptions(
    loss_aug_gbi=gbi, predict_gbi=predict, surrogate=o.L1(), predict_solver=o.GBISolver()
  )
  exact = o.SSVMOptions(
    surrogate=o.Log(), loss_aug_solver=o.ExhaustiveSolver(), predict_solver=o.ExhaustiveSolver()
  )
  e2e = o.E2EOptions(gbi=gbi, loss=o.Squared())
  assert callable(o.Sampler.__call__)

  def gold_and_half(energy, params, encoding, x, y, rng):  # a Sampler of one's own
    del energy, params, encoding, x, rng
    return {"gold": y, "half": jnp.full_like(y, 0.5)}

  dvn = o.DVNOptions(predict_gbi=predict, sampler=gold_and_half)
  for objective in (
    o.ssvm_hinge(_spen(en), optax.sgd(0.1), options=ssvm),
    o.ssvm_hinge(_spen(en), optax.sgd(0.1), options=exact),
    o.e2e_objective(_spen(en), optax.sgd(0.1), options=e2e),
    o.deep_value_network(_spen(en), optax.sgd(0.1), options=dvn),
  ):
    state = objective.init(jax.random.key(0), batch)
    assert jax.tree.leaves(state)


@smoke(
  "objectives.deep_value_network",
  "objectives.implicit_objective",
  "objectives.contrastive_divergence_loss",
)
def smoke_dvn_and_implicit(en, tmp_path):
  del tmp_path
  o, GBIConfig = en.objectives, en.inference.GBIConfig
  batch = _multilabel_batch()
  _check_objective(
    o.deep_value_network(
      _spen(en),
      optax.adam(1e-2),
      options=o.DVNOptions(
        inference_gbi=GBIConfig(num_steps=2), predict_gbi=GBIConfig(max_steps=3)
      ),
    ),
    batch,
  )
  _check_objective(
    o.implicit_objective(
      _spen(en),
      en.nets.MLP((7,), L),
      optax.adam(1e-2),
      optax.sgd(0.1),
      options=o.ImplicitOptions(inner_steps=1, inverse_hvp=en.diff.Neumann(num_terms=2)),
      primary=o.ImplicitCD(num_samples=2),
    ),
    batch,
  )
  energies = jnp.array([[0.0, 1.0, 2.0]])
  costs = jnp.array([[0.0, 0.5, 0.5]])
  np.testing.assert_allclose(
    o.contrastive_divergence_loss(energies, costs),
    [np.log(1 + np.exp(-0.5) + np.exp(-1.5))],
    rtol=1e-6,
  )


@smoke(
  "objectives.ImplicitOptions",
  "objectives.ImplicitSSVM",
  "objectives.ImplicitCD",
  "objectives.ImplicitDVN",
  "objectives.ImplicitPrimaryInputs",
  "objectives.ImplicitPrimary",
  "objectives.NegativeSampler",
  "objectives.StraightThroughNegatives",
  "objectives.RelaxedNegatives",
)
def smoke_implicit_options(en, tmp_path):
  del tmp_path
  o = en.objectives
  batch = _multilabel_batch()
  # CD's negatives are values (any object with NegativeSampler's sample); a name is refused.
  assert callable(o.NegativeSampler.sample)
  logits = jnp.zeros((2, L))
  relaxed = o.RelaxedNegatives(temperature=0.5).sample(outputs.MULTILABEL, KEY, logits, 3)
  assert relaxed.shape == (2, 3, L) and np.all((relaxed > 0) & (relaxed < 1))
  assert o.ImplicitCD().negatives == o.StraightThroughNegatives()
  with pytest.raises(TypeError, match="sampler value"):
    o.ImplicitCD(negatives="relaxed")
  assert callable(o.ImplicitPrimary.loss)
  inputs_type = o.ImplicitPrimaryInputs

  class SquaredValue:
    """A user's primary loss: the squared error of σ(−E(x, ȳ_A)) to ȳ_A's score."""

    def loss(self, inputs):
      assert isinstance(inputs, inputs_type)
      value = jax.nn.sigmoid(-inputs.energies(inputs.y_net[:, None])[:, 0])
      error = jnp.mean(jnp.square(value - inputs.score(inputs.y_net, inputs.y)))
      return error, {"squared_error": error}

  options = o.ImplicitOptions(inner_steps=1, inverse_hvp=en.diff.Neumann(num_terms=2))
  for primary in (
    o.ImplicitSSVM(),
    o.ImplicitDVN(),
    SquaredValue(),
    o.ImplicitCD(num_samples=2, negatives=o.RelaxedNegatives(0.5)),
  ):
    _check_objective(
      o.implicit_objective(
        _spen(en),
        en.nets.MLP((7,), L),
        optax.adam(1e-2),
        optax.sgd(0.1),
        options=options,
        primary=primary,
      ),
      batch,
    )


@smoke("objectives.local_token_ce", "objectives.crf_objective")
def smoke_sequence_objectives(en, tmp_path):
  del tmp_path
  o = en.objectives
  batch, _, _ = testing.tiny_sequence_batch()
  crf = o.crf_objective(testing.tiny_tagger(), testing.SEQ_TAGS, optax.adam(1e-2))
  _check_objective(crf, batch)
  # The token-CE tagger is the same network: trace its functions (shapes and dtypes,
  # no compilation; its training is tested in test_sequence_objectives.py).
  ce = o.local_token_ce(testing.tiny_tagger(), optax.adam(1e-2))
  state = jax.eval_shape(ce.init, KEY, batch)
  new_state, metrics = jax.eval_shape(ce.update, state, batch, KEY)
  assert jax.tree.structure(new_state) == jax.tree.structure(state)
  assert metrics["loss"].shape == ()
  assert jax.eval_shape(ce.predict, new_state, batch["x"]).shape == batch["y"].shape
  assert jax.tree.structure(jax.eval_shape(crf.init_from, state, KEY, batch)) == jax.tree.structure(
    jax.eval_shape(crf.init, KEY, batch)
  )


# ---------------------------------------------------------------------------------------
# Metrics.


@smoke(
  "metrics",
  "metrics.THRESHOLD_GRID",
  "metrics.binarize",
  "metrics.example_f1",
  "metrics.micro_f1",
  "metrics.macro_f1",
  "metrics.hamming_loss",
  "metrics.tune_threshold",
  "metrics.multilabel_report",
  "metrics.evaluate_multilabel",
  "metrics.psnr",
  "metrics.soft_f1",
  "metrics.soft_iou",
  "metrics.per_image_iou",
  "metrics.mean_iou",
  "metrics.dataset_iou",
)
def smoke_metrics(en, tmp_path):
  del tmp_path
  m = en.metrics
  gold = np.array([[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]])
  probs = np.array([[0.9, 0.2, 0.4, 0.1], [0.1, 0.0, 0.3, 0.2], [0.8, 0.6, 0.7, 0.1]])
  pred = m.binarize(probs, 0.5)
  np.testing.assert_array_equal(pred, [[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0]])
  # Example F1: 2/3, 1 (empty/empty), 4/5.
  assert m.example_f1(gold, pred) == pytest.approx((2 / 3 + 1 + 0.8) / 3)
  assert m.micro_f1(gold, pred) == pytest.approx(2 * 3 / (4 + 4))
  assert 0 <= m.macro_f1(gold, pred) <= 1
  assert m.hamming_loss(gold, pred) == pytest.approx(2 / 12)
  assert m.THRESHOLD_GRID[0] == 0.05 and m.THRESHOLD_GRID[-1] == 0.95
  threshold = m.tune_threshold(gold, probs)
  assert threshold in m.THRESHOLD_GRID
  tuned_f1 = m.example_f1(gold, m.binarize(probs, threshold))
  assert all(tuned_f1 >= m.example_f1(gold, m.binarize(probs, t)) for t in m.THRESHOLD_GRID)
  report = m.multilabel_report(gold, probs, 0.5)
  assert report["example_f1"] == pytest.approx(m.example_f1(gold, pred))
  results = m.evaluate_multilabel(val=(gold, probs), test=(gold, probs))
  assert results["test/example_f1"] == pytest.approx(tuned_f1)
  clean = np.zeros((1, 4, 4))
  assert m.psnr(clean, clean + 0.1) == pytest.approx(20.0, rel=1e-6)
  soft = m.soft_f1(jnp.asarray(pred, jnp.float32), jnp.asarray(gold, jnp.float32))
  np.testing.assert_allclose(soft, [2 / 3, 1.0, 0.8], rtol=1e-5)
  iou = m.soft_iou(jnp.asarray(gold, jnp.float32), jnp.asarray(pred, jnp.float32))
  np.testing.assert_allclose(iou, [0.5, 1.0, 2 / 3], rtol=1e-5)
  masks = gold.reshape(3, 2, 2)
  mask_probs = probs.reshape(3, 2, 2)
  np.testing.assert_allclose(m.per_image_iou(mask_probs, masks), [0.5, 1.0, 2 / 3])
  assert m.mean_iou(mask_probs, masks) == pytest.approx((0.5 + 1 + 2 / 3) / 3)
  assert m.dataset_iou(mask_probs, masks) == pytest.approx(3 / 5)


@smoke(
  "metrics.SPAN_SCHEMES",
  "metrics.SpanScores",
  "metrics.token_accuracy",
  "metrics.extract_spans",
  "metrics.span_f1",
)
def smoke_sequence_metrics(en, tmp_path):
  del tmp_path
  m = en.metrics
  assert m.SPAN_SCHEMES["iob2"] == frozenset("BI")
  gold = [["B-PER", "I-PER", "O", "B-LOC"]]
  pred = [["B-PER", "I-PER", "O", "O"]]
  assert m.extract_spans(gold[0]) == [("PER", 0, 2), ("LOC", 3, 4)]
  scores = m.span_f1(gold, pred)
  assert isinstance(scores, m.SpanScores)
  assert (scores.precision, scores.recall) == (1.0, 0.5)
  assert scores.f1 == pytest.approx(2 / 3)
  assert (
    m.token_accuracy(np.array([[1, 2, 3]]), np.array([[1, 0, 3]]), np.array([[True, True, False]]))
    == 0.5
  )


# ---------------------------------------------------------------------------------------
# Data.


@smoke(
  "data",
  "data.load_dataset",
  "data.DatasetSpec",
  "data.REGISTRY",
  "data.resolve_data_dir",
  "data.DATA_DIR_ENV",
  "data.MultiLabelDataset",
  "data.Split",
  "data.Standardizer",
  "data.block_exclusivity",
  "data.block_exclusivity_weights",
  "load_dataset",
  "block_exclusivity",
)
def smoke_multilabel_data(en, tmp_path):
  d = en.data
  synthetic = en.load_dataset("synthetic", num_train=32, num_validation=8, num_test=8)
  assert isinstance(synthetic, d.MultiLabelDataset) and isinstance(synthetic.train, d.Split)
  assert synthetic.train.x.shape == (32, 64) and synthetic.train.y.shape == (32, 16)
  np.testing.assert_array_equal(synthetic.train.y.reshape(32, 4, 4).sum(-1), 1)
  x, y = en.block_exclusivity(10, seed=3)
  a = d.block_exclusivity_weights(seed=3)
  winners = (x.astype(np.float64) @ a).reshape(10, 4, 4).argmax(-1)
  np.testing.assert_array_equal(y.reshape(10, 4, 4).argmax(-1), winners)
  by_path = d.load_dataset(TESTDATA / "tiny_mulan")  # any MULAN folder, by path
  assert by_path.train.x.shape[1] == by_path.test.x.shape[1]
  assert all(isinstance(spec, d.DatasetSpec) for spec in d.REGISTRY.values())
  assert "bibtex" in d.REGISTRY and "synthetic" in d.REGISTRY
  assert d.DATA_DIR_ENV == "ENERGYNETS_DATA_DIR"
  assert d.resolve_data_dir(tmp_path) == tmp_path
  standardizer = d.Standardizer.fit(np.array([[0.0, 1.0], [2.0, 1.0]]))
  np.testing.assert_allclose(standardizer(np.array([[1.0, 1.0]])), [[0.0, 0.0]])
  assert standardizer.num_constant == 1


@smoke(
  "data.parse_mulan_arff",
  "data.read_mulan",
  "data.MulanArff",
  "data.DataError",
  "data.parse_clus_arff",
  "data.ClusArff",
  "data.ClusPreprocessor",
  "data.fit_clus_preprocessor",
)
def smoke_parsers(en, tmp_path):
  del tmp_path
  d = en.data
  x, y, features, labels = d.parse_mulan_arff(TESTDATA / "dense.arff", TESTDATA / "dense.xml")
  parsed = d.read_mulan(TESTDATA / "dense.arff", TESTDATA / "dense.xml")
  assert isinstance(parsed, d.MulanArff)
  np.testing.assert_array_equal(parsed.x, x)
  assert x.shape[0] == y.shape[0] and y.shape[1] == len(labels)
  assert x.shape[1] == len(features)
  with pytest.raises(d.DataError, match="bad_value.arff"):
    d.read_mulan(TESTDATA / "bad_value.arff", TESTDATA / "dense.xml")
  clus = d.parse_clus_arff(TESTDATA / "clus_train.arff")
  assert isinstance(clus, d.ClusArff) and clus.y.shape[0] == len(clus.columns[0])
  preprocessor = d.fit_clus_preprocessor(clus)
  assert isinstance(preprocessor, d.ClusPreprocessor)
  features = preprocessor(clus)
  assert features.shape[0] == clus.y.shape[0] and np.all(np.isfinite(features))


@smoke(
  "data.DenoisingDataset",
  "data.DenoisingSplit",
  "data.depth_scene",
  "data.load_denoising",
  "load_denoising",
)
def smoke_denoising_data(en, tmp_path):
  del tmp_path
  d = en.data
  scene = d.depth_scene(np.random.default_rng(0), 16, 12)
  assert scene.shape == (16, 12) and np.all(np.isfinite(scene))
  data = en.load_denoising(
    num_train=3, num_validation=2, num_test=2, height=16, width=16, crops_per_image=1
  )
  assert isinstance(data, d.DenoisingDataset) and isinstance(data.train, d.DenoisingSplit)
  assert data.train.x.shape == data.train.y.shape == (3, 16, 16)


@smoke("data.load_segmentation", "data.SegmentationDataset", "data.SegmentationSplit")
def smoke_segmentation_data(en, tmp_path):
  del tmp_path
  d = en.data
  horses = d.load_segmentation("weizmann_horse")  # the data directory of conftest.py
  assert isinstance(horses, d.SegmentationDataset) and isinstance(horses.test, d.SegmentationSplit)
  assert horses.train.x.shape[1:] == (32, 32, 3) and horses.test.y.shape[1:] == (32, 32)
  assert set(np.unique(horses.train.y)) <= {0.0, 1.0}


@smoke(
  "data.load_sequence_dataset",
  "data.SEQUENCE_DATASETS",
  "data.TWITTER_POS_TAGS",
  "data.SequenceDataset",
  "data.SequenceSplit",
  "data.Sentence",
  "data.Vocabulary",
  "data.parse_conll2003",
  "data.parse_twitter_pos",
  "data.build_sequence_dataset",
  "data.iob2_to_bioes",
  "data.bioes_to_iob2",
  "data.scheme_tags",
  "data.load_glove",
  "data.decode_tags",
  "data.bucketed_batches",
  "data.batch_of",
  "data.padding_fraction",
  "data.pack_tokens",
  "data.unpack_tokens",
  "data.one_hot_tags",
  "load_sequence_dataset",
)
def smoke_sequence_data(en, tmp_path):
  del tmp_path
  d = en.data
  assert set(d.SEQUENCE_DATASETS) == {"conll2003", "twitter_pos"}
  assert len(d.TWITTER_POS_TAGS) == 25
  sentences = d.parse_conll2003(TESTDATA / "conll_tiny.txt")
  assert sentences and all(isinstance(s, d.Sentence) for s in sentences)
  tweets = d.parse_twitter_pos(TESTDATA / "twpos_tiny.txt")
  assert all(set(s.tags) <= set(d.TWITTER_POS_TAGS) for s in tweets)
  tags = ["B-PER", "I-PER", "O", "B-LOC"]
  assert d.iob2_to_bioes(tags) == ["B-PER", "E-PER", "O", "S-LOC"]
  assert d.bioes_to_iob2(d.iob2_to_bioes(tags)) == tags
  assert set(d.scheme_tags(["PER"], "iob2")) == {"O", "B-PER", "I-PER"}
  dataset = d.build_sequence_dataset(
    "tiny", {"train": sentences, "validation": sentences, "test": sentences}, scheme="iob2"
  )
  assert isinstance(dataset, d.SequenceDataset) and isinstance(dataset.train, d.SequenceSplit)
  assert isinstance(dataset.word_vocab, d.Vocabulary)
  vectors, found = d.load_glove(TESTDATA / "glove_tiny.txt", dataset.word_vocab, dim=3)
  assert vectors.shape == (len(dataset.word_vocab), 3) and found >= 0
  split = dataset.train
  packed = d.pack_tokens(split)
  tokens = d.unpack_tokens(packed)
  np.testing.assert_array_equal(tokens["words"], split.words)
  num_tags = len(dataset.tag_vocab)
  one_hot = d.one_hot_tags(split, num_tags)
  assert one_hot.shape == split.tags.shape + (num_tags,)
  names = d.decode_tags(split.tags, split.mask, dataset.tag_vocab.items)
  assert [len(n) for n in names] == list(split.lengths)
  batches = list(d.bucketed_batches(split.lengths, 2, 0))
  assert sorted(np.concatenate(batches)) == list(range(len(split.lengths)))
  assert 0 <= d.padding_fraction(split.lengths, batches) < 1
  batch = d.batch_of(split, batches[0])
  longest = int(split.lengths[batches[0]].max())
  assert batch["words"].shape == (len(batches[0]), longest)
  with pytest.raises(d.DataError):  # the data directory holds no such folder
    d.load_sequence_dataset("twitter_pos", data_dir=TESTDATA)


# ---------------------------------------------------------------------------------------
# Training.


@smoke(
  "train",
  "train.fit",
  "train.LoopOptions",
  "train.FitResult",
  "train.build_train_step",
  "train.build_init",
  "train.build_init_from",
  "train.build_predict",
  "train.make_mesh",
  "train.predict_in_batches",
  "train.Checkpointer",
  "train.MetricWriter",
  "train.NonFiniteLossError",
  "train.DATA_AXIS",
  "train.batch_sharded",
  "train.replicate",
  "train.replicated",
  "train.shard_batch",
  "train.check_batch_size",
  "train.quiet_library_logs",
  "train.Validation",
)
def smoke_train(en, tmp_path):
  t = en.train
  t.quiet_library_logs()
  batch = {k: np.asarray(v) for k, v in _multilabel_batch().items()}
  objective = en.objectives.local_bce(en.nets.MLP((4,), L), optax.adam(1e-2))
  mesh = t.make_mesh()
  assert mesh.axis_names == (t.DATA_AXIS,)
  t.check_batch_size(B, mesh)
  predict = t.build_predict(objective, mesh)

  def evaluate(state):
    probs = t.predict_in_batches(predict, state, batch["x"], 4, mesh)
    return {"validation/example_f1": en.metrics.example_f1(batch["y"], probs >= 0.5)}

  options = t.LoopOptions(
    steps=4, batch_size=4, log_every=2, eval_every=2, checkpoint_every=2, tensorboard=True
  )
  result = t.fit(
    objective, batch, options, str(tmp_path / "run"), validation=t.Validation(evaluate)
  )
  assert isinstance(result, t.FitResult) and result.final_step == 4
  assert [r["step"] for r in result.history] == [2, 4]
  assert t.Checkpointer(str(tmp_path / "run" / "checkpoints")).latest_step() == 4
  best = t.Checkpointer(str(tmp_path / "run" / "best"))
  restored, meta = best.restore(result.selected_step, result.state)
  assert meta["value"] == result.selected_value
  assert not _moved(restored, result.state)  # the returned state is the selected one
  best.close()
  # The pieces fit is made of.
  state = t.build_init(objective, mesh)(KEY, t.shard_batch(batch, mesh))
  state = t.replicate(state, mesh)
  assert state["net"].params["head"]["kernel"].sharding == t.replicated(mesh)
  sharded = t.shard_batch(batch, mesh)
  assert sharded["x"].sharding == t.batch_sharded(mesh)
  new_state, metrics = t.build_train_step(objective, mesh)(state, sharded, KEY)
  assert np.isfinite(float(metrics["loss"]))
  continued = t.build_init_from(objective, mesh)(new_state, KEY, sharded)
  assert not _moved(continued["net"].params, new_state["net"].params)
  writer = t.MetricWriter(str(tmp_path / "writer"), tensorboard=False)
  writer.write(1, {"train/loss": 0.5})
  writer.close()
  assert '"train/loss": 0.5' in pathlib.Path(writer.path).read_text()
  broken = en.objectives.local_bce(en.nets.MLP((), L), optax.sgd(float("nan")))
  with pytest.raises(t.NonFiniteLossError, match="non-finite loss"):
    t.fit(broken, batch, dataclasses.replace(options, tensorboard=False), str(tmp_path / "nan"))


@smoke("train.MODEL_AXIS", "train.label_axis_shardings")
def smoke_model_axis(en, tmp_path):
  t = en.train
  mesh = t.make_mesh(1)
  state = {"head": np.zeros((D, L), np.float32), "hidden": np.zeros((D, 3), np.float32)}
  # Without a 'model' axis (tests/test_model_axis.py splits on 4 devices) all replicated.
  shardings = t.label_axis_shardings(state, mesh, L)
  assert jax.tree.structure(shardings) == jax.tree.structure(state)
  assert all(s == t.replicated(mesh) for s in jax.tree.leaves(shardings))
  assert t.MODEL_AXIS == "model" and t.MODEL_AXIS not in mesh.axis_names
  with pytest.raises(ValueError, match="model_parallelism=2 must be a positive divisor"):
    t.make_mesh(1, model_parallelism=2)


@smoke(
  "train.load_run",
  "train.Predictor",
  "train.read_run",
  "train.BuilderError",
  "train.RunFormatError",
  "train.RunNotFoundError",
)
def smoke_runs(en, tmp_path):
  t = en.train
  batch = {k: np.asarray(v) for k, v in _multilabel_batch().items()}
  objective = en.objectives.local_bce(en.nets.MLP((4,), L), optax.adam(1e-2))
  with pytest.raises(t.BuilderError, match="does not import"):
    t.fit(
      objective,
      batch,
      t.LoopOptions(steps=2, batch_size=4),
      str(tmp_path / "bad"),
      builder="no_such_module:build",
    )
  with pytest.raises(t.RunNotFoundError, match="no run in"):
    t.load_run(tmp_path / "bad")
  options = t.LoopOptions(steps=2, batch_size=4, select_metric=None, tensorboard=False)
  result = t.fit(
    objective,
    batch,
    options,
    str(tmp_path / "run"),
    validation=t.Validation(x=batch["x"], y=batch["y"]),
  )
  record = t.read_run(tmp_path / "run")
  assert record["threshold_source"] == "validation" and record["builder"] is None
  predictor = t.load_run(tmp_path / "run", objective=objective)
  assert isinstance(predictor, t.Predictor)
  soft = predictor.predict(batch["x"])
  np.testing.assert_allclose(
    soft, objective.predict(result.state, batch["x"]), rtol=1e-5, atol=1e-6
  )
  assert predictor.labels(batch["x"]).shape == (B, L)
  (tmp_path / "run" / "run.json").write_text('{"format": "energynets.run", "version": 0}')
  with pytest.raises(t.RunFormatError, match="format version 0"):
    t.load_run(tmp_path / "run", objective=objective)


# ---------------------------------------------------------------------------------------
# The top-level package: its docstring's example runs as written.


@smoke("data", "diff", "domains", "energies", "inference", "metrics", "nets", "objectives", "train")
def smoke_package_docstring_example(en, tmp_path):
  """The example in `energynets.__doc__` (with fewer steps and a temporary workdir)."""
  for name in (
    "data",
    "diff",
    "domains",
    "energies",
    "inference",
    "metrics",
    "nets",
    "objectives",
    "train",
  ):
    module = getattr(en, name)
    assert module.__all__  # a public module with a non-empty surface
  doc = energynets.__doc__
  start = doc.rindex("\n", 0, doc.index("import jax, optax")) + 1
  example = textwrap.dedent(doc[start : doc.index("See `notebooks")])
  assert '"/tmp/seal"' in example and "steps=200" in example
  example = example.replace('"/tmp/seal"', repr(str(tmp_path / "seal")))
  example = example.replace("steps=200", "steps=20")
  namespace: dict = {}
  exec(compile(example, "energynets.__doc__", "exec"), namespace)  # pylint: disable=exec-used
  assert namespace["y"].shape == (32, 16)
  assert float(namespace["trace"].energies[-1].mean()) < float(
    namespace["trace"].initial_energy.mean()
  )
  assert namespace["result"].final_step == 20


# ---------------------------------------------------------------------------------------
# The tests over the groups above (after them: parametrized from the filled registry).


@pytest.mark.parametrize("group", sorted(SMOKE))
def test_smoke(group, tmp_path):
  fn, names = SMOKE[group]
  used: set = set()
  fn(_Recorder(energynets, used), tmp_path)
  unused = sorted(set(names) - used)
  assert not unused, f"{group} declares {unused} but never looks them up"


def _covered_by_identity(obj) -> bool:
  """Functions, classes and modules are covered under any of their public names."""
  return inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismodule(obj)


def test_every_public_name_is_smoke_tested():
  public = _public_names()
  declared = {name for _, names in SMOKE.values() for name in names}
  assert not declared - set(public), (
    f"smoke groups declare non-public names: {sorted(declared - set(public))}"
  )
  declared_ids = {id(_resolve(name)) for name in declared if _covered_by_identity(_resolve(name))}
  uncovered = [
    name
    for name in public
    if name not in declared
    and not (_covered_by_identity(_resolve(name)) and id(_resolve(name)) in declared_ids)
  ]
  assert not uncovered, f"public names no smoke group calls: {uncovered}"

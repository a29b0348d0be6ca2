"""Data: ARFF parsers, split rules, the synthetic tasks, the dataset registry and the
sequence-labeling data (CoNLL-2003 NER, Twitter POS)."""

from energynets.data.arff import ClusArff
from energynets.data.arff import ClusPreprocessor
from energynets.data.arff import DataError
from energynets.data.arff import fit_clus_preprocessor
from energynets.data.arff import MulanArff
from energynets.data.arff import parse_clus_arff
from energynets.data.arff import parse_mulan_arff
from energynets.data.arff import read_mulan
from energynets.data.denoising import DenoisingDataset
from energynets.data.denoising import DenoisingSplit
from energynets.data.denoising import depth_scene
from energynets.data.denoising import load_denoising
from energynets.data.registry import DATA_DIR_ENV
from energynets.data.registry import DatasetSpec
from energynets.data.registry import load_dataset
from energynets.data.registry import REGISTRY
from energynets.data.registry import resolve_data_dir
from energynets.data.sequences import batch_of
from energynets.data.sequences import one_hot_tags
from energynets.data.sequences import pack_tokens
from energynets.data.sequences import unpack_tokens
from energynets.data.sequences import bioes_to_iob2
from energynets.data.sequences import bucketed_batches
from energynets.data.sequences import build_sequence_dataset
from energynets.data.sequences import decode_tags
from energynets.data.sequences import iob2_to_bioes
from energynets.data.sequences import load_glove
from energynets.data.sequences import load_sequence_dataset
from energynets.data.sequences import padding_fraction
from energynets.data.sequences import parse_conll2003
from energynets.data.sequences import parse_twitter_pos
from energynets.data.sequences import scheme_tags
from energynets.data.sequences import Sentence
from energynets.data.sequences import SEQUENCE_DATASETS
from energynets.data.sequences import SequenceDataset
from energynets.data.sequences import SequenceSplit
from energynets.data.sequences import TWITTER_POS_TAGS
from energynets.data.sequences import Vocabulary
from energynets.data.splits import MultiLabelDataset
from energynets.data.splits import Split
from energynets.data.splits import Standardizer
from energynets.data.synthetic import block_exclusivity
from energynets.data.synthetic import block_exclusivity_weights

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

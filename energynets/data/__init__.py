"""Data: ARFF parsers, split rules, the synthetic tasks and the dataset registry."""

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
    "Split",
    "Standardizer",
    "block_exclusivity",
    "block_exclusivity_weights",
    "depth_scene",
    "fit_clus_preprocessor",
    "load_dataset",
    "load_denoising",
    "parse_clus_arff",
    "parse_mulan_arff",
    "read_mulan",
    "resolve_data_dir",
]

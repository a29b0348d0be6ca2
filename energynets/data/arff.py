"""ARFF parsers: MULAN multi-label files (dense and sparse) and CLUS hierarchical files.

The readers live in `energynets.data.mulan` (MULAN ARFF files),
`energynets.data.mulan_decoder` (XML label headers, attribute encoding),
`energynets.data.clus` (CLUS HMC files and their preprocessing) and
`energynets.data.arff_syntax` (what both share: header, row tokens, conventions);
this module gathers their public names under one import path.
"""

from energynets.data.arff_syntax import ArffHeader
from energynets.data.arff_syntax import Attribute
from energynets.data.arff_syntax import read_header
from energynets.data.arff_syntax import unique_names
from energynets.data.clus import ClusArff
from energynets.data.clus import ClusPreprocessor
from energynets.data.clus import count_missing
from energynets.data.clus import fit_clus_preprocessor
from energynets.data.clus import parse_clus_arff
from energynets.data.errors import DataError
from energynets.data.mulan import MulanArff
from energynets.data.mulan import parse_mulan_arff
from energynets.data.mulan import read_mulan
from energynets.data.mulan_decoder import read_mulan_labels

__all__ = [
  "ArffHeader",
  "Attribute",
  "ClusArff",
  "ClusPreprocessor",
  "DataError",
  "MulanArff",
  "count_missing",
  "fit_clus_preprocessor",
  "parse_clus_arff",
  "parse_mulan_arff",
  "read_header",
  "read_mulan",
  "read_mulan_labels",
  "unique_names",
]

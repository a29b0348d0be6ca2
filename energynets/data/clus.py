"""CLUS hierarchical multi-label (HMC) ARFF files and their train-statistics preprocessing.

`parse_clus_arff` reads a file whose class attribute is declared `hierarchical` (the
FunCat `*_FUN` datasets); `fit_clus_preprocessor` fits imputation, one-hot encoding and
standardization on the train file. Parsing is strict: a malformed row or an undeclared
class path raises `DataError` naming the file, the line and the problem.
"""

import dataclasses
import pathlib

import numpy as np

from energynets.data import splits
from energynets.data.arff_syntax import MISSING
from energynets.data.arff_syntax import Attribute
from energynets.data.arff_syntax import data_lines
from energynets.data.arff_syntax import parse_numeric_fields
from energynets.data.arff_syntax import read_header
from energynets.data.arff_syntax import read_lines
from energynets.data.arff_syntax import split_fields
from energynets.data.arff_syntax import unique_names
from energynets.data.arff_syntax import unquote
from energynets.data.errors import DataError
from energynets.data.errors import PathLike


@dataclasses.dataclass(frozen=True)
class ClusArff:
  """Raw content of a CLUS hierarchical multi-label (HMC) ARFF file.

  Attributes:
    path: the file.
    attributes: the feature attributes (all but the hierarchical class) [F].
    columns: per feature attribute: float64 [N] (NaN = missing) for numeric,
      int32 [N] value codes (-1 = missing) for nominal.
    label_nodes: hierarchy nodes in declared order [L] (the root is not a node).
    label_paths: per row, the `@`-separated class paths as written.
    y: float32 [N, L]; ancestor-closed: a path's ancestors are positive too.
  """

  path: str
  attributes: tuple[Attribute, ...]
  columns: tuple[np.ndarray, ...]
  label_nodes: tuple[str, ...]
  label_paths: tuple[tuple[str, ...], ...]
  y: np.ndarray

  @property
  def num_examples(self) -> int:
    return len(self.y)


def _ancestors(node: str) -> list[str]:
  parts = node.split("/")
  return ["/".join(parts[:k]) for k in range(1, len(parts))]


def parse_clus_arff(path: PathLike) -> ClusArff:
  """Parses a CLUS HMC ARFF file (e.g. the FunCat `*_FUN` datasets).

  The class attribute is declared `hierarchical a,a/b,...` and each row's class
  field holds `@`-separated paths (`12/01@42/01`); y is their ancestor closure
  (12, 12/01, 42, 42/01).

  Raises:
    DataError: on any missing, malformed or inconsistent input.
  """
  path = pathlib.Path(path)
  lines = read_lines(path)
  header = read_header(path, lines)
  spath = str(path)
  hier = [j for j, a in enumerate(header.attributes) if a.kind == "hierarchical"]
  if len(hier) != 1:
    raise DataError(
      path, header.data_line, f"expected one 'hierarchical' class attribute, found {len(hier)}"
    )
  class_index = hier[0]
  class_attr = header.attributes[class_index]
  nodes = class_attr.values
  column_of = {node: k for k, node in enumerate(nodes)}
  if len(column_of) != len(nodes):
    raise DataError(path, class_attr.line, "hierarchy node declared twice")
  closure = {}
  for node in nodes:
    missing = [a for a in _ancestors(node) if a not in column_of]
    if missing:
      raise DataError(
        path,
        class_attr.line,
        f"hierarchy node {node!r} is declared but its ancestor {missing[0]!r} is not",
      )
    closure[node] = [column_of[a] for a in _ancestors(node)] + [column_of[node]]
  features = [(j, a) for j, a in enumerate(header.attributes) if j != class_index]
  for _, a in features:
    if a.kind not in ("numeric", "nominal"):
      raise DataError(path, a.line, f"attribute {a.name!r} has unsupported type {a.kind}")
  num_attrs = len(header.attributes)
  numeric = [j for j, a in features if a.kind == "numeric"]
  nominal = [j for j, a in features if a.kind == "nominal"]
  codes = {j: {v: k for k, v in enumerate(header.attributes[j].values)} for j in nominal}
  capacity = len(lines) - header.data_line
  num_values = np.empty((capacity, len(numeric)), np.float64)
  nom_values = np.empty((capacity, len(nominal)), np.int32)
  y = np.zeros((capacity, len(nodes)), np.float32)
  all_paths = []
  n = 0
  for lineno, s in data_lines(lines, header):
    if s[0] == "{":
      raise DataError(path, lineno, "sparse rows are not supported in CLUS files")
    fields = split_fields(s, spath, lineno)
    if len(fields) != num_attrs:
      raise DataError(
        path,
        lineno,
        f"row has {len(fields)} fields, expected {num_attrs} (truncated or malformed line?)",
      )
    fields = [unquote(f) for f in fields]
    num_values[n] = parse_numeric_fields(
      [fields[j] for j in numeric], [header.attributes[j] for j in numeric], spath, lineno
    )
    row_codes = []
    for j in nominal:
      token = fields[j]
      code = -1 if token == MISSING else codes[j].get(token)
      if code is None:
        raise DataError(
          path, lineno, f"bad value {token!r} for nominal attribute {header.attributes[j].name!r}"
        )
      row_codes.append(code)
    nom_values[n] = row_codes
    label_field = fields[class_index]
    if not label_field or label_field == MISSING:
      raise DataError(path, lineno, "missing class (hierarchical label field is empty)")
    row_paths = tuple(p.strip() for p in label_field.split("@"))
    for p in row_paths:
      cols = closure.get(p)
      if cols is None:
        raise DataError(path, lineno, f"class path {p!r} is not a declared hierarchy node")
      y[n, cols] = 1.0
    all_paths.append(row_paths)
    n += 1
  if n == 0:
    raise DataError(path, header.data_line, "no data rows after @data")
  columns: dict[int, np.ndarray] = {}
  for k, j in enumerate(numeric):
    columns[j] = num_values[:n, k].copy()
  for k, j in enumerate(nominal):
    columns[j] = nom_values[:n, k].copy()
  return ClusArff(
    path=spath,
    attributes=tuple(a for _, a in features),
    columns=tuple(columns[j] for j, _ in features),
    label_nodes=nodes,
    label_paths=tuple(all_paths),
    y=y[:n],
  )


@dataclasses.dataclass(frozen=True)
class ClusPreprocessor:
  """Train-statistics preprocessing of CLUS features: impute, one-hot, standardize.

  Attributes:
    attributes: the feature attributes it was fitted on [F].
    fill: per attribute, the train mean (numeric) or train mode code (nominal).
    standardizer: train mean/std of the one-hot features, or None.
    feature_names: names of the D output columns (`name=value` for one-hot).
  """

  attributes: tuple[Attribute, ...]
  fill: tuple[float, ...]
  standardizer: splits.Standardizer | None
  feature_names: tuple[str, ...]

  def encode(self, data: ClusArff) -> np.ndarray:
    """Imputed and one-hot features, float64 [N, D], before standardization."""
    if len(data.attributes) != len(self.attributes):
      raise DataError(
        data.path,
        None,
        f"{len(data.attributes)} feature attributes, the train file has {len(self.attributes)}",
      )
    for a, b in zip(data.attributes, self.attributes):
      if not a.same_type(b):
        raise DataError(
          data.path,
          a.line,
          f"attribute {a.name!r} differs from the train file's declaration of {b.name!r}",
        )
    blocks = []
    for attr, column, fill in zip(self.attributes, data.columns, self.fill):
      if attr.kind == "numeric":
        blocks.append(np.where(np.isnan(column), fill, column)[:, None])
      else:
        codes = np.where(column < 0, int(fill), column)
        blocks.append(np.eye(len(attr.values))[codes])
    return np.concatenate(blocks, axis=1)

  def __call__(self, data: ClusArff) -> np.ndarray:
    """Preprocessed features of `data`, float32 [N, D]."""
    x = self.encode(data)
    if self.standardizer is not None:
      return self.standardizer(x)
    return x.astype(np.float32)


def fit_clus_preprocessor(train: ClusArff, *, standardize: bool = True) -> ClusPreprocessor:
  """Fits imputation (numeric: train mean; nominal: train mode), full one-hot over the
  declared values, and (optionally) standardization, all on `train` only."""
  fill = []
  for attr, column in zip(train.attributes, train.columns):
    if attr.kind == "numeric":
      observed = column[~np.isnan(column)]
      # A column never observed in train is imputed as 0 everywhere.
      fill.append(float(observed.mean()) if observed.size else 0.0)
    else:
      counts = np.bincount(column[column >= 0], minlength=len(attr.values))
      fill.append(float(np.argmax(counts)))  # ties: the first declared value
  names = []
  for attr in train.attributes:
    if attr.kind == "numeric":
      names.append(attr.name)
    else:
      names.extend(f"{attr.name}={v}" for v in attr.values)
  pre = ClusPreprocessor(train.attributes, tuple(fill), None, unique_names(names))
  if standardize:
    pre = dataclasses.replace(pre, standardizer=splits.Standardizer.fit(pre.encode(train)))
  return pre


def count_missing(data: ClusArff) -> int:
  """Number of missing feature cells."""
  return int(
    sum(np.sum(np.isnan(c)) if c.dtype.kind == "f" else np.sum(c < 0) for c in data.columns)
  )

"""MULAN multi-label ARFF files (dense and sparse rows).

`parse_mulan_arff` / `read_mulan` turn a MULAN file into float32 feature and label
arrays, at once or row by row (`MulanReader`); see `parse_mulan_arff` for the encoding
(`mulan_decoder` decodes the rows, `record_encoding` writes the encoding into a
dataset's `meta`). The reader is strict: a value that does not fit its attribute, a row
with the wrong number of fields, a sparse index out of range, a label that is not 0/1
or a missing `@data` section raises `DataError` naming the file, the line and the
problem. It never returns a silently wrong array.
"""

import collections
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
import dataclasses
import pathlib
from typing import Any

import numpy as np

from energynets.data.arff_syntax import data_lines
from energynets.data.arff_syntax import file_encoding
from energynets.data.arff_syntax import read_lines
from energynets.data.arff_syntax import stream_lines
from energynets.data.errors import DataError
from energynets.data.errors import PathLike
from energynets.data.mulan_decoder import MulanDecoder
from energynets.data.mulan_decoder import mulan_decoder


@dataclasses.dataclass(frozen=True)
class MulanArff:
  """A parsed MULAN file and how its attributes were encoded.

  Attributes:
    path: the file.
    x: float32 [N, D] features (NaN where the file has '?').
    y: float32 [N, L] labels in {0, 1}.
    feature_names: [D]; `name=value` for one-hot columns.
    label_names: [L], in ARFF attribute order.
    binary_nominal: (name, value read as 1) of each two-valued nominal feature.
    one_hot: names of nominal features expanded one-hot.
    dropped: names of the attributes left out.
  """

  path: str
  x: np.ndarray
  y: np.ndarray
  feature_names: tuple[str, ...]
  label_names: tuple[str, ...]
  binary_nominal: tuple[tuple[str, str], ...]
  one_hot: tuple[str, ...]
  dropped: tuple[str, ...]


def _result(
  decoder: MulanDecoder, x: np.ndarray, y: np.ndarray, drop_attributes: Sequence[str]
) -> MulanArff:
  return MulanArff(
    path=decoder.path,
    x=x,
    y=y,
    feature_names=tuple(decoder.feature_names),
    label_names=tuple(decoder.label_names),
    binary_nominal=tuple(decoder.binary_nominal),
    one_hot=tuple(decoder.one_hot),
    dropped=tuple(drop_attributes),
  )


def read_mulan(
  arff_path: PathLike,
  xml_path: PathLike | None = None,
  num_labels: int | None = None,
  drop_attributes: Sequence[str] = (),
  rows: Iterable[int] | None = None,
) -> MulanArff:
  """`parse_mulan_arff` plus the encoding notes; see there.

  `rows`: the data rows to keep (0-based, in file order; `MulanReader.read`), read
  line by line so that only they are held in memory; None: all, read at once.
  """
  arff_path = pathlib.Path(arff_path)
  if rows is not None:
    return MulanReader(arff_path, xml_path, num_labels, drop_attributes).read(rows)
  # The header and rows are read here rather than by liac-arff (the tests' oracle):
  # liac-arff's reader for mixed dense/sparse files expands every sparse row to all
  # attributes and converts each cell, 4x (bibtex) to 7x (delicious) slower; it reads
  # some input differently without an error (a tab inside `@attribute` renames the
  # attribute, INTEGER values are truncated, an empty field is missing, a repeated
  # sparse index keeps its last value, 'nan' is a number); and its errors carry the
  # line but not the value or attribute at fault.
  if xml_path is None and num_labels is None:
    raise ValueError("parse_mulan_arff needs xml_path or num_labels to know the labels")
  lines = read_lines(arff_path)
  decoder = mulan_decoder(arff_path, xml_path, num_labels, drop_attributes, lines)
  header = decoder.header
  capacity = len(lines) - header.data_line
  x = np.empty((capacity, decoder.num_features), np.float32)
  y = np.empty((capacity, decoder.num_labels), np.float32)
  n = 0
  for lineno, s in data_lines(lines, header):
    decoder.decode_row(s, lineno, x[n], y[n])
    n += 1
  if n == 0:
    raise DataError(decoder.path, header.data_line, "no data rows after @data")
  return _result(decoder, x[:n], y[:n], drop_attributes)


class MulanReader:
  """A MULAN file read line by line: its header and label layout at once, its data rows
  one pass at a time (`rows`, `read`), so that memory holds one line, not the file.

  Every pass decodes the same values `read_mulan` does and raises the same `DataError`
  on a malformed line (file, line number and problem, one line).

  Attributes:
    path: the `.arff` file.
    feature_names: [D], as `read_mulan`'s.
    label_names: [L].
    binary_nominal: as `MulanArff`'s.
    one_hot: as `MulanArff`'s.
    dropped: as `MulanArff`'s.
    num_features: D.
    num_labels: L.
  """

  def __init__(
    self,
    arff_path: PathLike,
    xml_path: PathLike | None = None,
    num_labels: int | None = None,
    drop_attributes: Sequence[str] = (),
  ):
    """Reads the header (and the XML label header) and checks the label layout.

    Args:
      arff_path: the `.arff` file.
      xml_path: the MULAN label header; if None, `num_labels` is required.
      num_labels: expected number of labels (checked against the XML when both given).
      drop_attributes: names of feature attributes to leave out.

    Raises:
      DataError: a missing file, a malformed header or label layout.
    """
    self.path = pathlib.Path(arff_path)
    if xml_path is None and num_labels is None:
      raise ValueError("parse_mulan_arff needs xml_path or num_labels to know the labels")
    if not self.path.is_file():
      raise DataError(self.path, None, "file not found")
    self._encoding = file_encoding(self.path)
    lines = stream_lines(self.path, self._encoding)
    try:
      self._decoder = mulan_decoder(self.path, xml_path, num_labels, drop_attributes, lines)
    finally:
      lines.close()
    self._dropped = tuple(drop_attributes)
    self.feature_names = tuple(self._decoder.feature_names)
    self.label_names = tuple(self._decoder.label_names)
    self.binary_nominal = tuple(self._decoder.binary_nominal)
    self.one_hot = tuple(self._decoder.one_hot)
    self.dropped = self._dropped
    self.num_features = self._decoder.num_features
    self.num_labels = self._decoder.num_labels

  def _data_lines(self) -> Iterator[tuple[int, str]]:
    """(1-based line, stripped row) of each data row, streamed."""
    lines = stream_lines(self.path, self._encoding)
    try:
      for lineno, raw in enumerate(lines, 1):
        if lineno <= self._decoder.header.data_line:
          continue
        s = raw.strip()
        if s and s[0] != "%":
          yield lineno, s
    finally:
      lines.close()

  def count_rows(self) -> int:
    """The number of data rows, counted without decoding them.

    Raises:
      DataError: the file has no data rows.
    """
    n = sum(1 for _ in self._data_lines())
    if n == 0:
      raise DataError(self.path, self._decoder.header.data_line, "no data rows after @data")
    return n

  def rows(
    self, wanted: Callable[[int], bool] | None = None
  ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """One pass over the data rows: `(row index, x [D], y [L])`, float32, in file order.

    `x` and `y` are overwritten by the next row: copy what is kept.

    Args:
      wanted: `row index -> whether to decode it` (the rest are skipped unread, so
        their errors go unnoticed); None: every row.

    Raises:
      DataError: a malformed (decoded) row, or no data rows at all.
    """
    x = np.empty(self.num_features, np.float32)
    y = np.empty(self.num_labels, np.float32)
    index = -1
    for index, (lineno, s) in enumerate(self._data_lines()):
      if wanted is None or wanted(index):
        self._decoder.decode_row(s, lineno, x, y)
        yield index, x, y
    if index < 0:
      raise DataError(self.path, self._decoder.header.data_line, "no data rows after @data")

  def read(self, rows: Iterable[int] | None = None) -> MulanArff:
    """The file's `MulanArff` holding only `rows`; every row is decoded (and checked).

    Args:
      rows: increasing 0-based data-row indices (a `range`, e.g. a process's
        `batching.process_rows`, or an index array); None: all rows.

    Returns:
      `read_mulan(path, ...)` with `x` and `y` cut to `rows`: the same values, held
      without the other rows ever being in memory.

    Raises:
      ValueError: `rows` not increasing, or past the last row.
      DataError: a malformed row anywhere in the file.
    """
    if rows is None:
      xs, ys = [], []
      for _, x, y in self.rows():
        xs.append(x.copy())
        ys.append(y.copy())
      x = np.stack(xs) if xs else np.empty((0, self.num_features), np.float32)
      y = np.stack(ys) if ys else np.empty((0, self.num_labels), np.float32)
      return _result(self._decoder, x, y, self._dropped)
    keep = np.asarray(
      rows if isinstance(rows, (range, np.ndarray)) else list(rows), np.int64
    ).reshape(-1)
    if np.any(np.diff(keep) <= 0) or (keep.size and keep[0] < 0):
      raise ValueError(f"{self.path}: rows to keep must be increasing and non-negative")
    x = np.empty((keep.size, self.num_features), np.float32)
    y = np.empty((keep.size, self.num_labels), np.float32)
    k = 0
    num_rows = 0
    for index, xr, yr in self.rows():
      num_rows = index + 1
      if k < keep.size and keep[k] == index:
        x[k], y[k] = xr, yr
        k += 1
    if k < keep.size:
      raise ValueError(
        f"{self.path}: row {keep[k]} asked for, but the file has {num_rows} data rows"
      )
    return _result(self._decoder, x, y, self._dropped)


def record_encoding(meta: dict[str, Any], first: "MulanArff | MulanReader") -> None:
  """Writes how the MULAN attributes were encoded into a dataset's `meta`.

  Args:
    meta: the dataset's meta; its 'preprocessing' entry is started afresh.
    first: the dataset's first file (its files share the attributes).
  """
  positives = collections.Counter(value for _, value in first.binary_nominal)
  meta["preprocessing"] = {
    "dropped_attributes": list(first.dropped),
    # Summarized: bibtex alone has 1836 such attributes.
    "binary_nominal_indicator": {
      "num_attributes": len(first.binary_nominal),
      "value_encoded_as_1": dict(positives),
    },
    "one_hot": list(first.one_hot),
  }


def parse_mulan_arff(
  arff_path: PathLike,
  xml_path: PathLike | None = None,
  num_labels: int | None = None,
  drop_attributes: Sequence[str] = (),
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], tuple[str, ...]]:
  """Parses a MULAN ARFF file (dense and/or sparse rows).

  Features: numeric as is; two-valued nominal as one 0/1 indicator (1 for the value
  spelled 1/yes/true, case-insensitive, else for the second declared value); other
  nominal one-hot (`name=value` columns); a missing `?` feature becomes NaN (in all
  columns of a one-hot attribute). Labels are the attributes named in the MULAN
  `.xml` header (or the last `num_labels` attributes) and must be the last
  attributes; label columns keep the ARFF attribute order.

  Args:
    arff_path: the `.arff` file.
    xml_path: the MULAN label header; if None, `num_labels` is required.
    num_labels: expected number of labels (checked against the XML when both given).
    drop_attributes: names of feature attributes to leave out (e.g. an ID column).

  Returns:
    x: float32 [N, D]; y: float32 [N, L] in {0, 1}; feature_names [D]; label_names [L].

  Raises:
    DataError: on any missing, malformed or inconsistent input.
  """
  m = read_mulan(arff_path, xml_path, num_labels, drop_attributes)
  return m.x, m.y, m.feature_names, m.label_names

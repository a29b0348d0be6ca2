"""MULAN multi-label ARFF files (dense and sparse rows) and their XML label headers.

`parse_mulan_arff` / `read_mulan` turn a MULAN file into float32 feature and label
arrays; see `parse_mulan_arff` for the encoding (`record_encoding` writes it into a
dataset's `meta`). The reader is strict: a value that does not fit its attribute, a row
with the wrong number of fields, a sparse index out of range, a label that is not 0/1
or a missing `@data` section raises `DataError` naming the file, the line and the
problem. It never returns a silently wrong array.
"""

import collections
import dataclasses
import math
import pathlib
from typing import Any, Callable, Iterable, Iterator, Sequence
import xml.etree.ElementTree as ET

import numpy as np

from energynets.data.arff_syntax import ArffHeader
from energynets.data.arff_syntax import Attribute
from energynets.data.arff_syntax import data_lines
from energynets.data.arff_syntax import file_encoding
from energynets.data.arff_syntax import MISSING
from energynets.data.arff_syntax import parse_float
from energynets.data.arff_syntax import read_header
from energynets.data.arff_syntax import read_lines
from energynets.data.arff_syntax import split_fields
from energynets.data.arff_syntax import stream_lines
from energynets.data.arff_syntax import unescape
from energynets.data.arff_syntax import unique_names
from energynets.data.arff_syntax import unquote
from energynets.data.errors import DataError
from energynets.data.errors import PathLike

# Values of a two-valued nominal attribute read as "present" (compared lower-case).
_POSITIVE_VALUES = frozenset({"1", "yes", "true"})


def read_mulan_labels(xml_path: PathLike) -> tuple[str, ...]:
  """Label names, in document order, from a MULAN label header `<name>.xml`."""
  xml_path = pathlib.Path(xml_path)
  if not xml_path.is_file():
    raise DataError(xml_path, None, "file not found")
  try:
    root = ET.parse(xml_path).getroot()
  except ET.ParseError as e:
    raise DataError(xml_path, e.position[0], f"malformed XML: {e}") from None
  # Hierarchical MULAN headers nest <label> elements; every one is a label.
  names = [el.get("name") for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "label"]
  if not names or any(n is None for n in names):
    raise DataError(xml_path, None, "no <label name=...> elements (not a MULAN header)")
  if len(set(names)) != len(names):
    dup = next(n for n in names if names.count(n) > 1)
    raise DataError(xml_path, None, f"label {dup!r} listed twice")
  return tuple(names)


def _find_label_attributes(header: ArffHeader, label_names: Sequence[str],
                           xml_path: PathLike | None) -> list[int]:
  """Indices of the label attributes, checked to be the last L attributes."""
  index = {a.name: j for j, a in enumerate(header.attributes)}
  repeated = {a.name for j, a in enumerate(header.attributes) if index[a.name] != j}
  # The XML escapes differently from ARFF for odd names (e.g. TAG_m\'usica).
  loose = {unescape(a.name): j for j, a in enumerate(header.attributes)}
  num_attrs, num_labels = len(header.attributes), len(label_names)
  source = f"{xml_path}" if xml_path is not None else "num_labels"
  if num_labels >= num_attrs:
    raise DataError(header.path, header.data_line,
                    f"{num_labels} labels ({source}) but only {num_attrs} attributes")
  found = []
  for name in label_names:
    j = index.get(name, loose.get(unescape(name)))
    if j is None:
      raise DataError(header.path, header.data_line,
                      f"label {name!r} from {source} is not an attribute of this file "
                      f"(wrong label header or label count?)")
    if header.attributes[j].name in repeated:
      raise DataError(header.path, header.data_line,
                      f"label {name!r} is the name of several attributes")
    found.append(j)
  if len(set(found)) != len(found):
    raise DataError(header.path, header.data_line,
                    f"two labels from {source} name the same attribute")
  first = num_attrs - num_labels
  if sorted(found) != list(range(first, num_attrs)):
    j = min(found)
    attr = header.attributes[j]
    raise DataError(header.path, attr.line,
                    f"label {attr.name!r} is attribute #{j} but the {num_labels} labels "
                    f"({source}) must be the last attributes (#{first}..#{num_attrs - 1})")
  return sorted(found)


def _positive_index(attr: Attribute) -> int:
  for k, v in enumerate(attr.values):
    if v.lower() in _POSITIVE_VALUES:
      return k
  return 1


class _MulanDecoder:
  """Maps ARFF attributes to output columns and writes decoded values into rows."""

  _DROP, _NUMERIC, _INDICATOR, _ONEHOT, _LABEL = range(5)

  def __init__(self, header: ArffHeader, label_attrs: Sequence[int],
               drop: Sequence[str]):
    self.header = header
    self.path = header.path
    label_set = set(label_attrs)
    drop_set = set()
    for name in drop:
      matches = [j for j, a in enumerate(header.attributes) if a.name == name]
      if not matches:
        raise DataError(self.path, header.data_line,
                        f"attribute {name!r} to drop is not declared in this file")
      if label_set.intersection(matches):
        raise DataError(self.path, header.data_line, f"cannot drop label {name!r}")
      drop_set.update(matches)
    self.roles, self.cols, self.maps = [], [], []
    self.feature_names, self.label_names = [], []
    self.default_x, self.default_y = [], []
    self.binary_nominal, self.one_hot = [], []
    for j, attr in enumerate(header.attributes):
      if j in drop_set:
        self._add(self._DROP, -1, None)
      elif j in label_set:
        self._add_label(attr)
      elif attr.kind == "numeric":
        self._add(self._NUMERIC, len(self.feature_names), None)
        self.feature_names.append(attr.name)
        self.default_x.append(0.0)
      elif attr.kind == "nominal" and len(attr.values) == 2:
        pos = _positive_index(attr)
        self._add(self._INDICATOR, len(self.feature_names),
                  {v: float(k == pos) for k, v in enumerate(attr.values)})
        self.feature_names.append(attr.name)
        self.default_x.append(float(pos == 0))
        self.binary_nominal.append((attr.name, attr.values[pos]))
      elif attr.kind == "nominal":
        self._add(self._ONEHOT, len(self.feature_names),
                  {v: k for k, v in enumerate(attr.values)})
        self.feature_names.extend(f"{attr.name}={v}" for v in attr.values)
        self.default_x.extend([1.0] + [0.0] * (len(attr.values) - 1))
        self.one_hot.append(attr.name)
      else:
        raise DataError(self.path, attr.line,
                        f"feature attribute {attr.name!r} has type {attr.kind}, which has no "
                        f"numeric encoding; drop it (drop_attributes)")
    self.feature_names = list(unique_names(self.feature_names))
    self.num_features = len(self.feature_names)
    self.num_labels = len(self.label_names)
    self.default_x = np.asarray(self.default_x, np.float32)
    self.default_y = np.asarray(self.default_y, np.float32)

  def _add(self, role, col, mapping):
    self.roles.append(role)
    self.cols.append(col)
    self.maps.append(mapping)

  def _add_label(self, attr: Attribute):
    if attr.kind == "nominal":
      if not set(attr.values) <= {"0", "1"}:
        raise DataError(self.path, attr.line,
                        f"label {attr.name!r} must be declared {{0,1}}, got "
                        f"{{{','.join(attr.values)}}}")
      mapping = {v: float(v) for v in attr.values}
      default = float(attr.values[0])
    elif attr.kind == "numeric":
      mapping = {"0": 0.0, "1": 1.0, "0.0": 0.0, "1.0": 1.0}
      default = 0.0
    else:
      raise DataError(self.path, attr.line, f"label {attr.name!r} has type {attr.kind}")
    self._add(self._LABEL, len(self.label_names), mapping)
    self.label_names.append(attr.name)
    self.default_y.append(default)

  def put(self, j: int, token: str, xrow, yrow, line: int):
    """Decodes `token` of attribute j into xrow/yrow; '?' features become NaN.

    xrow/yrow are lists (dense rows) or dicts column -> value (sparse rows).
    """
    role = self.roles[j]
    if role == self._DROP:
      return
    token = token.strip()
    if token[:1] in ("'", '"'):
      token = unquote(token)
    col = self.cols[j]
    if role == self._LABEL:
      v = self.maps[j].get(token)
      if v is None:
        attr = self.header.attributes[j]
        raise DataError(self.path, line, f"label {attr.name!r} has value {token!r}; labels "
                        f"must be 0 or 1" + (" (missing labels are not allowed)"
                                             if token == MISSING else ""))
      yrow[col] = v
    elif token == MISSING:
      for m in range(1 if role != self._ONEHOT else len(self.maps[j])):
        xrow[col + m] = math.nan
    elif role == self._NUMERIC:
      xrow[col] = parse_float(token, self.path, line, self.header.attributes[j])
    else:
      v = self.maps[j].get(token)
      if v is None:
        attr = self.header.attributes[j]
        raise DataError(self.path, line, f"bad value {token!r} for nominal attribute "
                        f"{attr.name!r} (declared {{{','.join(attr.values[:10])}"
                        f"{',...' if len(attr.values) > 10 else ''}}})")
      if role == self._INDICATOR:
        xrow[col] = v
      else:
        for m in range(len(self.maps[j])):
          xrow[col + m] = float(m == v)

  def decode_row(self, s: str, lineno: int, x: np.ndarray, y: np.ndarray) -> None:
    """Decodes the data row `s` (stripped, dense or sparse) into `x [D]` and `y [L]`.

    Args:
      s: the row's text, stripped, not a comment.
      lineno: its 1-based line (named in errors).
      x: float32 [D], overwritten with the features.
      y: float32 [L], overwritten with the labels.

    Raises:
      DataError: a malformed row, naming the line.
    """
    path, num_attrs, put = self.path, len(self.header.attributes), self.put
    if s[0] == "{":
      if s[-1] != "}":
        raise DataError(path, lineno, "sparse row not closed by '}' (truncated line?)")
      # Only the given entries are decoded; the rest keep their default (an omitted
      # entry has internal value 0, see `arff_syntax`).
      xrow, yrow = {}, {}
      body = s[1:-1]
      seen = set()
      if body.strip():
        for entry in split_fields(body, path, lineno):
          parts = entry.strip().split(None, 1)
          if len(parts) != 2:
            raise DataError(path, lineno, f"malformed sparse entry {entry.strip()!r} "
                            f"(expected 'index value')")
          try:
            j = int(parts[0])
          except ValueError:
            raise DataError(path, lineno, f"bad sparse index {parts[0]!r}") from None
          if not 0 <= j < num_attrs:
            raise DataError(path, lineno, f"sparse index {j} out of range (file has "
                            f"{num_attrs} attributes, indices 0..{num_attrs - 1})")
          if j in seen:
            raise DataError(path, lineno, f"sparse index {j} given twice")
          seen.add(j)
          put(j, parts[1], xrow, yrow, lineno)
      x[:] = self.default_x
      y[:] = self.default_y
      if xrow:
        x[list(xrow)] = list(xrow.values())
      if yrow:
        y[list(yrow)] = list(yrow.values())
    else:
      fields = split_fields(s, path, lineno)
      if len(fields) != num_attrs:
        raise DataError(path, lineno, f"dense row has {len(fields)} fields, expected "
                        f"{num_attrs} (truncated or malformed line?)")
      xrow, yrow = [0.0] * self.num_features, [0.0] * self.num_labels
      for j, token in enumerate(fields):
        put(j, token, xrow, yrow, lineno)
      x[:] = xrow
      y[:] = yrow


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


def _decoder(arff_path: pathlib.Path, xml_path: PathLike | None, num_labels: int | None,
             drop_attributes: Sequence[str], lines: Iterable[str]) -> _MulanDecoder:
  """The decoder of a MULAN file from its header (read from `lines`) and label layout."""
  header = read_header(arff_path, lines)
  attrs = header.attributes
  if xml_path is not None:
    label_names = read_mulan_labels(xml_path)
    if num_labels is not None and len(label_names) != num_labels:
      raise DataError(xml_path, None, f"declares {len(label_names)} labels, expected "
                      f"{num_labels}")
  else:
    if not 0 < num_labels < len(attrs):
      raise DataError(arff_path, header.data_line, f"num_labels={num_labels} does not fit "
                      f"{len(attrs)} attributes")
    label_names = tuple(a.name for a in attrs[len(attrs) - num_labels:])
  return _MulanDecoder(header, _find_label_attributes(header, label_names, xml_path),
                       drop_attributes)


def _result(decoder: _MulanDecoder, x: np.ndarray, y: np.ndarray,
            drop_attributes: Sequence[str]) -> MulanArff:
  return MulanArff(path=decoder.path, x=x, y=y, feature_names=tuple(decoder.feature_names),
                   label_names=tuple(decoder.label_names),
                   binary_nominal=tuple(decoder.binary_nominal),
                   one_hot=tuple(decoder.one_hot), dropped=tuple(drop_attributes))


def read_mulan(arff_path: PathLike, xml_path: PathLike | None = None,
               num_labels: int | None = None, drop_attributes: Sequence[str] = (),
               rows: Iterable[int] | None = None) -> MulanArff:
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
  decoder = _decoder(arff_path, xml_path, num_labels, drop_attributes, lines)
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

  def __init__(self, arff_path: PathLike, xml_path: PathLike | None = None,
               num_labels: int | None = None, drop_attributes: Sequence[str] = ()):
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
      self._decoder = _decoder(self.path, xml_path, num_labels, drop_attributes, lines)
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

  def rows(self, wanted: Callable[[int], bool] | None = None
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
    keep = np.asarray(rows if isinstance(rows, (range, np.ndarray)) else list(rows),
                      np.int64).reshape(-1)
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
      raise ValueError(f"{self.path}: row {keep[k]} asked for, but the file has "
                       f"{num_rows} data rows")
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
      "binary_nominal_indicator": {"num_attributes": len(first.binary_nominal),
                                   "value_encoded_as_1": dict(positives)},
      "one_hot": list(first.one_hot),
  }


def parse_mulan_arff(arff_path: PathLike, xml_path: PathLike | None = None,
                     num_labels: int | None = None, drop_attributes: Sequence[str] = ()
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

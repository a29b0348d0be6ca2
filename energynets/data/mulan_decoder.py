"""Decoding MULAN attributes: which ARFF attributes are the labels and how each value
becomes float32 feature and label columns.

`read_mulan_labels` reads the label names of a MULAN `.xml` header; `mulan_decoder`
checks that they are the file's last attributes and returns the `MulanDecoder` that
turns one data row (dense or sparse) into its feature and label vectors. The encoding is
documented in `mulan.parse_mulan_arff`.
"""

from collections.abc import Iterable
from collections.abc import Sequence
import math
import pathlib
import xml.etree.ElementTree as ET

import numpy as np

from energynets.data.arff_syntax import MISSING
from energynets.data.arff_syntax import ArffHeader
from energynets.data.arff_syntax import Attribute
from energynets.data.arff_syntax import parse_float
from energynets.data.arff_syntax import read_header
from energynets.data.arff_syntax import split_fields
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
  found = [el.get("name") for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "label"]
  if not found or any(n is None for n in found):
    raise DataError(xml_path, None, "no <label name=...> elements (not a MULAN header)")
  names = [n for n in found if n is not None]
  if len(set(names)) != len(names):
    dup = next(n for n in names if names.count(n) > 1)
    raise DataError(xml_path, None, f"label {dup!r} listed twice")
  return tuple(names)


def _find_label_attributes(
  header: ArffHeader, label_names: Sequence[str], xml_path: PathLike | None
) -> list[int]:
  """Indices of the label attributes, checked to be the last L attributes."""
  index = {a.name: j for j, a in enumerate(header.attributes)}
  repeated = {a.name for j, a in enumerate(header.attributes) if index[a.name] != j}
  # The XML escapes differently from ARFF for odd names (e.g. TAG_m\'usica).
  loose = {unescape(a.name): j for j, a in enumerate(header.attributes)}
  num_attrs, num_labels = len(header.attributes), len(label_names)
  source = f"{xml_path}" if xml_path is not None else "num_labels"
  if num_labels >= num_attrs:
    raise DataError(
      header.path,
      header.data_line,
      f"{num_labels} labels ({source}) but only {num_attrs} attributes",
    )
  found = []
  for name in label_names:
    j = index.get(name, loose.get(unescape(name)))
    if j is None:
      raise DataError(
        header.path,
        header.data_line,
        f"label {name!r} from {source} is not an attribute of this file "
        f"(wrong label header or label count?)",
      )
    if header.attributes[j].name in repeated:
      raise DataError(
        header.path, header.data_line, f"label {name!r} is the name of several attributes"
      )
    found.append(j)
  if len(set(found)) != len(found):
    raise DataError(
      header.path, header.data_line, f"two labels from {source} name the same attribute"
    )
  first = num_attrs - num_labels
  if sorted(found) != list(range(first, num_attrs)):
    j = min(found)
    attr = header.attributes[j]
    raise DataError(
      header.path,
      attr.line,
      f"label {attr.name!r} is attribute #{j} but the {num_labels} labels "
      f"({source}) must be the last attributes (#{first}..#{num_attrs - 1})",
    )
  return sorted(found)


def _positive_index(attr: Attribute) -> int:
  for k, v in enumerate(attr.values):
    if v.lower() in _POSITIVE_VALUES:
      return k
  return 1


class MulanDecoder:
  """Maps ARFF attributes to output columns and writes decoded values into rows."""

  _DROP, _NUMERIC, _INDICATOR, _ONEHOT, _LABEL = range(5)

  def __init__(self, header: ArffHeader, label_attrs: Sequence[int], drop: Sequence[str]):
    self.header = header
    self.path = header.path
    label_set = set(label_attrs)
    drop_set = set()
    for name in drop:
      matches = [j for j, a in enumerate(header.attributes) if a.name == name]
      if not matches:
        raise DataError(
          self.path, header.data_line, f"attribute {name!r} to drop is not declared in this file"
        )
      if label_set.intersection(matches):
        raise DataError(self.path, header.data_line, f"cannot drop label {name!r}")
      drop_set.update(matches)
    self.roles: list[int] = []
    self.cols: list[int] = []
    # Token -> value of each label and nominal attribute (empty for the others).
    self.maps: list[dict[str, float]] = []
    self.feature_names: list[str] = []
    self.label_names: list[str] = []
    default_x: list[float] = []
    default_y: list[float] = []
    self.binary_nominal: list[tuple[str, str]] = []
    self.one_hot: list[str] = []
    for j, attr in enumerate(header.attributes):
      if j in drop_set:
        self._add(self._DROP, -1, {})
      elif j in label_set:
        default_y.append(self._add_label(attr))
      elif attr.kind == "numeric":
        self._add(self._NUMERIC, len(self.feature_names), {})
        self.feature_names.append(attr.name)
        default_x.append(0.0)
      elif attr.kind == "nominal" and len(attr.values) == 2:
        pos = _positive_index(attr)
        self._add(
          self._INDICATOR,
          len(self.feature_names),
          {v: float(k == pos) for k, v in enumerate(attr.values)},
        )
        self.feature_names.append(attr.name)
        default_x.append(float(pos == 0))
        self.binary_nominal.append((attr.name, attr.values[pos]))
      elif attr.kind == "nominal":
        self._add(self._ONEHOT, len(self.feature_names), {v: k for k, v in enumerate(attr.values)})
        self.feature_names.extend(f"{attr.name}={v}" for v in attr.values)
        default_x.extend([1.0] + [0.0] * (len(attr.values) - 1))
        self.one_hot.append(attr.name)
      else:
        raise DataError(
          self.path,
          attr.line,
          f"feature attribute {attr.name!r} has type {attr.kind}, which has no "
          f"numeric encoding; drop it (drop_attributes)",
        )
    self.feature_names = list(unique_names(self.feature_names))
    self.num_features = len(self.feature_names)
    self.num_labels = len(self.label_names)
    self.default_x = np.asarray(default_x, np.float32)
    self.default_y = np.asarray(default_y, np.float32)

  def _add(self, role: int, col: int, mapping: dict[str, float]) -> None:
    self.roles.append(role)
    self.cols.append(col)
    self.maps.append(mapping)

  def _add_label(self, attr: Attribute) -> float:
    """Adds the label attribute `attr`; returns the value of a row that omits it."""
    if attr.kind == "nominal":
      if not set(attr.values) <= {"0", "1"}:
        raise DataError(
          self.path,
          attr.line,
          f"label {attr.name!r} must be declared {{0,1}}, got {{{','.join(attr.values)}}}",
        )
      mapping = {v: float(v) for v in attr.values}
      default = float(attr.values[0])
    elif attr.kind == "numeric":
      mapping = {"0": 0.0, "1": 1.0, "0.0": 0.0, "1.0": 1.0}
      default = 0.0
    else:
      raise DataError(self.path, attr.line, f"label {attr.name!r} has type {attr.kind}")
    self._add(self._LABEL, len(self.label_names), mapping)
    self.label_names.append(attr.name)
    return default

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
        raise DataError(
          self.path,
          line,
          f"label {attr.name!r} has value {token!r}; labels "
          f"must be 0 or 1" + (" (missing labels are not allowed)" if token == MISSING else ""),
        )
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
        raise DataError(
          self.path,
          line,
          f"bad value {token!r} for nominal attribute "
          f"{attr.name!r} (declared {{{','.join(attr.values[:10])}"
          f"{',...' if len(attr.values) > 10 else ''}}})",
        )
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
      xrow: dict[int, float] = {}
      yrow: dict[int, float] = {}
      body = s[1:-1]
      seen: set[int] = set()
      if body.strip():
        for entry in split_fields(body, path, lineno):
          parts = entry.strip().split(None, 1)
          if len(parts) != 2:
            raise DataError(
              path, lineno, f"malformed sparse entry {entry.strip()!r} (expected 'index value')"
            )
          try:
            j = int(parts[0])
          except ValueError:
            raise DataError(path, lineno, f"bad sparse index {parts[0]!r}") from None
          if not 0 <= j < num_attrs:
            raise DataError(
              path,
              lineno,
              f"sparse index {j} out of range (file has "
              f"{num_attrs} attributes, indices 0..{num_attrs - 1})",
            )
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
        raise DataError(
          path,
          lineno,
          f"dense row has {len(fields)} fields, expected "
          f"{num_attrs} (truncated or malformed line?)",
        )
      dense_x, dense_y = [0.0] * self.num_features, [0.0] * self.num_labels
      for j, token in enumerate(fields):
        put(j, token, dense_x, dense_y, lineno)
      x[:] = dense_x
      y[:] = dense_y


def mulan_decoder(
  arff_path: pathlib.Path,
  xml_path: PathLike | None,
  num_labels: int | None,
  drop_attributes: Sequence[str],
  lines: Iterable[str],
) -> MulanDecoder:
  """The decoder of a MULAN file from its header (read from `lines`) and label layout."""
  header = read_header(arff_path, lines)
  attrs = header.attributes
  if xml_path is not None:
    label_names = read_mulan_labels(xml_path)
    if num_labels is not None and len(label_names) != num_labels:
      raise DataError(xml_path, None, f"declares {len(label_names)} labels, expected {num_labels}")
  else:
    assert num_labels is not None, "the readers require xml_path or num_labels"
    if not 0 < num_labels < len(attrs):
      raise DataError(
        arff_path, header.data_line, f"num_labels={num_labels} does not fit {len(attrs)} attributes"
      )
    label_names = tuple(a.name for a in attrs[len(attrs) - num_labels :])
  return MulanDecoder(
    header, _find_label_attributes(header, label_names, xml_path), drop_attributes
  )

"""ARFF parsers: MULAN multi-label files (dense and sparse) and CLUS hierarchical files.

Both parsers are strict: a value that does not fit its attribute, a row with the
wrong number of fields, a sparse index out of range, a label that is not 0/1 or a
missing `@data` section raises `DataError` naming the file, the line and the
problem. They never return a silently wrong array.

ARFF conventions followed (Weka's): a line starting with `%` is a comment (a `%`
inside a line is data: CLUS attribute names contain it); keywords are
case-insensitive; names and values may be quoted with ' or " (backslash escapes);
`?` is a missing value; sparse rows `{index value, ...}` use 0-based attribute
indices and an omitted entry has internal value 0, i.e. 0 for a numeric attribute
and the *first declared value* of a nominal one.
"""

import dataclasses
import math
import os
import pathlib
import re
from typing import Iterator, Sequence
import xml.etree.ElementTree as ET

import numpy as np

from energynets.data import splits

PathLike = str | os.PathLike

MISSING = "?"

# Values of a two-valued nominal attribute read as "present" (compared lower-case).
_POSITIVE_VALUES = frozenset({"1", "yes", "true"})

_NUMERIC_TYPES = frozenset({"numeric", "real", "integer"})


class DataError(ValueError):
  """A missing, malformed or inconsistent data file.

  Attributes:
    path: the file (or directory) at fault.
    line: 1-based line number, or None when the problem is not on one line.
    problem: what is wrong.
  """

  def __init__(self, path: PathLike | None, line: int | None, problem: str):
    self.path = None if path is None else str(path)
    self.line = line
    self.problem = problem
    where = self.path if self.path is not None else "<no file>"
    if line is not None:
      where += f", line {line}"
    super().__init__(f"{where}: {problem}")


@dataclasses.dataclass(frozen=True)
class Attribute:
  """One `@attribute` declaration.

  Attributes:
    name: the attribute name, unquoted.
    kind: 'numeric', 'nominal', 'string', 'date' or 'hierarchical' (CLUS).
    values: declared nominal values, or hierarchy nodes for 'hierarchical'.
    line: 1-based line of the declaration.
  """
  name: str
  kind: str
  values: tuple[str, ...] = ()
  line: int = 0

  def same_type(self, other: "Attribute") -> bool:
    return (self.name, self.kind, self.values) == (other.name, other.kind, other.values)


@dataclasses.dataclass(frozen=True)
class ArffHeader:
  """The header of an ARFF file; `data_line` is the 1-based line of `@data`."""
  path: str
  relation: str
  attributes: tuple[Attribute, ...]
  data_line: int


# --------------------------------------------------------------------------- tokens


def _unescape(s: str) -> str:
  return re.sub(r"\\(.)", r"\1", s) if "\\" in s else s


def _unquote(token: str) -> str:
  token = token.strip()
  if len(token) >= 2 and token[0] in "'\"" and token[-1] == token[0]:
    return _unescape(token[1:-1])
  return token


def _split_top(s: str, path: str, line: int) -> list[str]:
  """Splits on commas outside quotes; pieces keep their quotes (see `_unquote`)."""
  if "'" not in s and '"' not in s:
    return s.split(",")
  pieces, buf, quote, i = [], [], None, 0
  while i < len(s):
    c = s[i]
    if quote is not None:
      buf.append(c)
      if c == "\\" and i + 1 < len(s):
        buf.append(s[i + 1])
        i += 1
      elif c == quote:
        quote = None
    elif c in "'\"":
      quote = c
      buf.append(c)
    elif c == ",":
      pieces.append("".join(buf))
      buf = []
    else:
      buf.append(c)
    i += 1
  if quote is not None:
    raise DataError(path, line, f"unterminated quoted value in {s[:60]!r}")
  pieces.append("".join(buf))
  return pieces


def _read_name(s: str, path: str, line: int) -> tuple[str, str]:
  """(first name token, rest); the token may be quoted."""
  s = s.lstrip()
  if not s:
    raise DataError(path, line, "missing attribute name")
  quote = s[0]
  if quote in "'\"":
    i = 1
    while i < len(s):
      if s[i] == "\\":
        i += 2
        continue
      if s[i] == quote:
        return _unescape(s[1:i]), s[i + 1:]
      i += 1
    raise DataError(path, line, f"unterminated quoted name {s[:60]!r}")
  parts = s.split(None, 1)
  return parts[0], (parts[1] if len(parts) > 1 else "")


def _read_text(path: pathlib.Path) -> list[str]:
  if not path.is_file():
    raise DataError(path, None, "file not found")
  raw = path.read_bytes()
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError:
    # Old Weka/MULAN files are often Latin-1; every byte decodes, nothing is lost.
    text = raw.decode("latin-1")
  if text.startswith("\ufeff"):
    text = text[1:]
  return text.split("\n")


def _parse_attribute(rest: str, path: str, line: int) -> Attribute:
  name, type_text = _read_name(rest, path, line)
  type_text = type_text.strip()
  if not type_text:
    raise DataError(path, line, f"attribute {name!r} has no type")
  if type_text.startswith("{"):
    if not type_text.endswith("}"):
      raise DataError(path, line, f"attribute {name!r}: unterminated nominal value list")
    values = tuple(_unquote(v) for v in _split_top(type_text[1:-1], path, line))
    if any(not v for v in values) or len(set(values)) != len(values):
      raise DataError(path, line, f"attribute {name!r}: empty or repeated nominal value "
                      f"in {type_text[:80]!r}")
    return Attribute(name, "nominal", values, line)
  word = type_text.split()[0].lower()
  if word in _NUMERIC_TYPES:
    return Attribute(name, "numeric", (), line)
  if word in ("string", "date"):
    return Attribute(name, word, (), line)
  if word == "hierarchical":
    nodes = tuple(n.strip() for n in type_text[len("hierarchical"):].split(","))
    if not nodes or any(not n for n in nodes):
      raise DataError(path, line, f"attribute {name!r}: empty hierarchy node list")
    return Attribute(name, "hierarchical", nodes, line)
  raise DataError(path, line, f"attribute {name!r}: unsupported type {type_text[:40]!r}")


def read_header(path: PathLike, lines: Sequence[str] | None = None) -> ArffHeader:
  """Parses everything up to and including `@data`."""
  path = pathlib.Path(path)
  if lines is None:
    lines = _read_text(path)
  relation, attributes = None, []
  for i, raw in enumerate(lines):
    s = raw.strip()
    if not s or s[0] == "%":
      continue
    lineno = i + 1
    parts = s.split(None, 1)
    keyword, rest = parts[0].lower(), (parts[1] if len(parts) > 1 else "")
    if keyword == "@relation":
      relation = _read_name(rest, str(path), lineno)[0] if rest.strip() else ""
    elif keyword == "@attribute":
      attributes.append(_parse_attribute(rest, str(path), lineno))
    elif keyword == "@data":
      if not attributes:
        raise DataError(path, lineno, "@data before any @attribute")
      # Repeated names are kept (expr_FUN repeats one); see `unique_names`.
      return ArffHeader(str(path), relation or "", tuple(attributes), lineno)
    else:
      raise DataError(path, lineno, f"expected @relation, @attribute or @data, got "
                      f"{s[:60]!r}")
  last_line = len(lines) - (1 if lines and not lines[-1] else 0)
  raise DataError(path, last_line, "no @data section (file truncated or not ARFF)")


def unique_names(names: Sequence[str]) -> tuple[str, ...]:
  """Names with repeats made distinct: the k-th occurrence (k >= 2) gets `#k`."""
  seen: dict[str, int] = {}
  out = []
  for name in names:
    seen[name] = seen.get(name, 0) + 1
    out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
  return tuple(out)


def _data_lines(lines: Sequence[str], header: ArffHeader) -> Iterator[tuple[int, str]]:
  """(1-based line number, stripped row) for each data row."""
  for i in range(header.data_line, len(lines)):
    s = lines[i].strip()
    if s and s[0] != "%":
      yield i + 1, s


def _parse_float(token: str, path: str, line: int, attr: Attribute) -> float:
  try:
    v = float(token)
  except ValueError:
    v = math.nan
  if not math.isfinite(v):
    raise DataError(path, line, f"bad value {token!r} for numeric attribute {attr.name!r}")
  return v


def _parse_numeric_fields(tokens: Sequence[str], attrs: Sequence[Attribute], path: str,
                          line: int) -> list[float]:
  """Floats of `tokens`, NaN for '?'; anything else non-finite is an error."""
  try:
    values = [math.nan if t == MISSING else float(t) for t in tokens]
  except ValueError:
    values = None
  # float() also accepts 'nan'/'inf', which would masquerade as missing or overflow.
  if values is None or not all(math.isfinite(v) or t == MISSING
                               for v, t in zip(values, tokens)):
    for t, a in zip(tokens, attrs):
      if t != MISSING:
        _parse_float(t, path, line, a)
  return values


# --------------------------------------------------------------------------- MULAN


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
  loose = {_unescape(a.name): j for j, a in enumerate(header.attributes)}
  num_attrs, num_labels = len(header.attributes), len(label_names)
  source = f"{xml_path}" if xml_path is not None else "num_labels"
  if num_labels >= num_attrs:
    raise DataError(header.path, header.data_line,
                    f"{num_labels} labels ({source}) but only {num_attrs} attributes")
  found = []
  for name in label_names:
    j = index.get(name, loose.get(_unescape(name)))
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
      token = _unquote(token)
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
      xrow[col] = _parse_float(token, self.path, line, self.header.attributes[j])
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


def read_mulan(arff_path: PathLike, xml_path: PathLike | None = None,
               num_labels: int | None = None, drop_attributes: Sequence[str] = ()
               ) -> MulanArff:
  """`parse_mulan_arff` plus the encoding notes; see there."""
  arff_path = pathlib.Path(arff_path)
  if xml_path is None and num_labels is None:
    raise ValueError("parse_mulan_arff needs xml_path or num_labels to know the labels")
  lines = _read_text(arff_path)
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
  decoder = _MulanDecoder(header, _find_label_attributes(header, label_names, xml_path),
                          drop_attributes)
  num_attrs = len(attrs)
  capacity = len(lines) - header.data_line
  x = np.empty((capacity, decoder.num_features), np.float32)
  y = np.empty((capacity, decoder.num_labels), np.float32)
  default_x = np.asarray(decoder.default_x, np.float32)
  default_y = np.asarray(decoder.default_y, np.float32)
  path = str(arff_path)
  n = 0
  put = decoder.put
  for lineno, s in _data_lines(lines, header):
    if s[0] == "{":
      if s[-1] != "}":
        raise DataError(path, lineno, "sparse row not closed by '}' (truncated line?)")
      # Only the given entries are decoded; the rest keep their default (see module doc).
      xrow, yrow = {}, {}
      body = s[1:-1]
      seen = set()
      if body.strip():
        for entry in _split_top(body, path, lineno):
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
      x[n] = default_x
      y[n] = default_y
      if xrow:
        x[n, list(xrow)] = list(xrow.values())
      if yrow:
        y[n, list(yrow)] = list(yrow.values())
    else:
      fields = _split_top(s, path, lineno)
      if len(fields) != num_attrs:
        raise DataError(path, lineno, f"dense row has {len(fields)} fields, expected "
                        f"{num_attrs} (truncated or malformed line?)")
      xrow, yrow = [0.0] * decoder.num_features, [0.0] * decoder.num_labels
      for j, token in enumerate(fields):
        put(j, token, xrow, yrow, lineno)
      x[n] = xrow
      y[n] = yrow
    n += 1
  if n == 0:
    raise DataError(path, header.data_line, "no data rows after @data")
  return MulanArff(path=path, x=x[:n], y=y[:n], feature_names=tuple(decoder.feature_names),
                   label_names=tuple(decoder.label_names),
                   binary_nominal=tuple(decoder.binary_nominal),
                   one_hot=tuple(decoder.one_hot), dropped=tuple(drop_attributes))


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


# --------------------------------------------------------------------------- CLUS


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
  lines = _read_text(path)
  header = read_header(path, lines)
  spath = str(path)
  hier = [j for j, a in enumerate(header.attributes) if a.kind == "hierarchical"]
  if len(hier) != 1:
    raise DataError(path, header.data_line, f"expected one 'hierarchical' class "
                    f"attribute, found {len(hier)}")
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
      raise DataError(path, class_attr.line, f"hierarchy node {node!r} is declared but "
                      f"its ancestor {missing[0]!r} is not")
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
  for lineno, s in _data_lines(lines, header):
    if s[0] == "{":
      raise DataError(path, lineno, "sparse rows are not supported in CLUS files")
    fields = _split_top(s, spath, lineno)
    if len(fields) != num_attrs:
      raise DataError(path, lineno, f"row has {len(fields)} fields, expected {num_attrs} "
                      f"(truncated or malformed line?)")
    fields = [_unquote(f) for f in fields]
    num_values[n] = _parse_numeric_fields([fields[j] for j in numeric],
                                          [header.attributes[j] for j in numeric],
                                          spath, lineno)
    row_codes = []
    for j in nominal:
      token = fields[j]
      code = -1 if token == MISSING else codes[j].get(token)
      if code is None:
        raise DataError(path, lineno, f"bad value {token!r} for nominal attribute "
                        f"{header.attributes[j].name!r}")
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
  columns = {}
  for k, j in enumerate(numeric):
    columns[j] = num_values[:n, k].copy()
  for k, j in enumerate(nominal):
    columns[j] = nom_values[:n, k].copy()
  return ClusArff(path=spath, attributes=tuple(a for _, a in features),
                  columns=tuple(columns[j] for j, _ in features), label_nodes=nodes,
                  label_paths=tuple(all_paths), y=y[:n])


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
      raise DataError(data.path, None, f"{len(data.attributes)} feature attributes, the "
                      f"train file has {len(self.attributes)}")
    for a, b in zip(data.attributes, self.attributes):
      if not a.same_type(b):
        raise DataError(data.path, a.line, f"attribute {a.name!r} differs from the train "
                        f"file's declaration of {b.name!r}")
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


def fit_clus_preprocessor(train: ClusArff, *, standardize: bool = True
                          ) -> ClusPreprocessor:
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
  return int(sum(np.sum(np.isnan(c)) if c.dtype.kind == "f" else np.sum(c < 0)
                 for c in data.columns))

"""ARFF syntax shared by the MULAN and CLUS readers: file text, header, row tokens.

The readers built on it are strict: a value that does not fit its attribute, a row with
the wrong number of fields or a missing `@data` section raises `DataError` naming the
file, the line and the problem.

ARFF conventions followed (Weka's): a line starting with `%` is a comment (a `%`
inside a line is data: CLUS attribute names contain it); keywords are
case-insensitive; names and values may be quoted with ' or " (backslash escapes);
`?` is a missing value; sparse rows `{index value, ...}` use 0-based attribute
indices and an omitted entry has internal value 0, i.e. 0 for a numeric attribute
and the *first declared value* of a nominal one.
"""

import codecs
from collections.abc import Generator
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
import dataclasses
import math
import pathlib
import re

from energynets.data.errors import DataError
from energynets.data.errors import PathLike

MISSING = "?"

_NUMERIC_TYPES = frozenset({"numeric", "real", "integer"})


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


def unescape(s: str) -> str:
  """`s` with each backslash escape replaced by the escaped character."""
  return re.sub(r"\\(.)", r"\1", s) if "\\" in s else s


def unquote(token: str) -> str:
  """`token` stripped; unquoted and unescaped if it is in single or double quotes."""
  token = token.strip()
  if len(token) >= 2 and token[0] in "'\"" and token[-1] == token[0]:
    return unescape(token[1:-1])
  return token


def split_fields(s: str, path: str, line: int) -> list[str]:
  """Splits on commas outside quotes; pieces keep their quotes (see `unquote`)."""
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
        return unescape(s[1:i]), s[i + 1 :]
      i += 1
    raise DataError(path, line, f"unterminated quoted name {s[:60]!r}")
  parts = s.split(None, 1)
  return parts[0], (parts[1] if len(parts) > 1 else "")


def read_lines(path: pathlib.Path) -> list[str]:
  """The lines of an ARFF file (UTF-8, else Latin-1), without a byte-order mark."""
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


def file_encoding(path: PathLike) -> str:
  """'utf-8' if the whole file decodes as UTF-8, else 'latin-1' (as `read_lines`); read
  in chunks."""
  path = pathlib.Path(path)
  decoder = codecs.getincrementaldecoder("utf-8")()
  with path.open("rb") as f:
    try:
      while chunk := f.read(1 << 16):
        decoder.decode(chunk)
      decoder.decode(b"", final=True)
    except UnicodeDecodeError:
      return "latin-1"
  return "utf-8"


def stream_lines(path: PathLike, encoding: str | None = None) -> Generator[str, None, None]:
  """The lines of `read_lines(path)`, one at a time: memory for a line, not the file.

  Args:
    path: the ARFF file.
    encoding: its `file_encoding`, if known; None: found by a first pass over the bytes.

  Returns:
    An iterator over the same strings, in order, as `read_lines(path)` returns.

  Raises:
    DataError: the file does not exist.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise DataError(path, None, "file not found")
  return _stream_lines(path, encoding or file_encoding(path))


def _stream_lines(path: pathlib.Path, encoding: str) -> Generator[str, None, None]:
  with path.open("rb") as f:
    line = ""
    for k, raw in enumerate(f):  # binary lines end at b"\n" only, as `str.split("\n")`
      line = raw.decode(encoding)
      if k == 0 and line.startswith("\ufeff"):
        line = line[1:]
      if line.endswith("\n"):
        line = line[:-1]
        yield line
        line = ""
      else:
        break
    # What `split("\n")` leaves after the last newline (an empty file: one "").
    yield line


def _parse_attribute(rest: str, path: str, line: int) -> Attribute:
  name, type_text = _read_name(rest, path, line)
  type_text = type_text.strip()
  if not type_text:
    raise DataError(path, line, f"attribute {name!r} has no type")
  if type_text.startswith("{"):
    if not type_text.endswith("}"):
      raise DataError(path, line, f"attribute {name!r}: unterminated nominal value list")
    values = tuple(unquote(v) for v in split_fields(type_text[1:-1], path, line))
    if any(not v for v in values) or len(set(values)) != len(values):
      raise DataError(
        path, line, f"attribute {name!r}: empty or repeated nominal value in {type_text[:80]!r}"
      )
    return Attribute(name, "nominal", values, line)
  word = type_text.split()[0].lower()
  if word in _NUMERIC_TYPES:
    return Attribute(name, "numeric", (), line)
  if word in ("string", "date"):
    return Attribute(name, word, (), line)
  if word == "hierarchical":
    nodes = tuple(n.strip() for n in type_text[len("hierarchical") :].split(","))
    if not nodes or any(not n for n in nodes):
      raise DataError(path, line, f"attribute {name!r}: empty hierarchy node list")
    return Attribute(name, "hierarchical", nodes, line)
  raise DataError(path, line, f"attribute {name!r}: unsupported type {type_text[:40]!r}")


def read_header(path: PathLike, lines: Iterable[str] | None = None) -> ArffHeader:
  """Parses everything up to and including `@data`.

  Args:
    path: the ARFF file (named in errors).
    lines: its lines (`read_lines`), or an iterator over them (`stream_lines`), which
      is then consumed up to the `@data` line only; None: read from `path`.

  Returns:
    The header.

  Raises:
    DataError: a malformed header, or no `@data` line.
  """
  path = pathlib.Path(path)
  if lines is None:
    lines = read_lines(path)
  relation, attributes = None, []
  count, last = 0, None
  for i, raw in enumerate(lines):
    count, last = i + 1, raw
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
      raise DataError(path, lineno, f"expected @relation, @attribute or @data, got {s[:60]!r}")
  last_line = count - (1 if count and not last else 0)
  raise DataError(path, last_line, "no @data section (file truncated or not ARFF)")


def unique_names(names: Sequence[str]) -> tuple[str, ...]:
  """Names with repeats made distinct: the k-th occurrence (k >= 2) gets `#k`."""
  seen: dict[str, int] = {}
  out = []
  for name in names:
    seen[name] = seen.get(name, 0) + 1
    out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
  return tuple(out)


def data_lines(lines: Sequence[str], header: ArffHeader) -> Iterator[tuple[int, str]]:
  """(1-based line number, stripped row) for each data row."""
  for i in range(header.data_line, len(lines)):
    s = lines[i].strip()
    if s and s[0] != "%":
      yield i + 1, s


def parse_float(token: str, path: str, line: int, attr: Attribute) -> float:
  """The finite float `token` of numeric attribute `attr`; anything else is a DataError."""
  try:
    v = float(token)
  except ValueError:
    v = math.nan
  if not math.isfinite(v):
    raise DataError(path, line, f"bad value {token!r} for numeric attribute {attr.name!r}")
  return v


def parse_numeric_fields(
  tokens: Sequence[str], attrs: Sequence[Attribute], path: str, line: int
) -> list[float]:
  """Floats of `tokens`, NaN for '?'; anything else non-finite is an error."""
  values: list[float] | None
  try:
    values = [math.nan if t == MISSING else float(t) for t in tokens]
  except ValueError:
    values = None
  # float() also accepts 'nan'/'inf', which would masquerade as missing or overflow.
  if values is None or not all(math.isfinite(v) or t == MISSING for v, t in zip(values, tokens)):
    for t, a in zip(tokens, attrs):
      if t != MISSING:
        parse_float(t, path, line, a)
  assert values is not None, "parse_float raises on the token float() refuses"
  return values

"""Row and column specs of experiments.compare (`name:key=value[:key=value]`) and the run
directories they name; no JAX and no flags, so report scripts import them too."""

import hashlib

MAX_RUN_NAME = 200


def rejoin_tuples(items: list[str]) -> list[str]:
  """Undo the list flag's split at commas inside parentheses or brackets:
  `['mlp:model.hidden=(500', '500)', 'br']` -> `['mlp:model.hidden=(500,500)', 'br']`."""
  joined: list[str] = []
  depth = 0
  for item in items:
    if depth:
      joined[-1] += "," + item
    else:
      joined.append(item)
    depth += sum(item.count(c) for c in "([") - sum(item.count(c) for c in ")]")
  if depth:
    raise ValueError(f"unbalanced brackets in {','.join(items)!r}")
  return joined


def parse_spec(spec: str) -> tuple[str, list[str]]:
  """A method or dataset `'name:key=value:key=value'` -> (name, its own overrides).

  A value may itself hold a colon, as an import path does
  (`mlp:method=my_pkg.builders:build`): a part without `=` continues the value before it.
  """
  name, *parts = spec.split(":")
  overrides, bad = [], []
  for part in parts:
    if "=" in part:
      overrides.append(part)
    elif overrides:
      overrides[-1] += ":" + part
    else:
      bad.append(part)
  if not name or bad:
    raise ValueError(f"bad method or dataset {spec!r}: expected name[:key=value[:key=value]]")
  return name, overrides


def run_name(spec: str) -> str:
  """The directory name of a spec (`seal_dynamic:seal.objective=nce` ->
  `seal_dynamic__seal.objective-nce`).

  A name longer than `MAX_RUN_NAME` characters (file systems allow 255 bytes) keeps its
  first `MAX_RUN_NAME - 14` and ends in `__` and 12 hex digits of the spec's SHA-1, so
  that it stays unique and the same on every machine.
  """
  name = spec.replace(":", "__").replace("=", "-")
  if len(name) <= MAX_RUN_NAME:
    return name
  digest = hashlib.sha1(spec.encode()).hexdigest()[:12]
  return f"{name[: MAX_RUN_NAME - 14]}__{digest}"

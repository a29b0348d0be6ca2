"""What each layer may use of the others, read from the source.

- The model code does not depend on the data loaders: networks, energies, objectives,
  inference, differentiation and domains read what they need of a batch's format from
  `energynets.tokens`; an import of `energynets.data` from them (parsed from the source,
  so a lazy import inside a function counts too) fails.
- The experiments use only public names of the library: every `from energynets.x import y`
  and every `energynets.x.y` (through any alias of a module) in `experiments/` names a `y`
  listed in the `__all__` of `energynets.x`.
- The notebooks use only the public API: a name reached from `energynets` is in the
  `__all__` of `energynets` or of a subpackage it lists, never in a module below them.
- The benchmarks and the tests import no private (underscore) name of `experiments`, and
  patch none by string (`monkeypatch.setattr(module, "_name", ...)`).

Uses are parsed with `ast`: imports anywhere in a file, and attribute chains from a name
bound to a module of the package (`import energynets as en`, `from energynets.train import
storage`). A module's `__all__` is read from its source (a literal list or tuple).
"""

import ast
from collections.abc import Iterator
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "energynets"
MODEL_CODE = ["nets", "energies", "objectives", "inference", "diff", "domains.py", "tokens.py"]


def _imports(path: pathlib.Path) -> list[str]:
  names = []
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      names += [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module:
      names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
  return names


def _files():
  for part in MODEL_CODE:
    root = PACKAGE / part
    yield from ([root] if root.is_file() else sorted(root.rglob("*.py")))


@pytest.mark.parametrize("path", list(_files()), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_model_code_does_not_import_the_data_loaders(path):
  bad = [
    name
    for name in _imports(path)
    if name == "energynets.data" or name.startswith("energynets.data.")
  ]
  assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(set(bad))}"


def test_the_check_sees_an_import_of_the_loaders(tmp_path):
  probe = tmp_path / "probe.py"
  probe.write_text("def f():\n  from energynets.data.sequences import unpack_tokens\n")
  assert "energynets.data.sequences" in _imports(probe)


# ---------------------------------------------------------------------------------------
# Names one layer uses of another.


def _module_file(dotted: str) -> pathlib.Path | None:
  """The source of module `dotted` under the repository root, None if it is none."""
  base = ROOT.joinpath(*dotted.split("."))
  for path in (base / "__init__.py", base.with_suffix(".py")):
    if path.is_file():
      return path
  return None


def _declared_all(dotted: str) -> list[str] | None:
  """The `__all__` of module `dotted` as its source assigns it; None without one."""
  names = None
  for node in ast.parse(_module_file(dotted).read_text()).body:
    if isinstance(node, (ast.Assign, ast.AugAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
        values = list(ast.literal_eval(node.value))
        names = (names or []) + values if isinstance(node, ast.AugAssign) else values
  return names


def _uses(source: str, package: str) -> Iterator[tuple[str, str, int]]:
  """`(module, name, line)` of every name of `package` that `source` uses: `from module
  import name` (name not itself a module), and `alias.name` where `alias` is bound to
  `module` (through modules, `en.train.storage.path` is `path` of
  `energynets.train.storage`)."""
  tree = ast.parse(source)
  aliases = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.split(".")[0] == package:
          aliases[alias.asname or package] = alias.name if alias.asname else package
    elif (
      isinstance(node, ast.ImportFrom)
      and node.level == 0
      and node.module
      and node.module.split(".")[0] == package
    ):
      for alias in node.names:
        if _module_file(f"{node.module}.{alias.name}"):
          aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        else:
          yield node.module, alias.name, node.lineno
  for node in ast.walk(tree):
    if not isinstance(node, ast.Attribute) or isinstance(getattr(node, "ctx", None), ast.Del):
      continue
    chain, base = [], node
    while isinstance(base, ast.Attribute):
      chain.append(base.attr)
      base = base.value
    if not isinstance(base, ast.Name) or base.id not in aliases:
      continue
    module = aliases[base.id]
    for attr in reversed(chain):
      if _module_file(f"{module}.{attr}"):
        module = f"{module}.{attr}"
        continue
      yield module, attr, node.lineno
      break


def _not_in_all(source: str, where: str) -> list[str]:
  bad = set()
  for module, name, line in _uses(source, "energynets"):
    public = _declared_all(module)
    if public is None:
      bad.add(f"{where}:{line}: {module}.{name} ({module} has no __all__)")
    elif name not in public and not name.startswith("__"):
      bad.add(f"{where}:{line}: {module}.{name} (not in {module}.__all__)")
  return sorted(bad)


def _python_files(*parts: str) -> list[pathlib.Path]:
  return [p for part in parts for p in sorted((ROOT / part).rglob("*.py"))]


@pytest.mark.parametrize(
  "path", _python_files("experiments"), ids=lambda p: str(p.relative_to(ROOT))
)
def test_experiments_use_only_names_in_an_all_of_energynets(path):
  bad = _not_in_all(path.read_text(), str(path.relative_to(ROOT)))
  assert not bad, "; ".join(bad)


def _bound_names(tree: ast.Module) -> set[str]:
  """The names a module binds at its top level (also inside a top-level `if` or `try`)."""
  names, nodes = set(), list(tree.body)
  while nodes:
    node = nodes.pop()
    if isinstance(node, (ast.If, ast.Try)):
      nodes += node.body + node.orelse + getattr(node, "finalbody", [])
      nodes += [s for h in getattr(node, "handlers", []) for s in h.body]
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      names.update((a.asname or a.name).split(".")[0] for a in node.names)
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
  return names


@pytest.mark.parametrize(
  "path", _python_files("energynets"), ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_name_in_an_all_of_energynets_exists(path):
  module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
  declared = _declared_all(module) or []
  # A package's submodules are names of it too.
  missing = [
    n
    for n in declared
    if n not in _bound_names(ast.parse(path.read_text())) and not _module_file(f"{module}.{n}")
  ]
  assert not missing, f"{module}.__all__ names {missing}, which it does not define"
  assert len(declared) == len(set(declared)), f"{module}.__all__ repeats names"


def _public_modules() -> set[str]:
  """`energynets` and the subpackages its `__all__` lists."""
  return {"energynets"} | {
    f"energynets.{n}" for n in _declared_all("energynets") if _module_file(f"energynets.{n}")
  }


def _notebook_source(path: pathlib.Path) -> str:
  """The notebook's code cells as one program (IPython's `%` and `!` lines left out)."""
  cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
  lines = [
    line
    for c in cells
    for line in "".join(c["source"]).splitlines()
    if not line.lstrip().startswith(("%", "!"))
  ]
  return "\n".join(lines)


def _beyond_the_public_api(source: str, where: str) -> list[str]:
  public = _public_modules()
  bad = set()
  for module, name, line in _uses(source, "energynets"):
    if module not in public:
      bad.add(f"{where}:{line}: {module}.{name} ({module} is below the public API)")
    elif name not in (_declared_all(module) or ()) and not name.startswith("__"):
      bad.add(f"{where}:{line}: {module}.{name} (not in {module}.__all__)")
  return sorted(bad)


def _notebook_uses() -> dict[str, list[str]]:
  return {
    path.name: _beyond_the_public_api(_notebook_source(path), path.name)
    for path in sorted((ROOT / "notebooks").glob("*.ipynb"))
  }


@pytest.mark.parametrize("name", sorted(_notebook_uses()))
def test_notebooks_use_only_the_public_api(name):
  bad = _notebook_uses()[name]
  assert not bad, "; ".join(bad)


def _patched_names(source: str, package: str) -> Iterator[tuple[str, str, int]]:
  """`(module, name, line)` of every name of `package` that `source` patches by string:
  `setattr(module, "name", ...)` (also `monkeypatch.setattr`, `mock.patch.object`) with
  `module` bound to a module of `package`, and `patch("package.module.name")` /
  `monkeypatch.setattr("package.module.name", ...)`."""
  tree = ast.parse(source)
  modules = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.split(".")[0] == package and alias.asname:
          modules[alias.asname] = alias.name
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      for alias in node.names:
        if node.module.split(".")[0] == package and _module_file(f"{node.module}.{alias.name}"):
          modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call) or not node.args:
      continue
    first, second = node.args[0], node.args[1] if len(node.args) > 1 else None
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
      module, _, name = first.value.rpartition(".")
      if module.split(".")[0] == package:
        yield module, name, node.lineno
    elif (
      isinstance(first, ast.Name)
      and first.id in modules
      and isinstance(second, ast.Constant)
      and isinstance(second.value, str)
    ):
      yield modules[first.id], second.value, node.lineno


def _private_names_of_experiments(source: str, where: str) -> list[str]:
  uses = [*_uses(source, "experiments"), *_patched_names(source, "experiments")]
  return sorted(
    {
      f"{where}:{line}: {module}.{name}"
      for module, name, line in uses
      if name.startswith("_") and not name.startswith("__")
    }
  )


@pytest.mark.parametrize(
  "path", _python_files("benchmarks", "tests"), ids=lambda p: str(p.relative_to(ROOT))
)
def test_benchmarks_and_tests_use_no_private_name_of_experiments(path):
  bad = _private_names_of_experiments(path.read_text(), str(path.relative_to(ROOT)))
  assert not bad, "; ".join(bad)


def test_the_checks_see_private_and_unlisted_names():
  # A lazy import, a module alias, an attribute chain through modules, an import of a
  # name: each is seen.
  experiments_code = (
    "import energynets as en\n"
    "from energynets.train import storage\n"
    "def f():\n"
    "  from energynets.data.splits import _check_seed\n"
    "  return storage._unlisted, en.train.storage._unlisted_too\n"
  )
  bad = _not_in_all(experiments_code, "probe.py")
  assert [b.split(": ")[1].split(" ")[0] for b in bad] == [
    "energynets.data.splits._check_seed",
    "energynets.train.storage._unlisted",
    "energynets.train.storage._unlisted_too",
  ], bad
  assert not _not_in_all("import energynets as en\nen.fit, en.data.load_dataset\n", "ok.py")
  notebook_code = "import energynets as en\nen.data.fetch.fetch\nen.fit\n"
  assert [b.split(": ")[1] for b in _beyond_the_public_api(notebook_code, "nb")] == [
    "energynets.data.fetch.fetch (energynets.data.fetch is below the public API)"
  ]
  test_code = (
    "from experiments import tune\n"
    "from experiments import console as c\n"
    "from experiments.compare import _private_helper\n"
    "tune._hidden(1)\n"
    "monkeypatch.setattr(c, '_progress', 'on')\n"
    "mock.patch('experiments.train._train_and_evaluate')\n"
    "monkeypatch.setattr(c, 'configure', print)\n"
  )
  assert [b.split(": ")[1] for b in _private_names_of_experiments(test_code, "t")] == [
    "experiments.compare._private_helper",
    "experiments.tune._hidden",
    "experiments.console._progress",
    "experiments.train._train_and_evaluate",
  ]

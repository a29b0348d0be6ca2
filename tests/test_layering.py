"""The model code does not depend on the data loaders.

Networks, energies, objectives, inference, differentiation and domains read what they
need of a batch's format from `energynets.tokens`; an import of `energynets.data` from
them (parsed from the source, so a lazy import inside a function counts too) fails.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "energynets"
MODEL_CODE = ["nets", "energies", "objectives", "inference", "diff", "domains.py",
              "tokens.py"]


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
  bad = [name for name in _imports(path)
         if name == "energynets.data" or name.startswith("energynets.data.")]
  assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(set(bad))}"


def test_the_check_sees_an_import_of_the_loaders(tmp_path):
  probe = tmp_path / "probe.py"
  probe.write_text("def f():\n  from energynets.data.sequences import unpack_tokens\n")
  assert "energynets.data.sequences" in _imports(probe)

"""The API reference builds from the docstrings, by the README's command, without warnings.

`python -m pdoc energynets -o DIR` renders `energynets` and every public subpackage (the
modules in `energynets.__all__`), each with the names of its `__all__`. pdoc reports
problems (an annotation it cannot resolve, a broken reference) as "Warn: ..." lines on
stderr and still exits 0, so any stderr output is a failure here.
"""

import inspect
import os
import pathlib
import subprocess
import sys

import energynets

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMAND = "python -m pdoc energynets -o docs/api"


def test_readme_documents_the_command():
  assert COMMAND in (REPO_ROOT / "README.md").read_text()


def test_api_reference_builds_without_warnings(tmp_path):
  out = tmp_path / "api"
  argv = [sys.executable, "-m", "pdoc", "energynets", "-o", str(out)]
  env = dict(os.environ, PYTHONWARNINGS="default")
  proc = subprocess.run(
    argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
  )
  assert proc.returncode == 0, proc.stderr
  assert not proc.stderr.strip(), f"pdoc warned:\n{proc.stderr}"
  pages = {"energynets": out / "energynets.html"}
  for name in energynets.__all__:
    obj = getattr(energynets, name)
    if inspect.ismodule(obj):
      pages[obj.__name__] = out / "energynets" / f"{name}.html"
  modules = {"energynets": energynets}
  modules.update(
    {
      m.__name__: m
      for m in vars(energynets).values()
      if inspect.ismodule(m) and m.__name__ in pages
    }
  )
  for module_name, page in pages.items():
    assert page.is_file(), f"no page for {module_name}"
    html = page.read_text()
    missing = [
      n
      for n in modules[module_name].__all__
      if not inspect.ismodule(getattr(modules[module_name], n)) and f'id="{n}"' not in html
    ]
    assert not missing, f"{page.name} does not document {missing}"

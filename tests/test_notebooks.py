"""The notebooks in notebooks/ run end to end and are committed without outputs.

Each notebook is executed by nbclient in a fresh IPython kernel (the `python3` kernel of
the interpreter running the tests, so the installed `energynets`), from a temporary
working directory; the first cell that raises fails the test with its traceback
(`nbclient.exceptions.CellExecutionError`). The quickstart runs in the default suite
(about 35 s on 2 CPU cores); the others with `--runslow` (about 45 s each).
"""

import pathlib

from nbclient import NotebookClient
import nbformat
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
# Figures each notebook must show (a cell that silently plots nothing is a failure too).
MIN_FIGURES = {"quickstart.ipynb": 5, "differentiation.ipynb": 2, "your_own_energy.ipynb": 1}


def test_the_notebooks_exist():
  assert {p.name for p in NOTEBOOKS} >= set(MIN_FIGURES)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
  notebook = nbformat.read(path, as_version=4)
  nbformat.validate(notebook)
  for index, cell in enumerate(notebook.cells):
    if cell.cell_type == "code":
      assert cell.outputs == [] and cell.execution_count is None, (
        f"{path.name}, cell {index}: outputs are committed; clear them before "
        f"committing (Jupyter: Edit > Clear All Outputs)"
      )


# The suite's 15-minute budget runs the quickstart; the other notebooks (about 45 s each
# on 2 cores) run with --runslow. Each public name they call has its own smoke test.
_DEFAULT_NOTEBOOKS = ("quickstart.ipynb",)


@pytest.mark.parametrize(
  "path",
  [
    p if p.name in _DEFAULT_NOTEBOOKS else pytest.param(p, marks=pytest.mark.slow)
    for p in NOTEBOOKS
  ],
  ids=lambda p: p.name,
)
def test_notebook_executes(path, tmp_path, monkeypatch):
  monkeypatch.delenv("QUICKSTART_DATASET", raising=False)  # the default, synthetic data
  # The kernel inherits it: the notebooks' `tempfile` workdirs land in pytest's tmp_path
  # instead of piling up in /tmp on every test run.
  monkeypatch.setenv("TMPDIR", str(tmp_path))
  notebook = nbformat.read(path, as_version=4)
  NotebookClient(
    notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
  ).execute()
  outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
  assert not [o for o in outputs if o.output_type == "error"]
  figures = sum("image/png" in o.get("data", {}) for o in outputs)
  assert figures >= MIN_FIGURES.get(path.name, 0), f"{path.name} showed {figures} figures"

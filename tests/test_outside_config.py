"""A config outside the repository declares its own keys and sets them from the CLI.

The two files are the example of docs/cli.md ("Your own config"), read from the page so
that the documented example is the one that runs.
"""

import os
import pathlib
import re
import subprocess
import sys

import energynets as en

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = REPO_ROOT / "docs" / "cli.md"

# Small enough to train in seconds: the last stage only, a few GBI steps.
TINY = [
  "--config.data.num_train=256",
  "--config.stage_order=joint",
  "--config.stages.joint.train.steps=10",
  "--config.train.eval_every=10",
  "--config.train.log_every=10",
  "--config.train.tensorboard=False",
  "--config.gbi.num_steps=3",
  "--config.predict_gbi.max_steps=5",
]


def _examples() -> dict[str, str]:
  """`{relative path: source}` of the page's `<!-- example:PATH -->` code blocks."""
  found = re.findall(r"<!-- example:(\S+) -->\n```python\n(.*?)```", DOC.read_text(), re.DOTALL)
  return dict(found)


def _write_project(root: pathlib.Path) -> None:
  examples = _examples()
  assert set(examples) == {"my_project/config.py", "my_project/energy.py"}, examples.keys()
  (root / "my_project").mkdir()
  (root / "my_project" / "__init__.py").write_text("")
  for path, source in examples.items():
    (root / path).write_text(source)


def _run(args, root: pathlib.Path) -> subprocess.CompletedProcess:
  env = dict(
    os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([str(root), str(REPO_ROOT)])
  )
  return subprocess.run(
    [sys.executable, "-m", "experiments.main", *args],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=600,
    env=env,
  )


def test_own_key_is_set_from_the_command_line(tmp_path, monkeypatch):
  _write_project(tmp_path)
  monkeypatch.syspath_prepend(str(tmp_path))  # load_run rebuilds the energy here too
  workdir = tmp_path / "run"
  proc = _run(
    [
      f"--config={tmp_path / 'my_project' / 'config.py'}:synthetic",
      "--config.energy.rank=2",
      f"--workdir={workdir}",
      *TINY,
    ],
    tmp_path,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  kernel = en.load_run(workdir).state["energy"].params["global"]["measurements"]["kernel"]
  assert kernel.shape == (16, 2)  # the command line's rank, not the file's 4


def test_undeclared_key_is_one_line_naming_it(tmp_path):
  proc = _run(
    [
      "--config=experiments/configs/spen_ssvm.py:synthetic",
      "--config.energy.rank=2",
      f"--workdir={tmp_path / 'run'}",
    ],
    tmp_path,
  )
  assert proc.returncode == 2
  assert "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].endswith("unknown config key energy.rank")
  assert not (tmp_path / "run").exists()

"""The documentation stands alone: no path outside the repository, no broken link.

A user's clone holds only the repository, so the README, the docs, the generated
reproduction pages and the code's docstrings must not send the reader to a folder beside
it, and every relative link of the README and docs/*.md must reach a file of the
repository (and, for a link to a markdown heading, that heading).
"""

import pathlib
import re

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# A path into a folder `shared/` beside the repository, or the folder's design notes:
# `../shared/...` or a bare `shared/...`; an absolute path such as a cluster's
# `/shared/runs` is a path of the reader's machine and not matched.
OUTSIDE = re.compile(r"(?<![\w/.-])(?:\.\./)*shared/|\bDESIGN\.md\b")


def _texts() -> list[pathlib.Path]:
  docs = REPO_ROOT / "docs"
  return sorted(
    [
      REPO_ROOT / "README.md",
      REPO_ROOT / "REPRODUCTION.md",
      *docs.glob("*.md"),
      *(docs / "papers").glob("*.md"),
      *(REPO_ROOT / "energynets").rglob("*.py"),
      *(REPO_ROOT / "experiments").rglob("*.py"),
    ]
  )


@pytest.mark.parametrize("path", _texts(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_reference_outside_the_repository(path):
  lines = [
    f"{i}: {line.strip()}"
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
    if OUTSIDE.search(line)
  ]
  assert not lines, "\n".join(lines)


def test_the_pattern_finds_outside_paths_only():
  for text in [
    "--data_dir=../shared/data",
    "`shared/papers/spen.txt`",
    "see DESIGN.md",
    "(shared/data/SOURCES.md)",
  ]:
    assert OUTSIDE.search(text), text
  for text in [
    "--venv=/shared/venvs/energynets",
    "--data_dir=DATA",
    "docs/design.md",
    "weight-shared/tied",
  ]:
    assert not OUTSIDE.search(text), text


def _anchor(heading: str) -> str:
  """The fragment GitHub gives a markdown heading."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _without_fences(text: str) -> str:
  return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def _without_code(text: str) -> str:
  """The markdown outside fenced code blocks and inline code."""
  return re.sub(r"`[^`\n]*`", "", _without_fences(text))


def _headings(path: pathlib.Path) -> set[str]:
  text = _without_fences(path.read_text(encoding="utf-8"))
  return {_anchor(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def _links(path: pathlib.Path) -> list[str]:
  """The relative targets of a markdown file's links and images."""
  targets = re.findall(r"\]\(([^)\s]+)\)", _without_code(path.read_text(encoding="utf-8")))
  return [t for t in targets if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize(
  "path",
  [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))],
  ids=lambda p: str(p.relative_to(REPO_ROOT)),
)
def test_every_relative_link_reaches_a_file_and_heading(path):
  for link in _links(path):
    target, _, fragment = link.partition("#")
    file = (path.parent / target).resolve() if target else path
    assert file.exists(), (str(path.relative_to(REPO_ROOT)), link)
    assert REPO_ROOT in file.parents or file == REPO_ROOT, (path.name, link)
    if fragment and file.suffix == ".md":
      assert fragment in _headings(file), (str(path.relative_to(REPO_ROOT)), link)

"""The README's fresh-machine numbers: parsed from pytest's closing line and written
between the README's markers by `benchmarks.readme_numbers`."""

import pathlib

import pytest

from benchmarks import readme_numbers

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
  "line, expected",
  [
    (
      "====== 1791 passed, 81 skipped, 2 warnings in 393.81s (0:06:33) ======",
      {"passed": 1791, "skipped": 81, "warnings": 2, "seconds": 393.81},
    ),
    ("12 passed in 3.10s", {"passed": 12, "seconds": 3.1}),
  ],
)
def test_the_closing_line_gives_every_count_and_the_seconds(line, expected):
  assert readme_numbers.parse_closing_line(f"collected\n...\n{line}\n") == expected


@pytest.mark.parametrize(
  "output",
  ["== 3 passed, 1 failed in 2.00s ==", "== 3 passed, 2 errors in 2.00s ==", "no summary here"],
)
def test_a_failed_or_missing_closing_line_is_refused(output):
  with pytest.raises(ValueError):
    readme_numbers.parse_closing_line(output)


def test_numbers_go_between_their_markers_and_nowhere_else():
  text = "a\n<!-- numbers:suite -->\nold\n<!-- /numbers:suite -->\nb\n"
  assert readme_numbers.write_into(text, "suite", "new") == (
    "a\n<!-- numbers:suite -->\nnew\n<!-- /numbers:suite -->\nb\n"
  )
  with pytest.raises(ValueError, match="numbers:demo"):
    readme_numbers.write_into(text, "demo", "new")


def test_the_readme_has_the_markers_of_every_measurement():
  readme = (REPO_ROOT / "README.md").read_text()
  for name in ("demo", "suite"):
    readme_numbers.write_into(readme, name, "x")

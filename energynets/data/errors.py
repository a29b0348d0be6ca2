"""`DataError`: the error every data reader raises for a bad or missing input file."""

import os

PathLike = str | os.PathLike


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

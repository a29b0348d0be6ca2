"""`DataError`: the error every data reader raises for a bad or missing input file;
`FetchError`: a registered dataset could not be downloaded."""

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


class MissingDataError(DataError):
  """A registered dataset's files are not in the data directory and were not downloaded.

  The message lists every missing file (URL, size, sha256, destination) and the
  `python -m energynets.data.fetch` command that gets them.

  Attributes:
    dataset: the registered name.
    missing: the missing files' destination paths.
    command: the fetch command to run.
  """

  def __init__(
    self, folder: PathLike, dataset: str, missing: list[str], command: str, problem: str
  ):
    self.dataset = dataset
    self.missing = list(missing)
    self.command = command
    super().__init__(folder, None, problem)


class FetchError(RuntimeError):
  """A dataset could not be fetched; the message is one line saying why and what to do.

  Attributes:
    cause: the short reason (e.g. the machine is offline), without the file listing.
  """

  def __init__(self, message: str, cause: str | None = None):
    super().__init__(message)
    self.cause = cause or message

"""`energynets.data.fetch`: downloads into load_dataset's layout, checksums, errors, CLI.

Fully offline: every download goes through a fake opener that serves local files.
"""

import dataclasses
import hashlib
import io
import os
import pathlib
import subprocess
import sys
import urllib.error
import zipfile

import numpy as np
import pytest

from energynets.data import registry
from energynets.data.fetch import fetch, FetchError
from energynets.data import fetch as fetch_module

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY_URL = "https://example.invalid/tiny/"


class FakeOpener:
  """Serves `{url: bytes}` (or raises a stored exception); records the URLs asked for."""

  def __init__(self, served: dict, file_like: bool = False):
    self.served = served
    self.file_like = file_like
    self.calls = []

  def __call__(self, url):
    self.calls.append(url)
    value = self.served.get(url)
    if value is None:
      raise urllib.error.HTTPError(url, 404, "Not Found", None, None)
    if isinstance(value, Exception):
      raise value
    return io.BytesIO(value) if self.file_like else value


def _sha(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


TINY_FILES = {"tiny.arff": b"@relation tiny\n@attribute a numeric\n@data\n1\n",
              "tiny.xml": b"<labels/>\n"}


@pytest.fixture
def tiny(monkeypatch):
  """Registers a two-file dataset 'tiny' served from TINY_URL."""
  spec = registry.DatasetSpec(
      name="tiny", kind="mulan", subdir="tiny",
      files={"all": "tiny.arff", "xml": "tiny.xml"}, num_features=1, num_labels=0,
      split_rule="random_60_20_20", split="", counts={}, url=TINY_URL,
      sha256={f: _sha(b) for f, b in TINY_FILES.items()})
  monkeypatch.setitem(registry.REGISTRY, "tiny", spec)
  return spec


def _tiny_opener(**kw) -> FakeOpener:
  return FakeOpener({TINY_URL + f: b for f, b in TINY_FILES.items()}, **kw)


def test_real_dataset_lands_where_load_dataset_reads_it(data_dir, tmp_path):
  spec = registry.REGISTRY["yeast"]
  opener = FakeOpener({spec.file_url(role): (data_dir / spec.subdir / f).read_bytes()
                       for role, f in spec.files.items()}, file_like=True)
  lines = []
  written = fetch(["yeast"], tmp_path, opener=opener, progress=lines.append)
  expected = [tmp_path / "yeast" / f for f in spec.files.values()]
  assert written == expected
  assert sorted(opener.calls) == sorted(spec.file_url(r) for r in spec.files)
  assert sorted(p.name for p in (tmp_path / "yeast").iterdir()) == sorted(spec.files.values())
  assert len(lines) == 3 and all("downloaded" in line and "verified" in line for line in lines)
  assert f"yeast/yeast-train.arff: {expected[0].stat().st_size} bytes" in lines[0]
  fetched = registry.load_dataset("yeast", data_dir=tmp_path)
  shared = registry.load_dataset("yeast", data_dir=data_dir)
  for split in ("train", "validation", "test"):
    a, b = getattr(fetched, split), getattr(shared, split)
    assert a.x.shape == b.x.shape and a.y.shape == b.y.shape
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)


def test_present_files_are_skipped_unless_force(tiny, tmp_path):
  assert fetch(["tiny"], tmp_path, opener=_tiny_opener()) == [
      tmp_path / "tiny" / "tiny.arff", tmp_path / "tiny" / "tiny.xml"]
  idle, lines = _tiny_opener(), []
  assert fetch(["tiny"], tmp_path, opener=idle, progress=lines.append) == []
  assert idle.calls == []
  assert len(lines) == 2 and all("skipped" in line for line in lines)
  again = _tiny_opener()
  assert len(fetch(["tiny"], tmp_path, opener=again, force=True)) == 2
  assert len(again.calls) == 2


def test_checksum_mismatch_raises_and_leaves_no_file(tiny, tmp_path):
  opener = _tiny_opener()
  opener.served[TINY_URL + "tiny.arff"] = b"tampered\n"
  with pytest.raises(FetchError) as info:
    fetch(["tiny"], tmp_path, opener=opener)
  message = str(info.value)
  assert "\n" not in message
  for part in ("tiny.arff", TINY_URL + "tiny.arff", tiny.sha256["tiny.arff"],
               _sha(b"tampered\n")):
    assert part in message
  assert list((tmp_path / "tiny").iterdir()) == []  # neither the file nor a temp file


def test_present_file_with_other_checksum_is_kept_unless_force(tiny, tmp_path):
  folder = tmp_path / "tiny"
  folder.mkdir()
  (folder / "tiny.arff").write_bytes(b"mine\n")
  with pytest.raises(FetchError, match="force"):
    fetch(["tiny"], tmp_path, opener=_tiny_opener())
  assert (folder / "tiny.arff").read_bytes() == b"mine\n"
  fetch(["tiny"], tmp_path, opener=_tiny_opener(), force=True)
  assert (folder / "tiny.arff").read_bytes() == TINY_FILES["tiny.arff"]


def test_network_failure_says_offline_and_where_to_put_the_file(tiny, tmp_path):
  url = TINY_URL + "tiny.arff"
  opener = FakeOpener({url: urllib.error.URLError("[Errno -3] name resolution failed")})
  with pytest.raises(FetchError) as info:
    fetch(["tiny"], tmp_path, opener=opener)
  message = str(info.value)
  assert "\n" not in message and url in message and "offline" in message
  assert str(tmp_path / "tiny" / "tiny.arff") in message
  assert list((tmp_path / "tiny").iterdir()) == []


def test_zipped_public_copy_is_tried_after_404(tiny, tmp_path):
  archive = io.BytesIO()
  with zipfile.ZipFile(archive, "w") as z:
    z.writestr("tiny.arff", TINY_FILES["tiny.arff"])
  opener = FakeOpener({TINY_URL + "tiny.arff.zip": archive.getvalue(),
                       TINY_URL + "tiny.xml": TINY_FILES["tiny.xml"]})
  fetch(["tiny"], tmp_path, opener=opener)
  assert (tmp_path / "tiny" / "tiny.arff").read_bytes() == TINY_FILES["tiny.arff"]
  assert opener.calls[:2] == [TINY_URL + "tiny.arff", TINY_URL + "tiny.arff.zip"]
  assert sorted(p.name for p in (tmp_path / "tiny").iterdir()) == ["tiny.arff", "tiny.xml"]


def test_no_public_source_and_unknown_names_fail_before_any_download(tiny, monkeypatch,
                                                                     tmp_path):
  monkeypatch.setitem(registry.REGISTRY, "private",
                      dataclasses.replace(tiny, name="private", url=""))
  opener = _tiny_opener()
  with pytest.raises(FetchError, match=r"'private' has no public source"):
    fetch(["tiny", "private"], tmp_path, opener=opener)
  with pytest.raises(FetchError) as info:
    fetch(["tiny", "nope"], tmp_path, opener=opener)
  assert "'nope'" in str(info.value)
  assert all(name in str(info.value) for name in ("bibtex", "yeast", "tiny"))
  assert opener.calls == [] and not (tmp_path / "tiny").exists()
  assert fetch(["synthetic"], tmp_path, opener=opener) == []  # generated: nothing to fetch


def test_data_dir_defaults_to_the_environment_variable(tiny, monkeypatch, tmp_path):
  monkeypatch.setenv(registry.DATA_DIR_ENV, str(tmp_path / "env"))
  assert fetch(["tiny"], None, opener=_tiny_opener())[0] == tmp_path / "env/tiny/tiny.arff"
  monkeypatch.delenv(registry.DATA_DIR_ENV)
  with pytest.raises(FetchError, match="no data directory"):
    fetch(["tiny"], "", opener=_tiny_opener())


def test_default_opener_uses_urlopen_with_a_timeout(tiny, monkeypatch, tmp_path):
  asked = []

  def fake_urlopen(url, timeout=None):
    asked.append((url, timeout))
    return io.BytesIO(TINY_FILES[url.rsplit("/", 1)[1]])

  monkeypatch.setattr(fetch_module.urllib.request, "urlopen", fake_urlopen)
  fetch(["tiny"], tmp_path)
  assert asked == [(TINY_URL + "tiny.arff", fetch_module.DEFAULT_TIMEOUT_S),
                   (TINY_URL + "tiny.xml", fetch_module.DEFAULT_TIMEOUT_S)]


def test_cli_unknown_name_exits_2_with_one_line(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "energynets.data.fetch", "nope", f"--data_dir={tmp_path}"],
      cwd=REPO_ROOT, env=dict(os.environ, PYTHONWARNINGS="default"), capture_output=True,
      text=True, timeout=120, check=False)
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and "unknown dataset 'nope'" in lines[0] and "yeast" in lines[0]
  assert proc.stdout == "" and list(tmp_path.iterdir()) == []

"""`energynets.data.fetch`: downloads into load_dataset's layout, checksums, errors, CLI.

Fully offline: every download goes through a fake opener that serves local files.
"""

import dataclasses
import hashlib
import io
import os
import pathlib
import posixpath
import re
import subprocess
import sys
import urllib.error
import zipfile

import numpy as np
import pytest

from energynets.data import fetch as fetch_module
from energynets.data import registry
from energynets.data import segmentation
from energynets.data import sequences
from energynets.data.errors import MissingDataError
from energynets.data.fetch import FetchError
from energynets.data.fetch import fetch

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
TESTDATA = pathlib.Path(__file__).parent / "testdata"
TINY_URL = "https://example.invalid/tiny/"
RAW = "https://raw.githubusercontent.com/"


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


TINY_FILES = {
  "tiny.arff": b"@relation tiny\n@attribute a numeric\n@data\n1\n",
  "tiny.xml": b"<labels/>\n",
}


@pytest.fixture
def tiny(monkeypatch):
  """Registers a two-file dataset 'tiny' served from TINY_URL."""
  spec = registry.DatasetSpec(
    name="tiny",
    kind="mulan",
    subdir="tiny",
    files={"all": "tiny.arff", "xml": "tiny.xml"},
    num_features=1,
    num_labels=0,
    split_rule="random_60_20_20",
    split="",
    counts={},
    url=TINY_URL,
    sha256={f: _sha(b) for f, b in TINY_FILES.items()},
  )
  monkeypatch.setitem(registry.REGISTRY, "tiny", spec)
  return spec


def _tiny_opener(**kw) -> FakeOpener:
  return FakeOpener({TINY_URL + f: b for f, b in TINY_FILES.items()}, **kw)


def test_real_dataset_lands_where_load_dataset_reads_it(data_dir, tmp_path):
  spec = registry.REGISTRY["yeast"]
  opener = FakeOpener(
    {
      spec.file_url(role): (data_dir / spec.subdir / f).read_bytes()
      for role, f in spec.files.items()
    },
    file_like=True,
  )
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
    tmp_path / "tiny" / "tiny.arff",
    tmp_path / "tiny" / "tiny.xml",
  ]
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
  for part in ("tiny.arff", TINY_URL + "tiny.arff", tiny.sha256["tiny.arff"], _sha(b"tampered\n")):
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
  opener = FakeOpener(
    {TINY_URL + "tiny.arff.zip": archive.getvalue(), TINY_URL + "tiny.xml": TINY_FILES["tiny.xml"]}
  )
  fetch(["tiny"], tmp_path, opener=opener)
  assert (tmp_path / "tiny" / "tiny.arff").read_bytes() == TINY_FILES["tiny.arff"]
  assert opener.calls[:2] == [TINY_URL + "tiny.arff", TINY_URL + "tiny.arff.zip"]
  assert sorted(p.name for p in (tmp_path / "tiny").iterdir()) == ["tiny.arff", "tiny.xml"]


def test_no_public_source_and_unknown_names_fail_before_any_download(tiny, monkeypatch, tmp_path):
  monkeypatch.setitem(
    registry.REGISTRY, "private", dataclasses.replace(tiny, name="private", url="")
  )
  opener = _tiny_opener()
  with pytest.raises(FetchError, match=r"'private' has no public source"):
    fetch(["tiny", "private"], tmp_path, opener=opener)
  with pytest.raises(FetchError) as info:
    fetch(["tiny", "nope"], tmp_path, opener=opener)
  assert "'nope'" in str(info.value)
  assert all(name in str(info.value) for name in ("bibtex", "yeast", "tiny"))
  assert opener.calls == [] and not (tmp_path / "tiny").exists()
  assert fetch(["synthetic"], tmp_path, opener=opener) == []  # generated: nothing to fetch


def test_data_dir_defaults_to_the_environment_variable_then_the_user_cache(
  tiny, monkeypatch, tmp_path
):
  monkeypatch.setenv(registry.DATA_DIR_ENV, str(tmp_path / "env"))
  assert fetch(["tiny"], None, opener=_tiny_opener())[0] == tmp_path / "env/tiny/tiny.arff"
  monkeypatch.delenv(registry.DATA_DIR_ENV)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  assert fetch(["tiny"], "", opener=_tiny_opener())[0] == (
    tmp_path / "cache/energynets/data/tiny/tiny.arff"
  )


def test_default_opener_uses_urlopen_with_a_timeout(tiny, monkeypatch, tmp_path):
  asked = []

  def fake_urlopen(url, timeout=None):
    asked.append((url, timeout))
    return io.BytesIO(TINY_FILES[url.rsplit("/", 1)[1]])

  monkeypatch.setattr(fetch_module.urllib.request, "urlopen", fake_urlopen)
  fetch(["tiny"], tmp_path)
  assert asked == [
    (TINY_URL + "tiny.arff", fetch_module.DEFAULT_TIMEOUT_S),
    (TINY_URL + "tiny.xml", fetch_module.DEFAULT_TIMEOUT_S),
  ]


def test_cli_unknown_name_exits_2_with_one_line(tmp_path):
  proc = subprocess.run(
    [sys.executable, "-m", "energynets.data.fetch", "nope", f"--data_dir={tmp_path}"],
    cwd=REPO_ROOT,
    env=dict(os.environ, PYTHONWARNINGS="default"),
    capture_output=True,
    text=True,
    timeout=120,
    check=False,
  )
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and "unknown dataset 'nope'" in lines[0] and "yeast" in lines[0]
  assert proc.stdout == "" and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ every registered dataset


def _sources_rows(data_dir) -> dict[str, str]:
  """SOURCES.md's table: dataset name -> its row."""
  rows = {}
  for line in (data_dir / "SOURCES.md").read_text().splitlines():
    if line.startswith("| ") and not line.startswith(("| dataset", "|---")):
      rows[line.split("|")[1].split()[0]] = line
  return rows


def test_every_registered_dataset_is_fetchable():
  sources = fetch_module.sources()
  names = (
    set(registry.REGISTRY)
    | set(sequences.SEQUENCE_DATASETS)
    | set(segmentation.SEGMENTATION_DATASETS)
  )
  assert set(sources) == names
  for name, source in sources.items():
    if name == "synthetic":
      assert not source.files and source.license
      continue
    assert source.downloads and source.license, name
    for item in source.files:
      assert re.fullmatch(r"[0-9a-f]{64}", item.sha256) and item.size > 0, (name, item)
      assert item.url == "" or re.match(RAW + r"[\w.-]+/[\w.-]+/[0-9a-f]{40}/", item.url), item
  assert fetch_module.select_sources(["conll2003_plus"]) == [sources["conll2003"]]
  assert {s.name for s in fetch_module.select_sources(["all", "yeast"])} == names - {"synthetic"}


def test_urls_are_the_pinned_commits_and_paths_of_sources_md(data_dir):
  rows = _sources_rows(data_dir)
  for name, source in fetch_module.sources().items():
    if not source.downloads:
      continue
    row = rows[name]
    pinned = set(re.findall(r"([\w.-]+/[\w.-]+) @ ([0-9a-f]{40})", row))
    for item in source.downloads:
      owner, repo, commit, rel = item.url[len(RAW) :].split("/", 3)
      assert (f"{owner}/{repo}", commit) in pinned, item.url
      assert all(part in row for part in posixpath.dirname(rel).split("/")), item.url
      assert posixpath.basename(rel) in (item.name, item.name + ".zip"), item.url
      assert item.name in row and (".zip" in row or not rel.endswith(".zip")), item.url
  # SOURCES.md: the Twitter split files are in oct27.splits/, daily547.conll is not.
  twitter = sequences.SEQUENCE_DATASETS["twitter_pos"]
  assert twitter.file_url("oct27.test").endswith("/twpos-data-v0.3/oct27.splits/oct27.test")
  assert twitter.file_url("daily547.conll").endswith("/twpos-data-v0.3/daily547.conll")


def test_checksums_and_sizes_are_those_of_the_shared_files(data_dir):
  sums = {}
  for line in (data_dir / "SHA256SUMS").read_text().splitlines():
    digest, path = line.split()
    sums[path.split("/", 2)[2]] = digest
  for source in fetch_module.sources().values():
    for item in source.files:
      path = data_dir / source.subdir / item.name
      assert sums[f"{source.subdir}/{item.name}"] == item.sha256, path
      assert registry.sha256_of(path) == item.sha256, path
      assert path.stat().st_size == item.size, path


def _public_copies(data_dir) -> dict[str, bytes]:
  """What the registered URLs serve, read from the shared files (zipped where public)."""
  served = {}
  for source in fetch_module.sources().values():
    for item in source.downloads:
      body = (data_dir / source.subdir / item.name).read_bytes()
      if item.url.endswith(".zip"):  # expr_fun's public copies are zipped
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
          z.writestr(f"{source.subdir}/{item.name}", body)
        body = archive.getvalue()
      served[item.url] = body
  return served


def test_fetch_all_offline_builds_every_dataset_as_shared(data_dir, tmp_path):
  opener = FakeOpener(_public_copies(data_dir), file_like=True)
  lines = []
  written = fetch(["all"], tmp_path, opener=opener, progress=lines.append)
  sources = fetch_module.sources()
  expected = [tmp_path / s.subdir / f.name for s in sources.values() for f in s.files]
  assert written == expected
  for path in written:
    assert path.read_bytes() == (data_dir / path.relative_to(tmp_path)).read_bytes(), path
  assert any("weizmann_horse_32x32_splits.npz: 979067 bytes, built" in line for line in lines)
  downloads = [f.url for s in sources.values() for f in s.downloads]
  assert sorted(opener.calls) == sorted(downloads)
  assert not [p for p in tmp_path.rglob("*.part")]
  horses = segmentation.load_segmentation("weizmann_horse", data_dir=tmp_path)
  np.testing.assert_array_equal(
    horses.test.y, segmentation.load_segmentation("weizmann_horse", data_dir=data_dir).test.y
  )
  assert (
    sequences.load_sequence_dataset("twitter_pos", data_dir=tmp_path).test.lengths.sum() == 7707
  )


def test_horse_file_is_rebuilt_from_present_sources(data_dir, tmp_path):
  folder = tmp_path / "weizmann_horse"
  folder.mkdir()
  spec = segmentation.SEGMENTATION_DATASETS["weizmann_horse"]
  for name in spec.sources:
    (folder / name).write_bytes((data_dir / "weizmann_horse" / name).read_bytes())
  opener = FakeOpener({})
  assert fetch(["weizmann_horse"], tmp_path, opener=opener) == [folder / spec.file]
  assert opener.calls == [] and registry.sha256_of(folder / spec.file) == spec.sha256
  # A source that is not the registered file is never unpickled.
  (folder / spec.file).unlink()
  (folder / "weizmann_horse_val.npy").write_bytes(b"not the public file")
  with pytest.raises(FetchError, match=r"weizmann_horse_val\.npy has sha256 .* --force"):
    fetch(["weizmann_horse"], tmp_path, opener=opener, only_missing=True)
  assert sorted(p.name for p in folder.iterdir()) == sorted(spec.sources)


def test_offline_fetch_lists_every_missing_file_at_once(tmp_path):
  opener = FakeOpener({}, file_like=True)
  opener.served = {
    f.url: urllib.error.URLError("[Errno -3] name resolution failed")
    for s in fetch_module.sources().values()
    for f in s.downloads
  }
  with pytest.raises(FetchError) as info:
    fetch(["yeast", "weizmann_horse"], tmp_path, opener=opener)
  message = str(info.value)
  assert len(opener.calls) == 1 and "\n" not in message and "offline" in message
  assert "7 files not fetched" in message
  for name in ("yeast", "weizmann_horse"):
    spec = fetch_module.sources()[name]
    for item in spec.files:
      assert str(tmp_path / spec.subdir / item.name) in message
      assert item.sha256 in message and f"{item.size} bytes" in message
      assert item.url in message


@pytest.fixture
def tiny_mulan(monkeypatch):
  """Registers 'tinymulan', tests/testdata/tiny_mulan, served from TINY_URL."""
  by_path = registry.load_dataset(TESTDATA / "tiny_mulan")
  files = {"train": "tiny-train.arff", "test": "tiny-test.arff", "xml": "tiny.xml"}
  served = {TINY_URL + f: (TESTDATA / "tiny_mulan" / f).read_bytes() for f in files.values()}
  spec = registry.DatasetSpec(
    name="tinymulan",
    kind="mulan",
    subdir="tinymulan",
    files=files,
    num_features=by_path.num_features,
    num_labels=by_path.num_labels,
    split_rule="shipped_train_test+holdout_validation",
    split="",
    counts={},
    url=TINY_URL,
    sha256={f: _sha(served[TINY_URL + f]) for f in files.values()},
    sizes={f: len(served[TINY_URL + f]) for f in files.values()},
    license="test data",
  )
  monkeypatch.setitem(registry.REGISTRY, "tinymulan", spec)
  return served


def test_load_dataset_fetches_missing_files_on_first_use(tiny_mulan, monkeypatch, tmp_path, capfd):
  monkeypatch.setenv("ENERGYNETS_AUTO_FETCH", "1")
  opener = FakeOpener(tiny_mulan)
  monkeypatch.setattr(fetch_module, "_default_opener", opener)
  capfd.readouterr()
  ds = registry.load_dataset("tinymulan", data_dir=tmp_path)
  err = capfd.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "downloading dataset 'tinymulan' (3 files" in err[0]
  assert str(tmp_path / "tinymulan") in err[0]
  assert ds.test.num_examples == registry.load_dataset(TESTDATA / "tiny_mulan").test.num_examples
  assert len(opener.calls) == 3
  registry.load_dataset("tinymulan", data_dir=tmp_path)  # present now: nothing fetched
  assert len(opener.calls) == 3 and capfd.readouterr().err == ""


def test_first_use_offline_is_one_error_with_every_file_and_the_command(
  tiny_mulan, monkeypatch, tmp_path
):
  monkeypatch.setenv("ENERGYNETS_AUTO_FETCH", "1")
  opener = FakeOpener({url: urllib.error.URLError("timed out") for url in tiny_mulan})
  monkeypatch.setattr(fetch_module, "_default_opener", opener)
  with pytest.raises(MissingDataError) as info:
    registry.load_dataset("tinymulan", data_dir=tmp_path)
  message = str(info.value)
  assert len(opener.calls) == 1 and "\n" not in message
  assert "dataset folder of 'tinymulan' not found" in message and "offline" in message
  for url, body in tiny_mulan.items():
    name = url.rsplit("/", 1)[1]
    for part in (url, _sha(body), f"{len(body)} bytes", str(tmp_path / "tinymulan" / name)):
      assert part in message
  assert f"python -m energynets.data.fetch tinymulan --data_dir={tmp_path}" in message
  assert f"python -m energynets.data.fetch all --data_dir={tmp_path}" in message


def test_auto_fetch_off_never_opens_a_url(tiny_mulan, monkeypatch, tmp_path):
  monkeypatch.setenv("ENERGYNETS_AUTO_FETCH", "0")
  opener = FakeOpener(tiny_mulan)
  monkeypatch.setattr(fetch_module, "_default_opener", opener)
  with pytest.raises(MissingDataError, match=r"automatic download is off"):
    registry.load_dataset("tinymulan", data_dir=tmp_path)
  assert opener.calls == []


def test_cli_list_shows_files_sizes_and_presence(tmp_path):
  (tmp_path / "yeast").mkdir()
  (tmp_path / "yeast" / "yeast.xml").write_bytes(b"x" * 526)
  proc = subprocess.run(
    [sys.executable, "-m", "energynets.data.fetch", "--list", f"--data_dir={tmp_path}"],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=120,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  lines = proc.stdout.splitlines()
  assert lines[0] == f"data directory: {tmp_path}"
  (xml,) = [line for line in lines if "yeast.xml" in line]
  assert re.search(r"yeast\.xml +526 bytes +present +" + re.escape(RAW), xml)
  (train,) = [line for line in lines if "yeast-train.arff" in line]
  assert re.search(r"1501117 bytes +missing", train)
  (npz,) = [line for line in lines if "weizmann_horse_32x32_splits.npz" in line]
  assert "built from weizmann_horse_train.npy" in npz
  headers = [line for line in lines if not line.startswith(" ")]
  for name in ("twitter_pos", "conll2003", "weizmann_horse", "conll2003_plus"):
    assert any(line.startswith(name) for line in headers), name

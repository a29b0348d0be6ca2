"""benchmarks.fingerprint: the record two trees are compared by after a refactor."""

from benchmarks import fingerprint


def test_exact_writes_floats_in_hex_and_drops_volatile_keys():
  record = {
    "loss": 0.1,
    "wall_time": 3.2,
    "meta": {"code_revision": "abc", "step": 2},
    "rows": [1.5, float("nan")],
  }
  assert fingerprint.exact(record) == {
    "loss": (0.1).hex(),
    "meta": {"step": 2},
    "rows": [(1.5).hex(), "nan"],
  }
  # One bit of difference shows.
  assert fingerprint.exact(0.1) != fingerprint.exact(0.1 + 2**-56)


def test_configs_record_every_pair_and_what_is_refused():
  first = fingerprint.configs()
  assert first == fingerprint.configs()
  assert first["mlp:synthetic"]["method"] == "local"
  assert first["spen_ssvm:depth_scenes"]["data"]["name"] == "depth_scenes"
  assert first["bilstm:synthetic"].startswith("ERROR ")
  assert not any(key.split(":")[0] in fingerprint.NOT_CONFIGS for key in first)

"""benchmarks/by_path_defaults.py: which verdict cell each config's by-path default is,
and its standing against the linear model from made-up records."""

import json
import os

import pytest
from verdict_records import record

from benchmarks import by_path_defaults
from benchmarks import small_data
from benchmarks import verdict
from experiments import configuration

CONFIG_DIR = os.path.join(os.path.dirname(__file__), "..", "experiments", "configs")


def _mulan_configs():
  """Every config with a `:mulan` variant (what a by-path run of a new MULAN folder takes)."""
  out = {}
  for name in sorted(f[:-3] for f in os.listdir(CONFIG_DIR) if f.endswith(".py")):
    try:
      out[name] = configuration.get_config(name, "mulan")
    except (ValueError, AttributeError, KeyError, ImportError):
      continue
  return out


def test_every_by_path_config_names_the_cell_it_is():
  configs = _mulan_configs()
  assert set(by_path_defaults.BY_PATH_CELL) == set(configs)
  for name, cell in by_path_defaults.BY_PATH_CELL.items():
    assert small_data.config_name(cell) == name
    staged = bool(configs[name].get("stage_order"))
    # A staged config searches stagewise by path: its first stage's own cell, then the
    # later stages from it; a single-stage one searches its own space once.
    stagewise = small_data.start_method(cell) is not None or small_data.is_stagewise(cell)
    assert stagewise == staged, name
    assert configs[name].tune.stagewise


def test_the_standing_of_each_default_against_the_linear_model_by_hand():
  records = []
  for seed in (0, 1, 2):
    records += [
      record("yeast", 250, verdict.LINEAR, seed, 0.60),
      record("yeast", 250, verdict.MLP, seed, 0.61),
      record("yeast", 250, "dmf_on_mlp", seed, 0.62 + 0.01 * seed),
      record("bibtex", 250, verdict.LINEAR, seed, 0.30),
      record("bibtex", 250, verdict.MLP, seed, 0.29),
      record("bibtex", 250, "dmf_on_mlp", seed, 0.285),
      record("bibtex", 250, "dmf", seed, 0.50),  # searched whole: not the default
    ]
  rows = {r["config"]: r for r in by_path_defaults.summary_rows(records)}
  dmf = rows["dmf"]
  assert dmf["cell"] == "dmf_on_mlp" and dmf["pairs"] == [("bibtex", 250), ("yeast", 250)]
  # yeast: +2, +3, +4 points; bibtex: −1.5 at every seed.
  assert dmf["vs_linear"]["mean"] == pytest.approx((0.03 - 0.015) / 2)
  assert dmf["worst"]["dataset"] == "bibtex" and dmf["worst"]["mean"] == pytest.approx(-0.015)
  assert [d["dataset"] for d in dmf["below_goal"]] == ["bibtex"]
  assert dmf["vs_mlp"]["mean"] == pytest.approx((0.02 - 0.005) / 2)
  assert rows["mlp"]["below_goal"] == [] and rows["mlp"]["vs_mlp"] is None
  assert rows["spen_ssvm"]["pairs"] == [] and rows["br"]["cell"] == "br"
  body = by_path_defaults.report(records)
  # Pooled over two pairs: t(1) = 12.71 times the sd of (+3.00, −1.50) over √2.
  assert (
    "| dmf | dmf_on_mlp | 2 | +0.75 ± 28.59 | bibtex 250: **-1.50 ± 0.00** | bibtex 250 | "
    "+0.75 ± 15.88 |"
  ) in body
  assert "| mlp | mlp | 2 | +0.00 ± 12.71 | bibtex 250: **-1.00 ± 0.00** | none | — |" in body
  assert "| spen_ssvm | spen_ssvm_stagewise | 0 | not measured |" in body
  assert "| yeast | 250 | **+1.00 ± 0.00** | **+3.00 ± 2.48** |" in body


def test_reports_merge_later_over_earlier_and_must_share_a_budget(tmp_path):
  budget = {"tune": verdict.budget(), "vary_data": True}
  paths = []
  for i, f1 in enumerate((0.5, 0.7)):
    paths.append(tmp_path / f"r{i}.json")
    records = [
      record("yeast", 250, verdict.MLP, 0, f1),
      record("yeast", i, verdict.LINEAR, 0, 0.1),
    ]
    paths[-1].write_text(json.dumps({"budget": budget, "records": records}))
  merged = by_path_defaults.read_records([str(p) for p in paths])
  assert sorted((r["method"], r["size"], r[verdict.METRIC]) for r in merged) == [
    (verdict.MLP, 250, 0.7),
    (verdict.LINEAR, 0, 0.1),
    (verdict.LINEAR, 1, 0.1),
  ]
  paths[1].write_text(json.dumps({"budget": {"tune": {"trials": 1}}, "records": []}))
  with pytest.raises(by_path_defaults.app.UsageError, match="was run with"):
    by_path_defaults.read_records([str(p) for p in paths])

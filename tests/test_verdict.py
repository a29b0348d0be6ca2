"""benchmarks/verdict.py: the paired differences and their intervals (against scipy and a
hand computation), the one budget every method gets, the report and figure from made-up
records, a resumable run of a tiny real slice, and one process per cell; the analyses of
finished cells' restored states (threshold_rule, stage_gain)."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats
from verdict_records import record

from benchmarks import small_data
from benchmarks import stage_gain
from benchmarks import threshold_rule
from benchmarks import verdict
from benchmarks import verdict_changes
from experiments import configuration
from experiments import workdirs


def test_paired_difference_by_hand():
  # d = (0.01, 0.03, 0.02): mean 0.02, sd 0.01; t(0.975, 2) = 4.302652729911275.
  d = verdict.paired_difference([0.51, 0.53, 0.52], [0.50, 0.50, 0.50])
  half = 4.302652729911275 * 0.01 / math.sqrt(3)
  assert d["n"] == 3
  assert d["mean"] == pytest.approx(0.02)
  assert d["half_width"] == pytest.approx(half)
  assert (d["low"], d["high"]) == pytest.approx((0.02 - half, 0.02 + half))
  one = verdict.paired_difference([0.6], [0.5])
  assert one["mean"] == pytest.approx(0.1)
  assert one["half_width"] is None and one["low"] is None and one["high"] is None


@pytest.mark.parametrize("n", [2, 3, 7])
def test_paired_difference_is_scipys_paired_t_interval(n):
  rng = np.random.default_rng(n)
  a, b = rng.uniform(0.3, 0.7, n), rng.uniform(0.3, 0.7, n)
  d = verdict.paired_difference(list(a), list(b))
  low, high = stats.ttest_rel(a, b).confidence_interval(0.95)
  assert (d["low"], d["high"]) == pytest.approx((low, high))


def test_differences_pair_by_seed_and_pool_over_datasets():
  records = [
    # d1 at 250 rows: seeds 0, 1, 2 for mlp; dmf lacks seed 2, so two pairs.
    record("d1", 250, "mlp", 0, 0.50),
    record("d1", 250, "mlp", 1, 0.60),
    record("d1", 250, "mlp", 2, 0.90),
    record("d1", 250, "dmf", 0, 0.52),
    record("d1", 250, "dmf", 1, 0.61),
    record("d2", 250, "mlp", 0, 0.40),
    record("d2", 250, "dmf", 0, 0.45),
    record("d2", 250, "dmf", 1, 0.99),  # no mlp at seed 1: not paired
    record("d1", 0, "mlp", 0, 0.70),
    record("d1", 0, "dmf", 0, 0.69),
  ]
  diffs = {(d["dataset"], d["size"]): d for d in verdict.differences(records, "mlp")}
  assert set(diffs) == {("d1", 250), ("d2", 250), ("d1", 0)}
  assert diffs["d1", 250]["seeds"] == [0, 1]
  assert diffs["d1", 250]["mean"] == pytest.approx(0.015)
  assert diffs["d2", 250]["seeds"] == [0] and diffs["d2", 250]["half_width"] is None
  pools = {p["size"]: p for p in verdict.pooled(list(diffs.values()))}
  # At 250 rows the units are d1's mean (+0.015) and d2's (+0.05).
  assert pools[250]["datasets"] == ["d1", "d2"]
  assert pools[250]["mean"] == pytest.approx(0.0325)
  low, high = stats.ttest_1samp([0.015, 0.05], 0.0).confidence_interval(0.95)
  assert (pools[250]["low"], pools[250]["high"]) == pytest.approx((low, high))
  assert pools[250]["at_least_one_point"] == 2
  assert pools[0]["n"] == 1 and pools[0]["half_width"] is None
  # Over every size: the three (dataset, size) means.
  assert pools[None]["n"] == 3
  assert pools[None]["mean"] == pytest.approx((0.015 + 0.05 - 0.01) / 3)


def _fake_records():
  rng = np.random.default_rng(0)
  records = []
  for dataset in ("yeast", "genbase"):
    for size in (250, 0):
      for seed in (0, 1, 2):
        for method, shift in ((verdict.LINEAR, -0.01), ("mlp", 0.0), ("dmf", 0.03), ("e2e", -0.2)):
          records.append(record(dataset, size, method, seed, 0.6 + shift + rng.normal(0, 0.002)))
  floor = [(r["dataset"], r["size"], r["seed"]) for r in records if r["method"] == "mlp"]
  return records + [record(*key[:2], verdict.PRIOR, key[2], 0.5) for key in floor]


def test_report_and_figure_from_records(tmp_path):
  records = _fake_records()
  tune_budget = verdict.budget(["tune.trials=2"])
  body = verdict.report(records, tune_budget, vary_data=True)
  assert '"trials": 2' in body and "data.split_seed" in body and "seeds [0, 1, 2]" in body
  assert "With n=3 seeds" in body and "t = 4.30" in body
  lines = body.splitlines()
  # Every table: a row per (dataset, size), the label prior and the linear model first.
  header = next(line for line in lines if line.startswith("| dataset"))
  assert header.split(" | ")[2:5] == ["label prior", "LR (sklearn)", "mlp"]
  vs_mlp = lines[lines.index("Paired difference against the tuned MLP:") + 2 :]
  yeast_250 = next(line for line in vs_mlp if line.startswith("| yeast | 250 |"))
  # dmf is 3 points above, e2e 20 below, with tight intervals: both bold.
  columns = yeast_250.strip("| ").split(" | ")
  assert columns[4].startswith("**+3.") and columns[5].startswith("**-")
  assert float(columns[5].strip("*").split()[0]) == pytest.approx(-20, abs=1)
  assert float(columns[2].strip("*").split()[0]) == pytest.approx(-10, abs=1)  # the prior
  assert any(line.startswith("- dmf − mlp: **+3.") and "above it at 95 %" in line for line in lines)
  assert any(line.startswith("- e2e − mlp:") and "below it at 95 %" in line for line in lines)
  assert any(line.startswith("| dmf |") and "; 2 sets, 2 ≥ +1" in line for line in lines)
  summary = verdict.summary(records, tune_budget, True)
  assert summary["budget"] == {"tune": tune_budget, "vary_data": True}
  assert len(summary["differences"]) == 2 * 2 * (4 + 4)  # vs mlp: 4 methods, vs LR: 4
  json.dumps(summary)
  verdict.plot(records, str(tmp_path / "verdict.png"))
  assert os.path.getsize(tmp_path / "verdict.png") > 1000


def test_a_difference_over_more_seeds_than_most_says_its_count():
  records = _fake_records()
  for seed in (3, 4):  # yeast at 250 rows gets two more seeds of the MLP and dmf only
    for method, shift in (("mlp", 0.0), ("dmf", 0.03)):
      records.append(record("yeast", 250, method, seed, 0.6 + shift + 0.001 * seed))
  body = verdict.report(records, verdict.budget([]), vary_data=True)
  t5 = stats.t.ppf(0.975, 4)
  assert "With n=3 seeds" in body and "t = 4.30" in body
  assert f"n=5: t = {t5:.2f}, its differences marked (n=5)" in body
  lines = body.splitlines()
  vs_mlp = lines[lines.index("Paired difference against the tuned MLP:") + 2 :]
  yeast, genbase = (
    next(line for line in vs_mlp if line.startswith(f"| {name} | 250 |")).split(" | ")
    for name in ("yeast", "genbase")
  )
  assert yeast[4].endswith("(n=5)") and not yeast[5].endswith(")")  # e2e: 3 seeds
  assert not any(cell.endswith("(n=5)") for cell in genbase)
  # The finding names the seeds most pairs ran and the pair that ran more.
  text = verdict.finding(verdict.summary(records, verdict.budget([]), True))
  assert "; seeds 0, 1, 2 (0, 1, 2, 3, 4 on yeast 250))" in text


def test_the_finding_names_what_ran_and_each_side():
  records = _fake_records()
  text = verdict.finding(verdict.summary(records, verdict.budget([]), True))
  assert text.startswith("At equal search budget on 4 (dataset, size) pairs (genbase 250, ")
  assert "seeds 0, 1, 2" in text and "dmf +3." in text and "e2e -19." in text
  assert "above it at 95 %: dmf; below it: e2e" in text
  assert "prior" not in text  # the floor, not a method
  assert "the tuned MLP against the tuned LogisticRegression: +1." in text
  assert "only" not in text
  # A method that ran on some pairs only says which.
  partial = records + [
    record(dataset, 0, "seal_f1", seed, 0.61) for dataset in ("yeast", "genbase") for seed in (0, 1)
  ]
  text = verdict.finding(verdict.summary(partial, verdict.budget([]), True))
  assert "seal_f1 +" in text and "(genbase all, yeast all only)" in text
  assert text.count(" only)") == 1
  # One pair: the interval is that pair's, over its seeds.
  one = [r for r in records if (r["dataset"], r["size"]) == ("yeast", 250)]
  summary = verdict.summary(one, verdict.budget([]), True)
  (pair,) = [d for d in summary["differences"] if (d["method"], d["reference"]) == ("dmf", "mlp")]
  text = verdict.finding(summary)
  assert "on 1 (dataset, size) pair (yeast 250;" in text
  assert f"dmf +{100 * pair['mean']:.2f} ± {100 * pair['half_width']:.2f}" in text


def test_every_method_gets_the_one_budget(tmp_path):
  overrides = ["tune.trials=2", "train.steps=7", "dmf:train.eval_every=5"]
  tune_budget = verdict.budget(overrides)
  assert "seed" not in tune_budget and tune_budget["trials"] == 2 and tune_budget["enabled"]
  blocks = {}
  for method in verdict.METHODS:
    cell = verdict.SeededCell(small_data.Cell("yeast", 500, method, "tuned"), 2)
    config = small_data.cell_config(
      cell.cell, str(tmp_path), verdict.cell_overrides(cell, tune_budget, overrides)
    )
    assert config.train.seed == 2 and config.data.split_seed == 2 and config.train.steps == 7
    assert config.train.eval_every == (5 if method == "dmf" else 250)
    blocks[method] = {k: config.tune[k] for k in tune_budget}
    assert config.tune.seed == 2
    # The by-path default searches a staged method stagewise; its cell, every stage at
    # once (its stagewise forms are `<method>_stagewise` and `<method>_on_mlp`).
    assert config.tune.stagewise is False
  assert all(block == {**tune_budget} for block in blocks.values())
  assert "stagewise" not in tune_budget
  with pytest.raises(ValueError, match="stagewise forms are the methods <method>_stagewise"):
    verdict.budget(["tune.stagewise=True"])
  # `<method>_stagewise`: the method's config with the one budget, searched stagewise.
  stagewise = verdict.SeededCell(small_data.Cell("yeast", 500, "spen_ssvm_stagewise", "tuned"), 2)
  config = small_data.cell_config(
    stagewise.cell, str(tmp_path), verdict.cell_overrides(stagewise, tune_budget, overrides)
  )
  assert config.tune.stagewise is True and config.stages.energy.method == "ssvm"
  assert {k: config.tune[k] for k in tune_budget} == tune_budget
  assert verdict.report_order("spen_ssvm") < verdict.report_order("spen_ssvm_stagewise")
  assert verdict.report_order("spen_ssvm_stagewise") < verdict.report_order("dmf")
  fixed = verdict.cell_overrides(cell, tune_budget, overrides, vary_data=False)
  assert not any(o.startswith("data.split_seed") for o in fixed)
  for bad in (["train.seed=3"], ["tune.seed=3"], ["dmf:tune.trials=9"]):
    with pytest.raises(ValueError, match="one tune budget"):
      verdict.budget(bad)


def test_cells_slices_and_the_workdir_budget(tmp_path):
  all_cells = verdict.cells(["yeast", "genbase"], [0, 250], ["mlp", "dmf"], [0, 1])
  names = [c.name for c in all_cells]
  assert names[:4] == [
    "seed0/yeast/n250/label_prior_tuned",
    "seed0/yeast/n250/sklearn_lr_tuned",
    "seed0/yeast/n250/mlp_tuned",
    "seed0/yeast/n250/dmf_tuned",
  ]
  assert len(names) == 2 * 2 * 2 * 4 and names[-1] == "seed1/genbase/nall/dmf_tuned"
  assert len(verdict.cells(["yeast"], [250], ["mlp"], [0], linear=False)) == 1
  workdir = str(tmp_path)
  finished = os.path.join(workdir, "seed1", "genbase", "n250", "mlp_tuned")
  os.makedirs(finished)
  open(os.path.join(finished, "results.json"), "w").close()
  only = verdict.select(all_cells, workdir, ["*/genbase/n250/*"], max_cells=2)
  # Two unfinished cells, and the finished one in the slice.
  assert [c.name for c in only] == [
    "seed0/genbase/n250/label_prior_tuned",
    "seed0/genbase/n250/sklearn_lr_tuned",
    "seed1/genbase/n250/mlp_tuned",
  ]
  assert [c.name for c in verdict.select(all_cells, workdir, report_only=True)] == [
    "seed1/genbase/n250/mlp_tuned"
  ]
  verdict.check_budget(workdir, {"tune": {"trials": 2}, "vary_data": True})
  verdict.check_budget(workdir, {"tune": {"trials": 2}, "vary_data": True})
  with pytest.raises(ValueError, match="another --workdir"):
    verdict.check_budget(workdir, {"tune": {"trials": 3}, "vary_data": True})
  earlier = [record("yeast", 250, "mlp", 0, 0.1), record("yeast", 250, "mlp", 1, 0.2)]
  merged = verdict.merge([record("yeast", 250, "mlp", 1, 0.3)], earlier)
  assert [(r["seed"], r[verdict.METRIC]) for r in merged] == [(0, 0.1), (1, 0.3)]
  # An earlier report adds only the cells of the command's slice.
  other = [
    record("genbase", 250, "mlp", 0, 0.4),  # another dataset
    record("yeast", 0, "mlp", 0, 0.4),  # another size
    record("yeast", 250, "e2e", 0, 0.4),  # another method
    record("yeast", 250, "mlp", 2, 0.4),  # another seed
    record("yeast", 250, verdict.LINEAR, 0, 0.4),  # the linear model, run by the slice
  ]
  named = verdict.cells(["yeast"], [250], ["mlp"], [0, 1])
  kept = verdict.in_slice(earlier + other, named)
  assert [(r["method"], r["seed"]) for r in kept] == [("mlp", 0), ("mlp", 1), (verdict.LINEAR, 0)]
  assert verdict.in_slice(other, verdict.cells(["yeast"], [250], ["mlp"], [0], linear=False)) == []


def _short(methods, dataset, steps):
  """Overrides that cut every stage of `methods` to `steps` steps."""
  out = []
  for method in methods:
    config = configuration.get_config(method, dataset)
    for stage, settings in config.get("stages", {}).items():
      if "steps" in settings.get("train", {}):
        out.append(f"{method}:stages.{stage}.train.steps={steps}")
  return out


@pytest.mark.slow  # 1 min on 2 cores: six tuned cells, each compiling its folds and refit
def test_a_tiny_real_slice_runs_and_resumes(data_dir, tmp_path):
  workdir = str(tmp_path / "runs")
  overrides = [
    "train.steps=4",
    "train.eval_every=2",
    "tune.trials=1",
    "tune.folds=2",
    "tune.trial_eval_every=2",
    *_short(["dmf"], "yeast", 4),
  ]
  tune_budget = verdict.budget(overrides)
  all_cells = verdict.cells(["yeast"], [60], ["mlp", "dmf"], [0, 1])
  records = verdict.run(all_cells, workdir, str(data_dir), tune_budget, 1, overrides)
  assert [(r["seed"], r["method"]) for r in records] == [
    (seed, method) for seed in (0, 1) for method in (verdict.PRIOR, verdict.LINEAR, "mlp", "dmf")
  ]
  assert all(r["num_train"] == 60 for r in records)
  with open(os.path.join(workdir, "seed1", "yeast", "n60", "dmf_tuned", "results.json")) as f:
    tuning = json.load(f)["meta"]["tuning"]
  assert tuning["folds"] == 2 and tuning["num_trials"] == 1
  stamp = os.path.getmtime(
    os.path.join(workdir, "seed0", "yeast", "n60", "mlp_tuned", "results.json")
  )
  again = verdict.run(all_cells, workdir, str(data_dir), tune_budget, 1, overrides)
  assert [r[verdict.METRIC] for r in again] == [r[verdict.METRIC] for r in records]
  assert stamp == os.path.getmtime(
    os.path.join(workdir, "seed0", "yeast", "n60", "mlp_tuned", "results.json")
  )
  body = verdict.report(records, tune_budget, True)
  assert "| yeast | 60 |" in body and "With n=2 seeds" in body


def test_refit_from_an_earlier_search_is_the_cell_it_refits(data_dir, tmp_path):
  overrides = ["train.steps=6", "train.eval_every=2", "tune.trials=1", "tune.folds=2"]
  overrides.append("tune.trial_eval_every=2")
  tune_budget = verdict.budget(overrides)
  mlp, staged = (
    verdict.SeededCell(small_data.Cell("yeast", 60, m, "tuned"), 0) for m in ("mlp", "dmf")
  )
  (searched,) = verdict.run([mlp], str(tmp_path / "a"), str(data_dir), tune_budget, 1, overrides)
  assert "train.steps" not in searched["chosen"]  # the final run selects its own step
  # A record of earlier code, whose k-fold final run trained a fixed step count.
  fixed_steps = {"train.steps": 2, "train.schedule_steps": 6}
  earlier = [
    {**searched, "chosen": {**searched["chosen"], **fixed_steps}},
    {**record("yeast", 60, "dmf", 0, 0.5), "chosen": {"model.hidden": [8]}},
  ]
  workdir = str(tmp_path / "b")
  given = verdict.refit_from([mlp, staged], earlier, workdir, str(data_dir), tune_budget, overrides)
  assert given == [mlp, staged]
  with open(os.path.join(workdir, staged.name, "chosen.json")) as f:
    assert json.load(f)["overrides"] == {"model.hidden": [8]}
  (refit,) = verdict.run([mlp], workdir, str(data_dir), tune_budget, 1, overrides)
  assert not os.path.exists(os.path.join(workdir, mlp.name, "trials.jsonl"))  # no search
  # The recorded step count is dropped: the rerun is the searched cell's final run.
  assert refit[verdict.METRIC] == searched[verdict.METRIC]
  assert refit["chosen"] == searched["chosen"]
  assert refit["seconds"] == searched["seconds"] and refit["refit_of_earlier_search"]
  # A started cell is left as it is.
  assert verdict.refit_from([mlp], earlier, workdir, str(data_dir), tune_budget, overrides) == []


def test_threshold_rule_rescores_a_finished_cell_from_its_restored_state(data_dir, tmp_path):
  overrides = ["train.steps=6", "train.eval_every=2", "tune.trials=1", "tune.folds=2"]
  tune_budget = verdict.budget(overrides)
  mlp = verdict.SeededCell(small_data.Cell("yeast", 60, "mlp", "tuned"), 1)
  workdir = str(tmp_path / "runs")
  (record,) = verdict.run([mlp], workdir, str(data_dir), tune_budget, 1, overrides)
  by_threshold = threshold_rule.records(workdir, 0.0, str(data_dir))
  key = {"dataset": "yeast", "size": 60, "method": "mlp", "seed": 1}
  # The restored state at the threshold tuned as the run tuned it gives the reported
  # score (the records raise otherwise), and no extra standard errors change nothing.
  assert by_threshold["tuned"] == [{**key, verdict.METRIC: record[verdict.METRIC]}]
  assert by_threshold["rule"] == by_threshold["tuned"]
  (half,) = by_threshold["half"]
  with open(os.path.join(workdir, mlp.name, "results.json")) as f:
    assert half[verdict.METRIC] == pytest.approx(json.load(f)["test/example_f1@0.5"])
  body = threshold_rule.report(by_threshold, 0.0)
  assert "| mlp | yeast | 60 | 1 | +0.00 | +0.00 | +0.00 | 0 | 0 |" in body
  # A run whose restored state does not give what it reported is refused.
  path = os.path.join(workdir, mlp.name, "results.json")
  with open(path) as f:
    results = json.load(f)
  results["test/example_f1"] += 0.01
  with open(path, "w") as f:
    json.dump(results, f)
  with pytest.raises(ValueError, match="scores .* at the tuned threshold, not the"):
    threshold_rule.records(workdir, 1.0, str(data_dir))


def test_stage_gain_splits_a_staged_cells_difference_into_energy_and_search_draw(
  data_dir, tmp_path
):
  overrides = [
    "train.steps=6",
    "train.eval_every=2",
    "tune.trials=1",
    "tune.folds=2",
    "tune.trial_eval_every=2",
    *_short(["dmf"], "yeast", 6),
  ]
  tune_budget = verdict.budget(overrides)
  cells = [verdict.SeededCell(small_data.Cell("yeast", 60, m, "tuned"), 0) for m in ("mlp", "dmf")]
  workdir = str(tmp_path / "runs")
  mlp, dmf = verdict.run(cells, workdir, str(data_dir), tune_budget, 1, overrides)
  (record,) = stage_gain.records([workdir], str(data_dir))  # the MLP has one stage
  assert (record["method"], record["seed"], record["first_stage"]) == ("dmf", 0, "pretrain")
  assert record["test"] == pytest.approx(dmf[verdict.METRIC], abs=1e-6)
  assert record["mlp_test"] == mlp[verdict.METRIC]
  # The restored first stage scores on validation what its training loop selected it on.
  with open(os.path.join(workdir, cells[1].name, "results.json")) as f:
    meta = json.load(f)["meta"]
  assert meta["stages"][0]["stage"] == "pretrain"
  assert record["first_validation"] == pytest.approx(meta["stages"][0]["best_value"], abs=1e-6)
  (row,) = stage_gain.summary([record])
  energy = record["test"] - record["first_test"]
  assert row["energy"]["mean"] == pytest.approx(energy)
  assert row["draw"]["mean"] == pytest.approx(record["first_test"] - record["mlp_test"])
  assert row["total"]["mean"] == pytest.approx(energy + row["draw"]["mean"])
  assert row["past_start"] == int(stage_gain.past_start(record))
  assert stage_gain.past_start(record) == (
    meta["selected_stage"] == "pairwise" and meta["selected_step"] > 0
  )
  # Against a report: the MLP is the report's, and a cell the report scores otherwise
  # is refused.
  report = [{**mlp, verdict.METRIC: 0.25}, dmf]
  (against,) = stage_gain.records([workdir], str(data_dir), report)
  assert against == {**record, "mlp_test": 0.25}
  with pytest.raises(ValueError, match="not the report's cell"):
    stage_gain.records([workdir], str(data_dir), [{**dmf, verdict.METRIC: 0.0}])
  body = stage_gain.report([record])
  assert f"| dmf | yeast | 60 | 0 | {row['past_start']} of 1 |" in body
  # Two seeds of made-up records: a paired interval over seeds, and the pool over pairs.
  other = {**record, "seed": 1, "test": record["test"] + 0.02, "first_test": record["first_test"]}
  (row,) = stage_gain.summary([record, other])
  assert row["energy"]["n"] == 2 and row["energy"]["mean"] == pytest.approx(energy + 0.01)
  (pool,) = stage_gain.pooled([row])
  assert pool["energy"]["mean"] == pytest.approx(row["energy"]["mean"])


def test_an_energy_on_the_tuned_mlp_continues_the_mlp_cell(data_dir, tmp_path):
  overrides = [
    "train.steps=6",
    "train.eval_every=2",
    "tune.trials=3",
    "tune.folds=2",
    "tune.trial_eval_every=2",
    *_short(["dmf"], "yeast", 6),  # `dmf:` overrides reach dmf_on_mlp's cells too
  ]
  tune_budget = verdict.budget(overrides)
  cells = verdict.cells(["yeast"], [60], ["dmf_on_mlp"], [0], linear=False)
  assert [c.cell.method for c in cells] == ["mlp", "dmf_on_mlp"]  # the MLP comes first
  assert verdict.prerequisite(cells[1]) == cells[0].name and verdict.prerequisite(cells[0]) is None
  workdir = tmp_path / "runs"
  # Without its MLP cell the cell is skipped, not failed.
  assert verdict.run(cells[1:], str(workdir), str(data_dir), tune_budget, 1, overrides) == []
  # Two processes: the dmf cell waits for the MLP cell it starts from.
  mlp, dmf = verdict.run(cells, str(workdir), str(data_dir), tune_budget, 2, overrides)
  read = lambda cell, name: json.loads((workdir / cell.name / name).read_text())
  results, chosen = read(cells[1], "results.json"), read(cells[1], "chosen.json")
  mlp_chosen = read(cells[0], "chosen.json")
  assert chosen["start_from"] == str(workdir / cells[0].name)
  # The MLP's setting is fixed (its learning rate as the pretrain stage's); only the
  # pairwise stage's rate is searched: a grid of two settings under a budget of three.
  assert chosen["num_trials"] == 2 and chosen["budget"]["grid_size"] == 2
  lr = mlp_chosen["overrides"].pop("optimizer.learning_rate")
  assert chosen["overrides"]["stages.pretrain.optimizer.learning_rate"] == lr
  assert mlp_chosen["overrides"].items() <= chosen["overrides"].items()
  # Every trial's first stage is the MLP's chosen trial, fold for fold ...
  mlp_trial = [
    json.loads(line) for line in (workdir / cells[0].name / "trials.jsonl").read_text().splitlines()
  ][mlp_chosen["trial"]]
  for line in (workdir / cells[1].name / "trials.jsonl").read_text().splitlines():
    folds = json.loads(line)["folds"]
    assert [f["stages"][0]["values"] for f in folds] == [f["values"] for f in mlp_trial["folds"]]
  # ... and the final run's is the MLP cell's run, so the method never ends below it
  # on validation.
  first = results["meta"]["stages"][0]
  assert first["stage"] == "pretrain" and first["best_value"] == mlp["validation/example_f1"]
  assert dmf["validation/example_f1"] >= mlp["validation/example_f1"]
  assert not (workdir / cells[1].name / "stages" / "pretrain" / "metrics.jsonl").exists()
  body = verdict.report([mlp, dmf], tune_budget, True)
  assert "| yeast | 60 | " in body and "on top of the base's cell that it starts from" in body


@pytest.mark.parametrize(
  "module, cells, contents",
  [
    ("threshold_rule", "multi-label verdict cell", "results.json and run.json"),
    ("stage_gain", "multi-stage multi-label verdict cell", "results.json, run.json and stages/"),
  ],
)
def test_a_verdict_analysis_of_a_workdir_without_cells_is_a_one_line_error(
  module, cells, contents, tmp_path
):
  (tmp_path / "seed0" / "yeast" / "n60" / "mlp_tuned").mkdir(parents=True)  # unfinished
  proc = subprocess.run(
    [sys.executable, "-m", f"benchmarks.{module}", f"--workdir={tmp_path}"],
    capture_output=True,
    text=True,
    check=False,
  )
  assert proc.returncode != 0
  assert proc.stderr.strip().splitlines()[-1] == (
    f"benchmarks.{module}: error: --workdir={tmp_path} holds no finished {cells} "
    f"(seed<s>/<dataset>/n<size>/<method>_<mode> with {contents})"
  )


def test_a_finished_cell_of_another_set_is_a_one_line_error(data_dir, tmp_path):
  (cell,) = verdict.cells(["yeast"], [60], ["mlp"], [0], linear=False)
  directory = tmp_path / cell.name
  directory.mkdir(parents=True)
  ran_with = verdict.cell_overrides(cell, verdict.budget(), ["train.steps=4"])
  (directory / "results.json").write_text(
    json.dumps({verdict.METRIC: 0.5, small_data.OVERRIDES_KEY: list(ran_with)})
  )
  command = [
    sys.executable,
    "-m",
    "benchmarks.verdict",
    f"--data_dir={data_dir}",
    f"--workdir={tmp_path}",
    "--datasets=yeast",
    "--sizes=60",
    "--seeds=0",
    "--methods=mlp",
    "--nolinear",
    "--report_only",
  ]
  proc = subprocess.run([*command, "--set=train.steps=5"], capture_output=True, text=True)
  assert proc.returncode != 0
  assert proc.stderr.strip().splitlines()[-1] == (
    f"benchmarks.verdict: error: {directory} finished with overrides ['train.steps=4'], "
    "not ['train.steps=5']: use another --workdir"
  )
  proc = subprocess.run([*command, "--set=train.steps=4"], capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr


def test_stage_gain_with_a_malformed_records_file_is_a_one_line_error(tmp_path):
  records = tmp_path / "verdict.json"
  records.write_text('{"records": []}')  # no budget: not a report's .json
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "benchmarks.stage_gain",
      f"--workdir={tmp_path}",
      f"--records={records}",
    ],
    capture_output=True,
    text=True,
    check=False,
  )
  assert proc.returncode != 0
  assert proc.stderr.strip().splitlines()[-1] == (
    f"benchmarks.stage_gain: error: {records} is not a verdict report's .json: no budget "
    "and records"
  )


def test_changes_between_two_reports_by_hand():
  before = [record("yeast", 500, "mlp", s, f) for s, f in enumerate((0.50, 0.60, 0.70))]
  before.append(record("cal500", 0, "mlp", 0, 0.40))
  after = [record("yeast", 500, "mlp", s, f) for s, f in enumerate((0.52, 0.59, 0.70))]
  after[1]["refit_of_earlier_search"] = True
  after.append(record("yeast", 500, "dmf", 0, 0.9))  # only after: not compared
  (cell, method) = verdict_changes.changes(before, after)
  assert cell == {**method, "dataset": "yeast", "size": 500}
  assert (cell["n"], cell["rose"], cell["fell"]) == (3, 1, 1)
  assert cell["mean"] == pytest.approx((2 - 1 + 0) / 3)
  assert (cell["min"], cell["max"]) == (pytest.approx(-1), pytest.approx(2))
  (only,) = verdict_changes.changes(before, after, only_refit=True)[1:]
  assert only["n"] == 1 and only["mean"] == pytest.approx(-1)
  # A cell refit for an earlier report, carried over whole, was not refit now.
  before[2]["refit_of_earlier_search"] = after[2]["refit_of_earlier_search"] = True
  (only,) = verdict_changes.changes(before, after, only_refit=True)[1:]
  assert only["n"] == 1 and only["mean"] == pytest.approx(-1)
  assert "| mlp | **all** |  | 3 | +0.33 | -1.00 | +2.00 | 1 | 1 |" in verdict_changes.report(
    [cell, method], 3, 1, 1
  )


def test_an_unreadable_earlier_report_is_a_one_line_usage_error(tmp_path):
  budget = verdict.budget()
  bad = tmp_path / "bad.json"
  for text in ("{}", "not json", "[]"):
    bad.write_text(text)
    with pytest.raises(verdict.app.UsageError, match="is not a verdict report's .json"):
      verdict.read_records(str(bad), budget, True)
  with pytest.raises(verdict.app.UsageError, match="No such file"):
    verdict.read_records(str(tmp_path / "missing.json"), budget, True)
  bad.write_text(json.dumps({"budget": {"tune": {"trials": 99}}, "records": []}))
  with pytest.raises(verdict.app.UsageError, match="not this budget"):
    verdict.read_records(str(bad), budget, True)


def test_a_cell_is_trained_by_one_process_at_a_time(tmp_path, hold_workdir, monkeypatch):
  cell = verdict.cells(["yeast"], [60], ["mlp"], [0])[0]
  directory = str(tmp_path / cell.name)
  trained = []

  def run_cell(c, workdir, *_):
    trained.append(os.path.join(workdir, c.name))
    return {"dataset": c.dataset, "size": c.size, "method": c.method, verdict.METRIC: 0.5}

  monkeypatch.setattr(small_data, "run_cell", run_cell)
  # Held by a live process: a second run skips the cell, trains nothing and leaves the
  # holder's lock in place.
  holder = hold_workdir(directory)
  line = verdict._attempt(cell, str(tmp_path), "unused", [])
  assert line.startswith("skipped (") and "in use by another process" in line, line
  assert trained == [] and os.listdir(directory) == [workdirs.LOCK_FILE]
  # The lock goes with its process: the cell is then trained.
  holder.kill()
  holder.wait()
  record = verdict._attempt(cell, str(tmp_path), "unused", [])
  assert trained == [directory] and record["seed"] == 0 and record[verdict.METRIC] == 0.5


def test_a_method_on_a_base_the_size_skips_is_skipped_naming_why(tmp_path, monkeypatch, capsys):
  cells = verdict.cells(["genbase"], [500], ["dmf_on_mlp"], [0], linear=False)
  reason = "skipped (genbase has 463 training rows, fewer than 500)"
  attempted = []

  def attempt(cell, *args, **kwargs):
    attempted.append(cell.cell.method)
    return reason

  monkeypatch.setattr(verdict, "_attempt", attempt)
  assert verdict.run(cells, str(tmp_path), "unused", verdict.budget([]), 1) == []
  assert attempted == ["mlp"]  # the method on it is not attempted
  assert (
    capsys.readouterr()
    .out.splitlines()[-1]
    .endswith(
      "seed0/genbase/n500/dmf_on_mlp_tuned: skipped (it starts from "
      "seed0/genbase/n500/mlp_tuned: genbase has 463 training rows, fewer than 500)"
    )
  )


# Every method the report runs on a tuned base, with the overrides the report gives it.
ON_BASE = [
  ("dmf_on_mlp", ()),
  ("infnet_on_mlp", ()),
  ("implicit_on_mlp", ()),
  ("seal_static_on_mlp", ()),
  ("seal_dynamic_on_mlp", ("stage_order=pretrain,seal",)),
  ("dvn_on_mlp", ("stage_order=pretrain,dvn",)),
  ("dmf_soft_f1_on_mlp_soft_f1", ()),
]


@pytest.mark.parametrize("method,overrides", ON_BASE)
def test_the_first_stage_of_a_method_on_a_base_is_that_base_s_run(method, overrides):
  # Up to the keys of the base's search, which `tune.start_from` sets to the base's
  # choice; any other key that differs makes `check_start` refuse every cell.
  from experiments import search_spaces
  from experiments import stage_reuse

  name, base_name = small_data.config_name(method), small_data.start_method(method)
  for dataset in verdict.DATASETS:
    space = {
      k
      for key in search_spaces.for_config(base_name, dataset)
      for k in search_spaces.config_keys(key)
    }
    config = configuration.get_config(name, dataset, list(overrides))
    stage = dict(configuration.stage_configs(config))[stage_reuse.first_stage(config)]
    base = configuration.get_config(base_name, dataset).to_dict()
    differ = stage_reuse.stage_mismatch(stage, base)
    assert {d.split(" ")[0] for d in differ} <= space, (dataset, differ)


def test_a_method_on_another_base_waits_for_and_starts_from_that_base():
  method = "dmf_soft_f1_on_mlp_soft_f1"
  assert small_data.config_name(method) == "dmf_soft_f1"
  assert small_data.start_method(method) == "mlp_soft_f1" and small_data.start_method("dmf") is None
  cells = verdict.cells(["bibtex"], [250], [method, "dmf_on_mlp"], [0], linear=False)
  assert [c.cell.method for c in cells] == ["mlp_soft_f1", "mlp", method, "dmf_on_mlp"]
  assert verdict.prerequisite(cells[2]) == cells[0].name
  # The report puts a variant after its method, or after every other method.
  listed = ["seal_f1", method, "mlp_soft_f1", "dmf_on_mlp", "dmf", "mlp"]
  assert sorted(listed, key=verdict.report_order) == [
    "mlp",
    "dmf",
    "dmf_on_mlp",
    "mlp_soft_f1",
    "seal_f1",
    method,
  ]
  # Its first stage is the base's run (checked for every such method above); its
  # couplings train on the score.
  stage = dict(configuration.stage_configs(configuration.get_config("dmf_soft_f1", "yeast")))
  assert stage["pairwise"].loss.score == "soft_f1"

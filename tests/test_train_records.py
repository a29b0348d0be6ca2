"""benchmarks.train_records: means of logged training metrics, and its errors (the pure
functions live in benchmarks.reproduction_plots: train_records defines absl flags)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from benchmarks import reproduction_plots

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _write(path, records):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(json.dumps(r) + "\n" for r in records) + "\n")


def test_record_means_average_only_the_records_that_log_a_key():
  records = [
    {"step": 0, "train/a": 0.0, "train/b": 3.0},
    {"step": 1, "train/a": 0.5},
    {"step": 2, "validation/f1": 0.9},
  ]
  assert reproduction_plots.record_means(records, ["train/a", "train/b"]) == {
    "train/a": (0.25, 2),
    "train/b": (3.0, 1),
  }


def test_a_key_no_record_logs_names_the_logged_keys():
  with pytest.raises(ValueError, match=r"no record logs 'train/c'.*'train/a'"):
    reproduction_plots.record_means([{"step": 0, "train/a": 1.0}], ["train/c"])


def test_an_absent_file_reads_as_no_records(tmp_path):
  assert reproduction_plots.read_metrics_jsonl(str(tmp_path / "metrics.jsonl")) == []


def test_the_command_prints_a_stage_table_and_rejects_a_wrong_stage(tmp_path):
  _write(
    tmp_path / "stages" / "infnet" / "metrics.jsonl",
    [{"step": 0, "train/active_margin": 0.0}, {"step": 10, "train/active_margin": 0.2}],
  )
  run = lambda *flags: subprocess.run(
    [sys.executable, "-m", "benchmarks.train_records", f"--run_dir={tmp_path}", *flags],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=120,
    env=dict(os.environ),
  )
  proc = run("--stage=infnet", "--keys=train/active_margin")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "| train/active_margin | 0.100 | 2 |" in proc.stdout
  proc = run("--stage=pretrain", "--keys=train/active_margin")
  assert proc.returncode != 0
  assert "absent or empty" in proc.stderr

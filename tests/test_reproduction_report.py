"""REPRODUCTION.md and the papers' pages are generated from results/ and up to date."""

import json
import os
import pathlib
import re
import shutil

import pytest

from benchmarks import paper_tables as pt
from benchmarks import reproduction
from benchmarks import reproduction_plots

REPO_ROOT = pathlib.Path(reproduction.REPO_ROOT)
RESULTS_DIR = pathlib.Path(reproduction.RESULTS_DIR)
PAPERS_DIR = REPO_ROOT.parent / "shared" / "papers"


@pytest.fixture(scope="module")
def committed_report():
  return reproduction.build_report(reproduction.Results(str(RESULTS_DIR)))


def _committed(page: str) -> str:
  return (REPO_ROOT / page).read_text(encoding="utf-8")


def test_committed_report_is_up_to_date(committed_report):
  assert committed_report.text == _committed("REPRODUCTION.md"), (
    f"REPRODUCTION.md is stale: run `{reproduction.COMMAND}` and commit the result"
  )


def test_committed_paper_pages_are_up_to_date(committed_report):
  assert sorted(committed_report.pages) == sorted(
    os.path.join(reproduction.PAGES_DIR, f"{p.key}.md") for p in pt.PAPERS
  )
  for page, text in committed_report.pages.items():
    assert text == _committed(page), (
      f"{page} is stale: run `{reproduction.COMMAND}` and commit the result"
    )
  written = sorted(p.name for p in (REPO_ROOT / reproduction.PAGES_DIR).glob("*.md"))
  assert written == sorted(os.path.basename(p) for p in committed_report.pages), (
    f"{reproduction.PAGES_DIR} holds pages the command no longer writes"
  )


def test_the_report_and_pages_are_written_by_its_command(tmp_path):
  out = tmp_path / "REPRODUCTION.md"
  reproduction.main([f"--out={out}", "--no-write_plots"])
  assert out.read_text(encoding="utf-8") == _committed("REPRODUCTION.md")
  for paper in pt.PAPERS:
    page = reproduction.page_path(paper)
    assert (tmp_path / page).read_text(encoding="utf-8") == _committed(page), page


def test_the_summary_is_short_and_links_each_page(committed_report):
  assert committed_report.text.count("\n") <= 1000
  for paper in pt.PAPERS:
    page = reproduction.page_path(paper)
    assert f"]({page})" in committed_report.text, page
    assert "](../../REPRODUCTION.md)" in committed_report.pages[page]


def _links(text: str) -> list[str]:
  """The targets of a markdown text's links and images, without their fragments."""
  return [
    t.split("#")[0]
    for t in re.findall(r"\]\(([^)\s]+)\)", text)
    if not re.match(r"[a-z]+://", t) and not t.startswith("#")
  ]


def test_every_link_of_the_report_and_pages_resolves(committed_report):
  pages = {"REPRODUCTION.md": committed_report.text, **committed_report.pages}
  for page, text in pages.items():
    base = (REPO_ROOT / page).parent
    for link in _links(text):
      assert (base / link).exists(), (page, link)


def test_every_link_of_the_readme_and_docs_resolves():
  for path in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]:
    for link in _links(path.read_text(encoding="utf-8")):
      assert (path.parent / link).exists(), (str(path.relative_to(REPO_ROOT)), link)


def test_every_linked_figure_is_committed(committed_report):
  plots = RESULTS_DIR / reproduction.PLOTS_SUBDIR
  for figure in committed_report.figures:
    assert (plots / figure.name).is_file(), figure.name
  pages = {"REPRODUCTION.md": committed_report.text, **committed_report.pages}
  for page, text in pages.items():
    for link in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):
      assert ((REPO_ROOT / page).parent / link).is_file(), (page, link)


def test_every_results_file_appears(committed_report):
  text = "\n".join([committed_report.text, *committed_report.pages.values()])
  folders = [RESULTS_DIR / key for key in reproduction.paper_folders()]
  paths = [p for folder in [RESULTS_DIR, *folders] for p in sorted(folder.iterdir())]
  for path in paths:
    if path.is_dir() or path.name.startswith("."):
      continue
    name = path.relative_to(RESULTS_DIR).as_posix()
    assert f"results/{name}" in text, name


def test_pages_list_each_results_file_in_one_line_not_its_content(committed_report):
  for paper in pt.PAPERS:
    page = committed_report.pages[reproduction.page_path(paper)]
    listing = page.split("## Results files of this paper\n\n")[1]
    lines = [line for line in listing.splitlines() if line.startswith("- ")]
    markdown = sorted(p.name for p in (RESULTS_DIR / paper.key).glob("*.md"))
    assert [re.match(r"- \[`results/[^/]+/([^`]+)`\]", line)[1] for line in lines] == (markdown), (
      paper.key
    )
    for line in lines:
      assert len(line) < 1000 and ": " in line, line  # a summary follows the links
    assert "\n|" not in listing and "\n#" not in listing, paper.key  # no table, no heading


def test_each_paper_has_a_results_folder_and_shows_it_whole(committed_report):
  """A paper's results are the files of results/<key>/; the top of results/ holds only
  the papers' numbers, the other folders are the benchmarks' own."""
  assert reproduction.paper_folders() == tuple(p.key for p in pt.PAPERS)
  loose = [
    p.name
    for p in RESULTS_DIR.iterdir()
    if p.is_file() and not p.name.startswith(".") and p.name != "paper_tables.json"
  ]
  assert not loose, f"results files outside a folder: {loose}"
  claimed = reproduction.claimed_files(reproduction.Results(str(RESULTS_DIR)))
  assert claimed[""] == []
  for paper in pt.PAPERS:
    files = sorted(p.name for p in (RESULTS_DIR / paper.key).iterdir() if p.is_file())
    assert files and [f"{paper.key}/{f}" for f in files] == claimed[paper.key], paper.key
    page = committed_report.pages[reproduction.page_path(paper)]
    for name in files:
      assert f"results/{paper.key}/{name}" in page, (paper.key, name)


def test_no_lab_notes_in_the_report_or_pages(committed_report):
  for text in [committed_report.text, *committed_report.pages.values()]:
    assert not re.search(r"\b(session|issue) \d+|work period", text, re.IGNORECASE)


def test_the_report_and_pages_stand_alone(committed_report):
  """No path into the development checkout's shared folder: papers are cited by title and
  link, commands show the data directory as DATA, which the header explains."""
  for page, text in {"REPRODUCTION.md": committed_report.text, **committed_report.pages}.items():
    assert not re.search(r"shared/(data|papers)|\.\./shared", text), page
    assert f"`{reproduction.DATA_DIR}` is your data directory" in text, page
    assert "docs/datasets.md" in text, page
  for paper in pt.PAPERS:
    cited = reproduction.CITATIONS[paper.file]
    assert cited.title in committed_report.text
    assert cited.title in committed_report.pages[reproduction.page_path(paper)]
    assert cited.url.startswith("https://"), paper.key


def test_every_paper_and_paper_file_has_a_citation():
  for paper in pt.PAPERS:
    assert paper.file in reproduction.CITATIONS, paper.key
    for table in paper.tables:
      assert (table.paper_file or paper.file) in reproduction.CITATIONS, table.key
  with pytest.raises(ValueError, match="unknown.txt.*CITATIONS"):
    reproduction.citation("unknown.txt")


def test_recorded_commands_show_the_data_directory_as_a_placeholder(tmp_path):
  base = str(REPO_ROOT)
  assert reproduction.for_users(
    "x --data_dir=../shared/data --config.data.data_dir=../shared/data --path=../shared/data/yeast",
    base,
  ) == ("x --data_dir=DATA --config.data.data_dir=DATA --path=DATA/yeast")
  assert reproduction.for_users(
    "(`shared/data/SOURCES.md`: caveat)", str(REPO_ROOT / "docs" / "papers")
  ) == ("([docs/datasets.md](../datasets.md): caveat)")
  _copy_baselines(tmp_path)
  text = reproduction.build_report(reproduction.Results(str(tmp_path))).text
  assert "--data_dir=DATA --workdir=/tmp/baselines" in text
  # The results file keeps the command as it ran.
  assert "--data_dir=../shared/data" in (tmp_path / "spen" / "baselines.md").read_text()


def _copy_baselines(directory: pathlib.Path) -> None:
  """results/spen/baselines.{md,json} into `directory`'s spen folder."""
  (directory / "spen").mkdir()
  for name in ("baselines.md", "baselines.json"):
    shutil.copy(RESULTS_DIR / "spen" / name, directory / "spen" / name)


def test_missing_results_render_as_not_run(tmp_path):
  _copy_baselines(tmp_path)
  text = reproduction.build_report(reproduction.Results(str(tmp_path))).text
  spen_table1 = text.split("### Table 1 (§7.1)")[1].split("###")[0]
  assert "| BR | `br` | 37.2 | 43.87 [1] |" in spen_table1
  assert "| SPEN | `spen_ssvm` | 42.2 | not run |" in spen_table1
  assert "`e2e/e2e_bibtex.json` (absent)" in spen_table1
  # An absent file's cell is plain "not run"; the line under its table names the files.
  infnet_table2 = text.split("### Table 2 (§7)")[1].split("###")[0]
  assert "| not run |" in infnet_table2
  assert "`infnet/sequences_pos.json` (absent)" in infnet_table2
  assert "not run (" not in text
  assert "## Other results\n\nNone" in text


def test_an_empty_results_directory_gives_a_report_of_not_run_cells(tmp_path):
  report = reproduction.build_report(reproduction.Results(str(tmp_path)))
  assert report.figures == []
  for text in [report.text, *report.pages.values()]:
    assert "[1]" not in text  # no number of ours, so no command
  assert report.text.count("not run") > 50


def test_a_malformed_json_is_an_error_naming_the_file(tmp_path):
  (tmp_path / "broken.json").write_text("[{\"dataset\": ")
  with pytest.raises(ValueError, match="broken.json"):
    reproduction.build_report(reproduction.Results(str(tmp_path)))


def test_a_json_not_in_compare_format_is_an_error_naming_the_file(tmp_path):
  _copy_baselines(tmp_path)
  (tmp_path / "spen" / "baselines.json").write_text(json.dumps({"bibtex": 0.4}))
  with pytest.raises(ValueError, match="spen/baselines.json.*compare"):
    reproduction.build_report(reproduction.Results(str(tmp_path)))


def test_a_cited_json_without_its_command_is_an_error(tmp_path):
  _copy_baselines(tmp_path)
  (tmp_path / "spen" / "baselines.md").write_text("a table typed by hand\n")
  with pytest.raises(ValueError, match="spen/baselines.md.*Generated by"):
    reproduction.build_report(reproduction.Results(str(tmp_path)))


def test_unclaimed_files_are_listed_under_other_results(tmp_path):
  (tmp_path / "zz_new_table.md").write_text(
    "Generated by `python -m x` (code revision abc).\n\n# A new table\n\n| a |\n|---|\n| 1 |\n"
  )
  (tmp_path / "zz_new_table.json").write_text("[]")
  (tmp_path / "notes.txt").write_text("x")
  text = reproduction.build_report(reproduction.Results(str(tmp_path))).text
  other = text.split("## Other results")[1]
  assert "zz_new_table.md" in other and "zz_new_table.json" in other
  assert "`python -m x`" in other  # linked with its command, not embedded
  assert "A new table" not in text
  assert "notes.txt" in other


def test_a_papers_folder_is_shown_on_its_page_and_other_folders_are_not(tmp_path):
  (tmp_path / "seal").mkdir()
  (tmp_path / "seal" / "notes.txt").write_text("x")
  (tmp_path / "suite").mkdir()
  (tmp_path / "suite" / "summary.md").write_text("Generated by `x` (code revision a).\n")
  results = reproduction.Results(str(tmp_path))
  assert results.files == ["seal/notes.txt"]
  report = reproduction.build_report(results)
  assert "[`seal/notes.txt`](" in report.pages[reproduction.page_path(pt.PAPERS[-1])]
  assert "## Other results\n\nNone" in report.text


def test_every_cell_of_ours_points_at_a_row_that_exists():
  """A typo in paper_tables.json would show as 'not run': a cell naming a committed file
  must find its row there (a tuple of files may fall back to a partial table)."""
  results = reproduction.Results(str(RESULTS_DIR))
  for paper in pt.PAPERS:
    for table in paper.tables:
      assert all(len(row.cells) == len(row.paper) == len(table.columns) for row in table.rows)
      for row in table.rows:
        for cell, column in zip(row.cells, table.columns):
          if isinstance(cell, (pt.Json, pt.Md)) and isinstance(cell.file, str):
            resolved = reproduction.resolve(cell, column.metrics, results)
            assert "file present" not in resolved.awaiting, (table.key, row.label, resolved)


def _numbers(text: str) -> list[str]:
  return re.findall(r"\d*\.\d+|\d+", text)


@pytest.mark.skipif(not PAPERS_DIR.is_dir(), reason="shared/papers is not beside the repo")
def test_every_paper_number_occurs_in_its_paper():
  for paper in pt.PAPERS:
    for table in paper.tables:
      source = (PAPERS_DIR / (table.paper_file or paper.file)).read_text(encoding="utf-8")
      found = set(_numbers(source))
      for row in table.rows:
        for value in row.paper:
          for number in _numbers(value):
            assert number in found, (table.key, row.label, value)


def test_markdown_cell_finds_a_row_by_its_leading_cells():
  text = (
    "intro\n\n| dataset | method | ex-F1 |\n|---|---|---|\n| bibtex | mlp | 44.87 |\n"
    "| bibtex | dmf | 43.97 |\n\nafter\n"
  )
  assert reproduction.markdown_cell(text, ("bibtex", "dmf"), "ex-F1") == "43.97"
  assert reproduction.markdown_cell(text, ("bibtex",), "ex-F1") == "44.87"
  assert reproduction.markdown_cell(text, ("yeast",), "ex-F1") is None
  assert reproduction.markdown_cell(text, ("bibtex",), "Hamming") is None


def test_a_cell_of_several_seeds_pools_their_runs(tmp_path):
  rows = [
    {"dataset": "bibtex", "method": m, "runs": [{"test/example_f1": v}]}
    for m, v in (
      ("mlp", 0.40),
      ("mlp:train.seed=1", 0.42),
      ("mlp:train.seed=2", 0.44),
      ("other", 0.9),
    )
  ]
  (tmp_path / "runs.json").write_text(json.dumps(rows))
  (tmp_path / "runs.md").write_text("Generated by `python -m x` (code revision abc).\n")
  results = reproduction.Results(str(tmp_path))
  metric = (pt.Metric("ours", "test/example_f1"),)
  assert pt.seeds("mlp") == ("mlp", "mlp:train.seed=1", "mlp:train.seed=2")
  pooled = reproduction.resolve(pt.Json("runs", "bibtex", pt.seeds("mlp")), metric, results)
  assert pooled.values == ("42.00 ± 2.00 (n=3)",) and pooled.status == "ours"
  one = reproduction.resolve(pt.Json("runs", "bibtex", "mlp:train.seed=1"), metric, results)
  assert one.values == ("42.00",)
  # A missing seed is not silently dropped: the cell waits for it, naming it.
  partial = reproduction.resolve(pt.Json("runs", "bibtex", pt.seeds("mlp", 4)), metric, results)
  assert partial.status == "not run" and "mlp:train.seed=3" in partial.awaiting
  # A NotRun cell is plain "not run", or names the results file that would hold it.
  assert reproduction.resolve(pt.NotRun(), metric, results).values == ("not run",)
  named = reproduction.resolve(pt.NotRun("runs_more.json"), metric, results)
  assert named.values == ("not run (runs_more.json)",) and named.status == "not run"


def test_seeds_trained_by_separate_commands_pool_across_files(tmp_path):
  def write(stem, rows, command):
    (tmp_path / f"{stem}.json").write_text(
      json.dumps(
        [{"dataset": "bibtex", "method": m, "runs": [{"test/example_f1": v}]} for m, v in rows]
      )
    )
    (tmp_path / f"{stem}.md").write_text(f"Generated by `{command}` (code revision abc).\n")

  write("first", [("mlp", 0.40), ("mlp:train.seed=1", 0.10)], "python -m first")
  write("later", [("mlp:train.seed=1", 0.42), ("mlp:train.seed=2", 0.44)], "python -m later")
  results = reproduction.Results(str(tmp_path))
  metric = (pt.Metric("ours", "test/example_f1"),)
  cell = pt.Json(("first", "later"), "bibtex", pt.seeds("mlp"))
  pooled = reproduction.resolve(cell, metric, results)
  # Each seed from the first file that has it: seed 1 from `first`, seed 2 from `later`.
  assert pooled.values == ("31.33 ± 18.58 (n=3)",)
  assert pooled.files == ("first", "later")
  assert [c[0] for c in pooled.commands] == ["python -m first", "python -m later"]
  # A file holding every seed is taken whole, before pooling across files.
  write("whole", [(m, 0.5) for m in pt.seeds("mlp")], "python -m whole")
  cell = pt.Json(("first", "whole", "later"), "bibtex", pt.seeds("mlp"))
  results = reproduction.Results(str(tmp_path))
  assert reproduction.resolve(cell, metric, results).files == ("whole",)
  # A seed in no file leaves the cell waiting for it.
  partial = reproduction.resolve(
    pt.Json(("first", "later"), "bibtex", pt.seeds("mlp", 4)), metric, results
  )
  assert partial.status == "not run" and "mlp:train.seed=3" in partial.awaiting


def test_values_of_several_runs_show_mean_and_sample_std():
  assert reproduction.format_values([0.5]) == "0.50"
  assert reproduction.format_values([1.0, 2.0, 3.0]) == "2.00 ± 1.00 (n=3)"


def test_generated_by_reads_the_first_line():
  assert reproduction.generated_by(
    "Generated by `python -m a --b=c` (code revision 1234+dirty).\n\nx"
  ) == ("python -m a --b=c", "1234+dirty")
  assert reproduction.generated_by("# A hand-written file") is None


def test_a_file_summary_is_its_title_or_first_sentence_of_prose():
  generated = "Generated by `python -m x` (code revision 1).\n\n"
  assert reproduction.file_summary(generated + "# A title\n\nProse.") == "A title"
  table = "| dataset | method | ex-F1 (tuned) |\n|---|---|---|\n| bibtex | mlp | 44.87 |"
  legend = reproduction.comparison_tables.preamble(table)
  text = (
    generated
    + legend
    + "\n\n(An aside on one row.)\n\n"
    + table
    + "\n\nThe runs of this table, one seed each, all trained on 2 CPU cores. And more."
  )
  assert reproduction.file_summary(text) == (
    "The runs of this table, one seed each, all trained on 2 CPU cores."
  )
  assert reproduction.file_summary(generated + legend + "\n\n" + table) == ""
  # A short first sentence keeps the next; abbreviations and code spans do not end one;
  # prose stops where a list starts, its colon a full stop.
  assert (
    reproduction.file_summary(
      "Target: 47.74.\nSeeds 0-2 of the `dvn` config, e.g. `x. y`, on\ncal500 here:\n- a\n- b"
    )
    == "Target: 47.74. Seeds 0-2 of the `dvn` config, e.g. `x. y`, on cal500 here."
  )
  long = "A sentence " + ", on and on" * 40 + "."
  summary = reproduction.first_sentences(long)
  assert summary.endswith(", on and on …") and len(summary) <= 302


def test_a_compare_table_without_prose_is_summarized_by_its_rows(tmp_path):
  (tmp_path / "spen").mkdir()
  rows = [
    {"dataset": "yeast", "method": m, "runs": [{}]}
    for m in ("mlp", "spen_ssvm", "spen_ssvm:train.seed=1")
  ]
  (tmp_path / "spen" / "t.json").write_text(json.dumps(rows))
  (tmp_path / "spen" / "t.md").write_text(
    "Generated by `python -m experiments.compare --out=t.md` (code revision 1).\n\n"
    "| dataset | method |\n|---|---|\n| yeast | mlp |\n"
  )
  results = reproduction.Results(str(tmp_path))
  line = reproduction.describe_file("spen/t.md", results, str(tmp_path))
  assert line.startswith("- [`") and line.endswith(
    "/spen/t.md`](spen/t.md) (data: [`t.json`](spen/t.json)): `experiments.compare`, "
    "3 rows of `mlp`, `spen_ssvm` on yeast, some with overrides."
  )


def test_plots_find_runs_where_compare_puts_them():
  from experiments import compare  # pylint: disable=g-import-not-at-top

  spec = "seal_dynamic:seal.objective=nce"
  assert reproduction_plots.run_dir("w", "bibtex", spec, 1) == os.path.join(
    "w", "bibtex", compare.run_name(spec)
  )


def test_plots_scale_metrics_as_compare_prints_them():
  from experiments import comparison_tables  # pylint: disable=g-import-not-at-top

  for key in (
    "validation/psnr",
    "test/psnr",
    "threshold",
    "validation/example_f1",
    "validation/mean_iou",
    "validation/token_acc",
    "validation/hamming_loss",
  ):
    assert reproduction_plots.is_unscaled(key) == comparison_tables.unscaled(key), key


def _write_run(directory: pathlib.Path, stages, records) -> None:
  directory.mkdir(parents=True)
  meta = {"config": {"train": {"select_metric": "validation/acc"}}, "stages": stages}
  (directory / "results.json").write_text(json.dumps({"meta": meta}))
  for stage, lines in records.items():
    stage_dir = directory / "stages" / stage
    stage_dir.mkdir(parents=True)
    (stage_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_curves_offset_each_stage_by_the_selected_steps_before_it(tmp_path):
  stages = [
    {"stage": "pretrain", "selected_step": 200, "final_step": 300},
    {"stage": "joint", "selected_step": 100, "final_step": 100},
  ]
  _write_run(
    tmp_path / "bibtex" / "seal_dynamic__seal.objective-nce",
    stages,
    {
      "pretrain": [
        {"step": 50, "train/loss": 1.0},
        {"step": 100, "validation/acc": 0.2},
        {"step": 200, "validation/acc": 0.4},
        {"step": 300, "validation/acc": 0.3},
      ],
      "joint": [{"step": 100, "validation/acc": 0.5}, {"step": 100, "validation/acc": 0.6}],
    },
  )
  rows = [
    {"dataset": "bibtex", "method": "seal_dynamic:seal.objective=nce", "runs": [{}]},
    {"dataset": "bibtex", "method": "absent", "runs": [{}]},
  ]
  curves = reproduction_plots.extract_curves(str(tmp_path), rows)
  assert list(curves) == ["bibtex/seal_dynamic:seal.objective=nce"]
  curve = curves["bibtex/seal_dynamic:seal.objective=nce"]
  assert curve["metric"] == "validation/acc"
  assert curve["stage_starts"] == [0, 200]
  # A repeated step (a resumed run's duplicate line) keeps its last record.
  assert curve["points"] == [[100, 0.2], [200, 0.4], [300, 0.3], [300, 0.6]]


def test_update_curves_reads_the_workdir_of_each_command(tmp_path):
  results_dir, workdir = tmp_path / "results", tmp_path / "runs"
  results_dir.mkdir()
  (results_dir / "toy.md").write_text(
    f"Generated by `python -m experiments.compare --workdir={workdir} --out=toy.md` "
    "(code revision abc).\n"
  )
  (results_dir / "toy.json").write_text(
    json.dumps([{"dataset": "synthetic", "method": "mlp", "runs": [{"test/example_f1": 0.5}]}])
  )
  _write_run(
    workdir / "synthetic" / "mlp",
    [{"stage": "s", "selected_step": 2}],
    {"s": [{"step": 1, "validation/acc": 0.1}, {"step": 2, "validation/acc": 0.2}]},
  )
  assert reproduction.update_curves(reproduction.Results(str(results_dir)), {}) == ["toy"]
  out = tmp_path / "R.md"
  written = reproduction.write_report(str(out), str(results_dir))
  assert [os.path.basename(p) for p in written] == ["learning_curves_toy.png"]
  assert "![learning curves of toy](" in out.read_text(encoding="utf-8")


def test_the_gbi_steps_plot_draws_the_committed_rows(tmp_path):
  results = reproduction.Results(str(RESULTS_DIR))
  stems = [f[:-5] for f in results.files if f.startswith("spen/gbi_steps") and f.endswith(".json")]
  assert stems, "results/spen/gbi_steps_*.json (benchmarks/gbi_steps.py) is committed"
  path = tmp_path / "gbi.png"
  reproduction_plots.plot_gbi_steps(results.compare_rows(stems[0]), str(path), stems[0])
  assert path.stat().st_size > 1000


def test_runs_dir_must_be_stem_equals_dir(tmp_path):
  with pytest.raises(SystemExit):
    reproduction.main([f"--out={tmp_path / 'R.md'}", "--runs_dir=nodir"])


def test_paper_tables_are_read_from_the_json_file():
  assert [p.key for p in pt.PAPERS] == ["spen", "e2e", "infnet", "implicit", "seal"]
  assert pt.table("infnet_table2") is pt.INFNET_TABLE2
  assert os.path.dirname(pt.PAPER_TABLES_FILE) == reproduction.RESULTS_DIR


def _paper_tables(rows) -> dict:
  table = {
    "key": "t",
    "where": "Table 1",
    "title": "toy",
    "columns": [{"name": "bibtex", "metrics": [{"label": "ours", "key": "f1"}]}],
    "rows": rows,
  }
  return {
    "papers": [
      {"key": "p", "title": "P", "file": "p.txt", "data_differs": ["- a", "- b"], "tables": [table]}
    ]
  }


def test_paper_tables_cells_decode_to_their_types(tmp_path):
  rows = [
    {
      "label": "MLP",
      "paper": ["38.9"],
      "ours": "mlp",
      "cells": [{"json": "runs", "dataset": "bibtex", "method": {"seeds": "mlp", "n": 2}}],
    },
    {"label": "BR", "cells": [{"json": ["a", "b"], "dataset": "bibtex", "method": ["br"]}]},
    {"label": "MD", "cells": [{"md": "spen", "row": ["bibtex"], "columns": ["F1"]}]},
    {"label": "LR", "paper": ["39.0"], "cells": ["other system"]},
    {"label": "later", "cells": [{"not_run": "runs_more.json"}]},
    {"label": "none", "cells": ["not run"]},
  ]
  path = tmp_path / "paper_tables.json"
  path.write_text(json.dumps(_paper_tables(rows)))
  (paper,) = pt.load(str(path))
  assert paper.data_differs == "- a\n- b" and paper.key == "p"
  cells = [row.cells[0] for row in paper.tables[0].rows]
  assert cells[0] == pt.Json("runs", "bibtex", ("mlp", "mlp:train.seed=1"))
  assert cells[1] == pt.Json(("a", "b"), "bibtex", ("br",))
  assert cells[2] == pt.Md("spen", ("bibtex",), ("F1",))
  assert cells[3] == pt.OTHER
  assert cells[4] == pt.NotRun("runs_more.json") and cells[5] == pt.NotRun()
  assert paper.tables[0].rows[1].paper == ("",) and paper.tables[0].rows[1].ours == ""
  assert paper.tables[0].columns[0].metrics[0].scale == 100.0


def test_a_malformed_paper_tables_file_is_an_error_naming_it(tmp_path):
  path = tmp_path / "paper_tables.json"
  path.write_text(
    json.dumps(
      _paper_tables([{"label": "two cells", "paper": ["1"], "cells": ["no data", "no data"]}])
    )
  )
  with pytest.raises(ValueError, match="paper_tables.json.*two cells"):
    pt.load(str(path))
  path.write_text("{\"papers\": [")
  with pytest.raises(ValueError, match="paper_tables.json"):
    pt.load(str(path))


# ---------------------------------------------------------------------------------------
# Each method's status sentence: one source, written into three files


def _regions(path: pathlib.Path) -> dict[str, list[str]]:
  return reproduction.generated_regions(path.read_text(encoding="utf-8"))


def test_the_status_sentences_of_readme_and_methods_are_up_to_date(committed_report):
  expected = {name: [text] for name, text in committed_report.regions.items()}
  assert expected and len(expected) == len(pt.STATUS) + 1  # and the verdict's sentence
  assert reproduction.VERDICT_REGION in expected
  for doc in ("REPRODUCTION.md", *reproduction.STATUS_DOCS):
    assert _regions(REPO_ROOT / doc) == expected, (
      f"{doc}: a status sentence differs from results/paper_tables.json's `status` and "
      f"the results: edit the entry there (not the file) and run `{reproduction.COMMAND}`"
    )


def test_the_command_writes_the_status_sentences_into_readme_and_methods(tmp_path):
  reproduction.main([f"--out={tmp_path / 'REPRODUCTION.md'}", "--no-write_plots"])
  for doc in reproduction.STATUS_DOCS:
    written = (tmp_path / doc).read_text(encoding="utf-8")
    committed = _committed(doc)
    assert reproduction.generated_regions(written) == reproduction.generated_regions(committed), (
      f"{doc} is stale: run `{reproduction.COMMAND}` and commit the result"
    )
    # Only the marked regions are the generator's: the rest is the hand-written file.
    assert reproduction._REGION.sub("", written) == reproduction._REGION.sub("", committed)  # pylint: disable=protected-access


def test_readme_methods_and_report_carry_the_same_sentence_per_method():
  files = {doc: _regions(REPO_ROOT / doc) for doc in ("REPRODUCTION.md", *reproduction.STATUS_DOCS)}
  for status in pt.STATUS:
    name = reproduction.status_name(status)
    sentences = {doc: regions.get(name) for doc, regions in files.items()}
    assert all(s is not None and len(s) == 1 for s in sentences.values()), (name, sentences)
    assert len({s[0] for s in sentences.values()}) == 1, (name, sentences)
  for doc, regions in files.items():  # no marker that nothing writes
    names = {reproduction.status_name(s) for s in pt.STATUS} | {reproduction.VERDICT_REGION}
    assert set(regions) == names, doc
    assert len(regions[reproduction.VERDICT_REGION]) == 1, doc
  assert len({r[reproduction.VERDICT_REGION][0] for r in files.values()}) == 1


def test_the_verdict_sentence_is_the_committed_verdicts_or_says_it_has_not_run(tmp_path):
  from benchmarks import verdict

  with open(RESULTS_DIR / reproduction.VERDICT_FILE, encoding="utf-8") as f:
    committed = verdict.finding(json.load(f))
  assert reproduction.verdict_sentence(reproduction.Results(str(RESULTS_DIR))) == committed
  empty = reproduction.Results(str(tmp_path), folders=())
  assert reproduction.verdict_sentence(empty).startswith("not run yet")


def test_the_status_sentences_take_their_numbers_from_the_results():
  sentences = reproduction.status_regions(reproduction.Results(str(RESULTS_DIR)))
  sequences = sentences["status-sequences"]
  # The paper's gain is computed from its printed numbers: 89.8 − 88.8 and 85.6 − 84.9.
  assert "against the +1.0 target" in sequences and "against +0.7" in sequences
  # Each number of ours is a cell of the report's tables.
  table = reproduction.render_table(
    pt.table("infnet_table2"), reproduction.Results(str(RESULTS_DIR))
  )[0]
  bilstm = re.search(r"BiLSTM-CE (\d+\.\d\d)", sequences)[1]
  assert f"| {bilstm} ± " in table
  assert all("{" not in s and "not run" not in s for s in sentences.values())


def test_a_results_change_changes_the_sentence(tmp_path):
  for key in reproduction.paper_folders():
    shutil.copytree(RESULTS_DIR / key, tmp_path / key)
  rows = json.loads((tmp_path / "seal" / "horses_seeds.json").read_text())
  before = reproduction.status_regions(reproduction.Results(str(tmp_path)))
  assert "not reproduced" in before["status-segmentation"]
  for row in rows:  # SEAL-dynamic far above the FCN on every seed
    if row["method"].startswith("seal_dynamic"):
      for run in row["runs"]:
        run["test/mean_iou"] = 0.9
  (tmp_path / "seal" / "horses_seeds.json").write_text(json.dumps(rows))
  after = reproduction.status_regions(reproduction.Results(str(tmp_path)))
  assert after["status-segmentation"].startswith("SEAL's gain over the FCN reproduced")
  assert "regression 90.00 vs FCN" in after["status-segmentation"]
  # An empty results directory leaves the sentences without numbers, not an error.
  empty = tmp_path / "empty"
  empty.mkdir()
  sentences = reproduction.status_regions(reproduction.Results(str(empty)))
  assert "not run" in sentences["status-sequences"]


def test_status_values_format_gains_and_verdicts(tmp_path):
  results = reproduction.Results(str(tmp_path))  # empty: only the paper's numbers
  pos = ["infnet_table2", "compound, stacked", "POS"]
  bilstm = ["infnet_table2", "BiLSTM", "POS"]
  value = lambda ref: reproduction.status_value(ref, "k", results)
  assert value({"paper": ["spen_table2", "SPEN", "yeast"]}) == "20.0"  # of "20.0 ± .3"
  assert value({"gain": [{"paper": pos}, {"paper": bilstm}]}) == "+1.0"
  assert value({"gain": [{"paper": bilstm}, {"paper": pos}]}) == "−1.0"
  assert (
    value({"verdict": [{"paper": pos}, {"paper": bilstm}], "yes": "met", "no": "not met"}) == "met"
  )
  assert (
    value(
      {
        "verdict": [{"paper": pos}, {"paper": bilstm}],
        "yes": "met",
        "no": "not met",
        "smaller_is_better": True,
      }
    )
    == "not met"
  )
  assert value({"ours": pos}) == "not run"
  with pytest.raises(ValueError, match="status 'k' refers to"):
    value({"ours": ["infnet_table2", "no such row", "POS"]})
  with pytest.raises(ValueError, match="unknown value"):
    value({"median": pos})


def test_fill_regions_needs_each_marker_once():
  regions = {"status-a": "new"}
  marked = reproduction.marked("status-a", "old")
  assert reproduction.fill_regions(f"| x | {marked} (link) |", regions, "R.md") == (
    f"| x | {reproduction.marked('status-a', 'new')} (link) |"
  )
  with pytest.raises(ValueError, match="R.md.*status-a"):
    reproduction.fill_regions("no markers", regions, "R.md")
  with pytest.raises(ValueError, match="R.md.*status-a"):
    reproduction.fill_regions(marked + marked, regions, "R.md")
  with pytest.raises(ValueError, match="R.md.*nothing writes: status-gone"):
    reproduction.fill_regions(marked + reproduction.marked("status-gone", "x"), regions, "R.md")


def test_a_status_sentence_that_cannot_sit_in_a_table_cell_is_an_error(tmp_path):
  data = _paper_tables([{"label": "MLP", "cells": ["not run"]}])
  path = tmp_path / "paper_tables.json"
  data["status"] = [{"key": "a", "methods": "m", "paper": "p", "sentence": "x | y"}]
  path.write_text(json.dumps(data))
  with pytest.raises(ValueError, match="paper_tables.json.*'a'"):
    pt.load_status(str(path))
  data["status"] = [
    {
      "key": "a",
      "methods": "m",
      "paper": "p",
      "sentence": "{n} ok",
      "values": {"n": {"paper": ["t", "MLP", "bibtex"]}},
    }
  ]
  path.write_text(json.dumps(data))
  (status,) = pt.load_status(str(path))
  assert status.values == (("n", {"paper": ["t", "MLP", "bibtex"]}),)
  del data["status"]
  path.write_text(json.dumps(data))
  assert pt.load_status(str(path)) == ()

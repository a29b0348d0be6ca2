r"""The gains table of results/infnet/sequences.md: each sequence row's test score and its
difference from BiLSTM-CE on the same inputs.

  python -m benchmarks.sequence_table

The rows, columns and the results files behind each cell are those of the infnet paper's
Table 2 in results/paper_tables.json (the table REPRODUCTION.md shows next to the
paper's numbers); this prints our side only, with Δ against BiLSTM-CE on the same inputs,
computed from unrounded values: a row `method:overrides` is compared with the row
`bilstm:overrides` where the table has one (e.g. the GloVe rows), every other row (and
every BiLSTM row) with the `bilstm` row. A cell is the mean over the row's runs; "–"
where nothing has run.
tests/test_sequence_table.py checks that sequences.md holds the table as printed.
"""

from collections.abc import Sequence

from absl import app

from benchmarks import paper_tables as pt
from benchmarks import reproduction
from experiments import cli

BASELINE = "bilstm"


def cell_value(cell: pt.Cell, metric: pt.Metric, results: reproduction.Results) -> float | None:
  """Mean over the runs of the cell's row, in the metric's scale; None where not run."""
  if not isinstance(cell, pt.Json):
    return None
  stems, row, _ = reproduction.json_row(cell, results)
  if row is None:
    return None
  values = reproduction.metric_values(stems, row, metric, results)
  return sum(values) / len(values)


def _signed(delta: float) -> str:
  return f"{'+' if delta >= 0 else '−'}{abs(delta):.2f}"


def gains_table(results: reproduction.Results, table: pt.PaperTable = pt.INFNET_TABLE2) -> str:
  """Markdown: one row per row of `table` that has a config of ours, one column per
  paper column, `score (Δ)` against the row whose config is BASELINE."""
  baseline_rows = [r for r in table.rows if r.ours == BASELINE]
  if len(baseline_rows) != 1:
    raise ValueError(f"{table.key}: needs exactly one row with config {BASELINE!r}")
  metrics = [c.metrics[0] for c in table.columns]
  by_config = {r.ours: r for r in table.rows if r.ours}
  header = ["row (config)"] + [f"{c.name} (Δ vs BiLSTM-CE)" for c in table.columns]
  body = []
  for row in table.rows:
    if not row.ours:
      continue
    method, _, overrides = row.ours.partition(":")
    same_inputs = f"{BASELINE}:{overrides}" if overrides and method != BASELINE else None
    baseline = (
      baseline_rows[0] if same_inputs is None else by_config.get(same_inputs, baseline_rows[0])
    )
    cells = []
    for column, cell, metric, base_cell in zip(table.columns, row.cells, metrics, baseline.cells):
      value = cell_value(cell, metric, results)
      b = cell_value(base_cell, metric, results)
      if value is None:
        cells.append("–")
      elif row.ours == BASELINE:
        cells.append(f"{value:.2f}")
      elif b is None:
        raise ValueError(
          f"{table.key}: column {column.name} has {row.ours!r} but no "
          f"{baseline.ours!r} row to compare it with"
        )
      else:
        cells.append(f"{value:.2f} ({_signed(value - b)})")
    body.append([f"{row.label} (`{row.ours}`)"] + cells)
  return "\n".join(reproduction.table_lines(header, body))


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  print(gains_table(reproduction.Results(reproduction.RESULTS_DIR)))


if __name__ == "__main__":
  cli.run(main)

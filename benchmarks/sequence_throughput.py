r"""Test-time throughput of the sequence taggers: tokens per second of the BiLSTM
(token CE), the BiLSTM-CRF (Viterbi), an inference network and GBI (SPEN over
per-token simplices), plus GBI and the inference network with a TLM global energy.

Each row is a method's last training stage as its config builds it for Twitter POS
(experiments/configs/<method>.py:twitter_pos with the row's overrides), timed on
`predict` over a whole test split in the config's eval batches (compile excluded,
median of `--repeats`), tokens/s counting real tokens only; ratios are to the first
row, measured in the same run. The inputs are random tokens shaped like Twitter POS's
test split (547 tweets padded to 38 tokens, 7707 real, 6823 words, 178 characters,
25 tags), so no data files are needed, and the parameters are fresh initializations:
the inference network's cost does not depend on them, GBI's does through the steps it
takes to converge (at most `predict_gbi.max_steps`; the trained runs' results.json
report `test/gbi_steps_mean`).

  python -m benchmarks.sequence_throughput --out=results/infnet/sequence_throughput.md
"""

import types

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common
from energynets.train import quiet_library_logs
from experiments import builders
from experiments import cli
from experiments import configuration
from experiments import tasks

DEFAULT_ROWS = (
  "bilstm",
  "crf",
  "infnet",
  "spen_ssvm",
  "infnet:energy.tlm_variants=forward",
  "spen_ssvm:energy.tlm_variants=forward",
)
_ROWS = flags.DEFINE_list(
  "rows", list(DEFAULT_ROWS), "config[:key=value...] per row (experiments.compare's spec)"
)
_NUM_TEST = flags.DEFINE_integer("num_test", 547, "test sentences (Twitter POS daily547)")
_MAX_LENGTH = flags.DEFINE_integer("max_length", 38, "padded length (Twitter POS test)")
_NUM_TOKENS = flags.DEFINE_integer("num_tokens", 7707, "real test tokens (Twitter POS)")
_VOCAB = flags.DEFINE_integer("vocab", 6823, "word vocabulary (Twitter POS train)")
_CHARS = flags.DEFINE_integer("chars", 178, "character vocabulary")
_TAGS = flags.DEFINE_integer("tags", 25, "tags")
_WORD_LENGTH = flags.DEFINE_integer("word_length", 20, "characters kept per word")
_REPEATS = flags.DEFINE_integer("repeats", 3, "timed passes over the test split (median)")
_OUT = flags.DEFINE_string("out", "", "also write the markdown report here")


def random_split(rs: np.random.RandomState) -> tasks.SequenceSplit:
  """Random tokens with the test split's shapes; lengths sum to `--num_tokens`."""
  n, t = _NUM_TEST.value, _MAX_LENGTH.value
  lengths = rs.multinomial(_NUM_TOKENS.value - n, np.full(n, 1.0 / n)) + 1
  lengths = np.minimum(lengths, t)
  mask = np.arange(t) < lengths[:, None]
  words = np.where(mask, rs.randint(2, _VOCAB.value, (n, t)), 0)
  chars = np.where(mask[..., None], rs.randint(1, _CHARS.value, (n, t, _WORD_LENGTH.value)), 0)
  x = np.concatenate([words[..., None], np.zeros((n, t, 2), int), chars], -1).astype(np.int32)
  y = np.eye(_TAGS.value, dtype=np.float32)[rs.randint(0, _TAGS.value, (n, t))]
  return tasks.SequenceSplit(x, y * mask[..., None], mask, (), "")


def shaped_dataset(split: tasks.SequenceSplit) -> tasks.SequenceData:
  """What the objective builders read from a sequence dataset: vocabulary sizes, tags."""
  source = types.SimpleNamespace(
    word_vocab=range(_VOCAB.value), char_vocab=range(_CHARS.value), pos_vocab=None, chunk_vocab=None
  )
  return tasks.SequenceData("twitter_pos", split, split, split, _TAGS.value, source, {})


def time_row(spec: str, split: tasks.SequenceSplit) -> dict:
  name, *overrides = spec.split(":")  # experiments.compare's spec syntax
  config = configuration.get_config(name, "twitter_pos", overrides)
  _, stage = configuration.stage_configs(config)[-1]
  objective = builders.build_objective(stage, shaped_dataset(split))
  eval_bs = stage.train.eval_batch_size
  state = objective.init(
    jax.random.key(0), {"x": jnp.asarray(split.x[:eval_bs]), "y": jnp.asarray(split.y[:eval_bs])}
  )
  predict = jax.jit(objective.predict)
  chunks = [split.x[i : i + eval_bs] for i in range(0, len(split.x), eval_bs)]
  seconds = common.median_seconds(
    {"predict": lambda: [predict(state, c) for c in chunks]}, _REPEATS.value
  )["predict"]
  return dict(
    spec=spec,
    method=stage.method,
    seconds=seconds,
    tokens_per_second=float(split.mask.sum()) / seconds,
  )


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_library_logs()
  split = random_split(np.random.RandomState(0))
  rows = [time_row(spec, split) for spec in _ROWS.value]
  first = rows[0]
  lines = ["| row | method | test s | tokens / s | ratio |", "|---|---|---|---|---|"]
  for r in rows:
    lines.append(
      f"| {r['spec']} | {r['method']} | {r['seconds']:.3f} | "
      f"{r['tokens_per_second']:.0f} | {r['tokens_per_second'] / first['tokens_per_second']:.2f} |"
    )
  body = (
    f"Timed on {common.machine_description()}; Twitter POS test shapes "
    f"({_NUM_TEST.value} sentences padded to {_MAX_LENGTH.value}, "
    f"{int(split.mask.sum())} real tokens), random tokens, fresh parameters, median "
    f"of {_REPEATS.value} passes. Ratios are to the first row, same run.\n\n" + "\n".join(lines)
  )
  print(body)
  if _OUT.value:
    common.write_report(_OUT.value, "benchmarks.sequence_throughput", body)


if __name__ == "__main__":
  cli.run(main)

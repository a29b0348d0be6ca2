"""Sequence-labeling data: CoNLL-2003 NER and Twitter POS (the InfNet tasks).

The registered datasets (`SEQUENCE_DATASETS`) and their loader `load_sequence_dataset`.
The pieces live in their own modules, whose names this one re-exports: the file
readers (`energynets.data.sequence_files`), vocabularies and GloVe
(`energynets.data.sequence_vocab`), encoding into padded arrays and the tagging
schemes (`energynets.data.sequence_encoding`) and batching
(`energynets.data.sequence_batches`).
"""

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses

from energynets.data.datadir import dataset_files
from energynets.data.datadir import sha256_of
from energynets.data.errors import DataError
from energynets.data.errors import PathLike
from energynets.data.sequence_batches import BATCHES_PER_BUCKET  # noqa: F401  (re-exported)
from energynets.data.sequence_batches import batch_of  # noqa: F401
from energynets.data.sequence_batches import bucketed_batches  # noqa: F401
from energynets.data.sequence_batches import one_hot_tags  # noqa: F401
from energynets.data.sequence_batches import pack_tokens  # noqa: F401
from energynets.data.sequence_batches import padding_fraction  # noqa: F401
from energynets.data.sequence_encoding import DEFAULT_MAX_WORD_LENGTH
from energynets.data.sequence_encoding import SCHEMES  # noqa: F401
from energynets.data.sequence_encoding import SequenceDataset
from energynets.data.sequence_encoding import SequenceSplit  # noqa: F401
from energynets.data.sequence_encoding import bioes_to_iob2  # noqa: F401
from energynets.data.sequence_encoding import build_sequence_dataset  # re-exported
from energynets.data.sequence_encoding import decode_tags  # noqa: F401
from energynets.data.sequence_encoding import iob2_to_bioes  # noqa: F401
from energynets.data.sequence_encoding import scheme_tags  # noqa: F401
from energynets.data.sequence_files import TWITTER_POS_TAGS
from energynets.data.sequence_files import Sentence
from energynets.data.sequence_files import parse_conll2003
from energynets.data.sequence_files import parse_twitter_pos
from energynets.data.sequence_vocab import PAD  # noqa: F401
from energynets.data.sequence_vocab import PAD_ID  # noqa: F401
from energynets.data.sequence_vocab import UNK  # noqa: F401
from energynets.data.sequence_vocab import UNK_ID  # noqa: F401
from energynets.data.sequence_vocab import Vocabulary  # noqa: F401
from energynets.data.sequence_vocab import load_glove  # noqa: F401
from energynets.tokens import PACKED_COLUMNS  # noqa: F401
from energynets.tokens import unpack_tokens  # noqa: F401


@dataclasses.dataclass(frozen=True)
class _Spec:
  """A registered sequence dataset: its files, reader, tag schemes and public source.

  `url` is the public folder (pinned to a commit); a file's URL is `url` followed by
  `remote_paths.get(file, file)`. `sha256` and `sizes` are of the public copies.
  """

  subdir: str
  files: Mapping[str, str]
  parse: Callable[[PathLike], list[Sentence]]
  schemes: tuple[str, ...]  # the first is the default.
  tag_names: tuple[str, ...] | None
  split: str
  url: str
  sha256: Mapping[str, str]
  sizes: Mapping[str, int] = dataclasses.field(default_factory=dict)
  remote_paths: Mapping[str, str] = dataclasses.field(default_factory=dict)
  license: str = ""

  def file_url(self, file: str) -> str:
    """The public URL of `file` (a name in `files`)."""
    return self.url + self.remote_paths.get(file, file)


SEQUENCE_DATASETS: dict[str, _Spec] = {
  "conll2003": _Spec(
    subdir="conll2003",
    files={"train": "train.txt", "validation": "valid.txt", "test": "test.txt"},
    parse=parse_conll2003,
    schemes=("iob2", "bioes"),
    tag_names=None,
    split="shipped train/valid/test files (valid = eng.testa, test = eng.testb), "
    "IOB2-converted copy",
    url="https://raw.githubusercontent.com/kamalkraj/BERT-NER/"
    "e5be564156f194f1becb0d82aeaf6e762d9eb9ed/data/",
    sha256={
      "train.txt": "213953b5522fb7924802d883e50f027b2c6ffb5d4d0e63368ed82909f9b60423",
      "valid.txt": "c02eb19809eafb83998326a0481942eb37d96f31826ae387cfe8773699969f5b",
      "test.txt": "dc4ac7f3d6d01a6bec59261814561da3b287b6b493b97d1f69c580b52ec1831b",
    },
    sizes={"train.txt": 3283420, "valid.txt": 827443, "test.txt": 748095},
    license="Reuters RCV1 text, not openly licensed (research use only; the original "
    "CoNLL-2003 terms apply); the copy is IOB2-converted from the IOB1 "
    "originals; its repository's AGPL-3.0 covers only its code.",
  ),
  "twitter_pos": _Spec(
    subdir="twitter_pos",
    files={"train": "oct27.traindev", "validation": "oct27.test", "test": "daily547.conll"},
    parse=parse_twitter_pos,
    schemes=("pos",),
    tag_names=TWITTER_POS_TAGS,
    split="as in the InfNet authors' scripts: train = oct27.traindev (Oct27 train+dev, "
    "1327 tweets), validation = oct27.test (500), test = daily547 (547)",
    url="https://raw.githubusercontent.com/brendano/ark-tweet-nlp/"
    "72755ccd1b29ba8e1dbbb49efe57ba9723c0013b/data/twpos-data-v0.3/",
    sha256={
      "oct27.traindev": "f1daf7281ca3236592c23befd0ce65ca01d5d6811a47bb0db392098c5c17d589",
      "oct27.test": "77f868fcd300d0acdd7bb8db28c961fcbe50d9cd0d48046e8fbec4b9f86bf814",
      "daily547.conll": "581862c4a7a05b62cb5c4d44119f11fc1fe55489862c9470120628cca8e4b080",
    },
    sizes={"oct27.traindev": 147733, "oct27.test": 53792, "daily547.conll": 57192},
    remote_paths={
      "oct27.traindev": "oct27.splits/oct27.traindev",
      "oct27.test": "oct27.splits/oct27.test",
    },
    license="CC-BY 3.0 (stated in the data's README.txt); cite Gimpel et al. 2011 and "
    "Owoputi et al. 2013.",
  ),
}


def load_sequence_dataset(
  name: str,
  data_dir: PathLike | None = None,
  scheme: str | None = None,
  lowercase: bool = False,
  min_count: int = 1,
  max_word_length: int = DEFAULT_MAX_WORD_LENGTH,
) -> SequenceDataset:
  """Loads 'conll2003' or 'twitter_pos' from the data directory.

  Args:
    name: 'conll2003' or 'twitter_pos'.
    data_dir: the data directory; None: $ENERGYNETS_DATA_DIR, else the per-user default
      (`resolve_data_dir`). Missing files are downloaded on first use
      (`energynets.data.fetch`).
    scheme: CoNLL 'iob2' (default) or 'bioes'; Twitter 'pos' (default).
    lowercase: look words up lower-cased.
    min_count: train count a word needs to get its own id.
    max_word_length: characters kept per word (C is at most this).

  Raises:
    DataError: a missing folder or file, a checksum that differs from the public
      copy's, or a malformed file.
  """
  if name not in SEQUENCE_DATASETS:
    raise ValueError(f"unknown sequence dataset {name!r}; known: {sorted(SEQUENCE_DATASETS)}")
  spec = SEQUENCE_DATASETS[name]
  scheme = spec.schemes[0] if scheme is None else scheme
  if scheme not in spec.schemes:
    raise ValueError(f"{name}: scheme must be one of {spec.schemes}; got {scheme!r}")
  root, files = dataset_files(data_dir, spec.subdir, spec.files, name)
  records = []
  for split, p in files.items():
    digest = sha256_of(p)
    if digest != spec.sha256[p.name]:
      raise DataError(
        p, None, f"sha256 {digest} differs from the public copy's {spec.sha256[p.name]}"
      )
    records.append({"split": split, "path": str(p.relative_to(root.parent)), "sha256": digest})
  meta = {
    "source": "sequence registry",
    "data_dir": str(root.parent),
    "files": records,
    "url": spec.url,
    "split_rule": spec.split,
  }
  parsed = {split: spec.parse(p) for split, p in files.items()}
  return build_sequence_dataset(
    name,
    parsed,
    scheme=scheme,
    tag_names=spec.tag_names,
    lowercase=lowercase,
    min_count=min_count,
    max_word_length=max_word_length,
    meta=meta,
  )

"""The registered multi-label datasets: one `DatasetSpec` per name in `REGISTRY`.

Each entry says where a dataset's files are (folder under the data directory, public
URL pinned to a commit, sha256 and size of each file), how many features and labels it
has after preprocessing, its split rule and expected split sizes, where the data comes
from and under what licence.
"""

from collections.abc import Mapping
import dataclasses

from energynets.data import splits
from energynets.data import synthetic

_MULAN_COMMIT = "43f6389095ad71984264db4387a8074b22bc7d4a"
_MULAN_URL = (
  "https://raw.githubusercontent.com/tsoumakas/mulan/" + _MULAN_COMMIT + "/data/multi-label/{}/"
)
_HICLASS_URL = (
  "https://raw.githubusercontent.com/tondach01/hiclass/"
  "b4d65a1918626db564994884816f6dc2c9bb8ff6/datasets_FUN/{}/"
)
_CHMCNN_URL = (
  "https://raw.githubusercontent.com/EGiunchiglia/C-HMCNN/"
  "e887855ab4b3b8f22e4fafc80a0a33c1d1ac0041/HMC_data/datasets_FUN/{}/"
)
_MULAN_LICENSE = (
  "No data licence stated by the source (the Mulan software is GPL); cite the dataset's paper."
)
_FUNCAT_LICENSE = (
  "No licence stated by the source repository; the CLUS HMC benchmark "
  "data of Vens et al. (2008), cite it and Clare & King (2003)."
)


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """What the registry knows about one dataset.

  Attributes:
    name: registry key.
    kind: 'mulan', 'clus' or 'synthetic'.
    subdir: folder under the data directory holding the files ('' if none).
    files: role ('train', 'test', 'valid', 'all', 'xml') -> file name.
    num_features: D after preprocessing (one-hot, dropped attributes).
    num_labels: L.
    split_rule: key of `splits.SPLIT_RULES`.
    split: human-readable split rule.
    counts: expected examples per split for split_seed=0, fold=0, resplit=False.
    resplit_counts: sizes of the optional `resplit=True` split (empty: not offered).
    url: public folder the files come from (append the file name; '' if none).
    sha256: file name -> sha256 of the public copy (checked on load).
    sizes: file name -> size in bytes of the public copy.
    zipped: the public copies are zip archives `<file name>.zip` holding the file
      (sha256 and size are the unzipped file's).
    drop_attributes: attributes left out of the features.
    standardize: whether features are standardized with train mean/std.
    citation: where the data comes from.
    notes: caveats.
    license: the data's licence, as far as its source states one, and caveats of use.
  """

  name: str
  kind: str
  subdir: str
  files: Mapping[str, str]
  num_features: int
  num_labels: int
  split_rule: str
  split: str
  counts: Mapping[str, int]
  resplit_counts: Mapping[str, int] = dataclasses.field(default_factory=dict)
  url: str = ""
  sha256: Mapping[str, str] = dataclasses.field(default_factory=dict)
  drop_attributes: tuple[str, ...] = ()
  standardize: bool = False
  citation: str = ""
  notes: str = ""
  sizes: Mapping[str, int] = dataclasses.field(default_factory=dict)
  license: str = ""
  zipped: bool = False

  def file_url(self, role: str) -> str:
    """The public URL of the file of `role` ('' where the dataset has no public source)."""
    if not self.url:
      return ""
    return self.url + self.files[role] + (".zip" if self.zipped else "")


def _counts(train: int, validation: int, test: int) -> dict[str, int]:
  return {"train": train, "validation": validation, "test": test}


REGISTRY: dict[str, DatasetSpec] = {
  "bibtex": DatasetSpec(
    name="bibtex",
    kind="mulan",
    subdir="bibtex",
    files={"train": "bibtex-train.arff", "test": "bibtex-test.arff", "xml": "bibtex.xml"},
    num_features=1836,
    num_labels=159,
    split_rule="shipped_train_test+holdout_validation",
    split=splits.SPLIT_RULES["shipped_train_test+holdout_validation"],
    counts=_counts(4392, 488, 2515),
    resplit_counts=_counts(4407, 1491, 1497),
    url=_MULAN_URL.format("bibtex"),
    sizes={"bibtex-train.arff": 2292961, "bibtex-test.arff": 1215637, "bibtex.xml": 5880},
    license=_MULAN_LICENSE,
    sha256={
      "bibtex-train.arff": "8dcc9de6e0b2cebaec8c1f4fac78431adeeb73cfd3ab879b530a66d366e59174",
      "bibtex-test.arff": "9b03329cde64d3f994bdf7fbbac3f3b10fe185c311cb9ae725475f59c7f3f922",
      "bibtex.xml": "08fe20013c1e75dcf1888c185f5187c95e76495b8518ce289b4d3afce38d1232",
    },
    citation="Katakis, Tsoumakas, Vlahavas. Multilabel Text Classification for "
    "Automated Tag Suggestion. ECML/PKDD 2008 Discovery Challenge.",
    notes="Binary bag-of-words features, not standardized. resplit=True gives the "
    "implicit-energy paper's 4407/1491/1497 split (seeded; their exact rows are "
    "not published).",
  ),
  "delicious": DatasetSpec(
    name="delicious",
    kind="mulan",
    subdir="delicious",
    files={"train": "delicious-train.arff", "test": "delicious-test.arff", "xml": "delicious.xml"},
    num_features=500,
    num_labels=983,
    split_rule="shipped_train_test+holdout_validation",
    split=splits.SPLIT_RULES["shipped_train_test+holdout_validation"],
    counts=_counts(11628, 1292, 3185),
    resplit_counts=_counts(9690, 3207, 3194),
    url=_MULAN_URL.format("delicious"),
    sizes={"delicious-train.arff": 3056590, "delicious-test.arff": 757565, "delicious.xml": 34303},
    license=_MULAN_LICENSE,
    sha256={
      "delicious-train.arff": "030186cdb542ebdd32052fcdbb1ebe30115b3a22518c1b4b198c45eb827aebe1",
      "delicious-test.arff": "2dfb01723a819914b0ca83361177ed413ce3f2169851d9f228d4692915d63944",
      "delicious.xml": "4e0c0f93c7d86a39b9fca4aaefaa00e9428f2c80277732dfbf03ca48e2c14da2",
    },
    citation="Tsoumakas, Katakis, Vlahavas. Effective and Efficient Multilabel "
    "Classification in Domains with Large Number of Labels. ECML/PKDD 2008 "
    "Workshop on Mining Multidimensional Data.",
    notes="Binary features, not standardized. 14 rows have no positive label. "
    "resplit=True gives the implicit-energy paper's 9690/3207/3194 sizes; they "
    "sum to 16091 = 16105 - the 14 label-less rows, which it leaves out.",
  ),
  "yeast": DatasetSpec(
    name="yeast",
    kind="mulan",
    subdir="yeast",
    files={"train": "yeast-train.arff", "test": "yeast-test.arff", "xml": "yeast.xml"},
    num_features=103,
    num_labels=14,
    split_rule="cv10",
    split=splits.SPLIT_RULES["cv10"],
    counts=_counts(1957, 218, 242),
    url=_MULAN_URL.format("yeast"),
    sizes={"yeast-train.arff": 1501117, "yeast-test.arff": 918515, "yeast.xml": 526},
    license=_MULAN_LICENSE,
    sha256={
      "yeast-train.arff": "e759dc991ff54694a4ff9c4314f3be0d6fd2b1994a4b563f57e416394c6aebbd",
      "yeast-test.arff": "4aaac102bff9669a765bf0b378602e5cc8c3b181048282e2f003117b496d552a",
      "yeast.xml": "c3056cc26444b5158b1588d1b73bec9c45429e10f0957ad085903423cb81f247",
    },
    standardize=True,
    citation="Elisseeff, Weston. A kernel method for multi-labelled classification. NIPS 2001.",
    notes="SPEN 2016 (Table 2) reports 10-fold cross-validation on all 2417 rows; "
    "`fold` selects the test fold. Folds 0-6 hold 242 rows, 7-9 hold 241.",
  ),
  "genbase": DatasetSpec(
    name="genbase",
    kind="mulan",
    subdir="genbase",
    files={"train": "genbase-train.arff", "test": "genbase-test.arff", "xml": "genbase.xml"},
    num_features=1185,
    num_labels=27,
    split_rule="shipped_train_test+holdout_validation",
    split=splits.SPLIT_RULES["shipped_train_test+holdout_validation"],
    counts=_counts(417, 46, 199),
    url=_MULAN_URL.format("genbase"),
    sizes={"genbase-train.arff": 1714007, "genbase-test.arff": 758739, "genbase.xml": 992},
    license=_MULAN_LICENSE,
    sha256={
      "genbase-train.arff": "37670db2c2b308a1c163d05501819526f1d65d659638ddfb76812d4ce384b5c6",
      "genbase-test.arff": "0e988520bedab39aa3f23f08f646c769bcdb6f9119ee298fd92b37127b226a36",
      "genbase.xml": "198e8a1d7070e9603119e02e626cedc589db7577339b307b06f5192047b69eb9",
    },
    drop_attributes=("protein",),
    citation="Diplaris, Tsoumakas, Mitkas, Vlahavas. Protein Classification with "
    "Multiple Algorithms. PCI 2005.",
    notes="`protein` (a per-example accession ID) is dropped; the 1185 {YES,NO} "
    "features become 0/1 (YES = 1), not standardized. SEAL used Cometa "
    "stratified folds, which are not available; this is the MULAN split.",
  ),
  "cal500": DatasetSpec(
    name="cal500",
    kind="mulan",
    subdir="cal500",
    files={"all": "cal500.arff", "xml": "cal500.xml"},
    num_features=68,
    num_labels=174,
    split_rule="random_60_20_20",
    split=splits.SPLIT_RULES["random_60_20_20"],
    counts=_counts(302, 100, 100),
    url=_MULAN_URL.format("cal500"),
    sizes={"cal500.arff": 492857, "cal500.xml": 7901},
    license=_MULAN_LICENSE,
    sha256={
      "cal500.arff": "cfe6097ba5fd6e8584e54911ab9783dcab34e898446b7c9370c71d477eae56d3",
      "cal500.xml": "877e128531268d7661faa3e44f7bb43cbcda829c0895e49879168775b192728c",
    },
    standardize=True,
    citation="Turnbull, Barrington, Torres, Lanckriet. Semantic Annotation and "
    "Retrieval of Music and Sound Effects. IEEE TASLP 16(2), 2008.",
    notes="MULAN ships no split; SEAL's Cometa folds are not available, so this "
    "project's seeded 60/20/20 split is used (validation and test = round(20%), "
    "train = the rest).",
  ),
  "expr_fun": DatasetSpec(
    name="expr_fun",
    kind="clus",
    subdir="expr_fun",
    files={
      "train": "expr_FUN.train.arff",
      "valid": "expr_FUN.valid.arff",
      "test": "expr_FUN.test.arff",
    },
    num_features=561,
    num_labels=499,
    split_rule="shipped_train_valid_test",
    split=splits.SPLIT_RULES["shipped_train_valid_test"],
    counts=_counts(1639, 849, 1291),
    url=_HICLASS_URL.format("expr_FUN"),
    zipped=True,
    sizes={
      "expr_FUN.train.arff": 4494464,
      "expr_FUN.valid.arff": 2351441,
      "expr_FUN.test.arff": 3552821,
    },
    license=_FUNCAT_LICENSE,
    sha256={
      "expr_FUN.train.arff": "100314a68323f03a5fa348d57fbf08b62ddff414a0d4c28881157024750b8134",
      "expr_FUN.valid.arff": "345aeb499a813118b5da6e43ea51a759f787fa5772f2907f0f789068c0ad82c7",
      "expr_FUN.test.arff": "1e7c095a3ce32efa3a81357fd79102e55f282bfa3a4aab40a9c810e5fc4fde0d",
    },
    standardize=True,
    citation="Vens, Struyf, Schietgat, Dzeroski, Blockeel. Decision trees for "
    "hierarchical multi-label classification. Machine Learning 73(2), 2008; "
    "data from Clare & King 2003.",
    notes="The public copy is zipped (`<file>.zip`; sha256 is of the unzipped file). "
    "547 numeric + 4 nominal attributes -> 561 features after one-hot. One "
    "attribute name is repeated in the file; the second copy is named `#2`. "
    "Labels: the 499 FunCat nodes, ancestor-closed; no root label (SEAL used 500 "
    "with the root).",
  ),
  "spo_fun": DatasetSpec(
    name="spo_fun",
    kind="clus",
    subdir="spo_fun",
    files={
      "train": "spo_FUN.train.arff",
      "valid": "spo_FUN.valid.arff",
      "test": "spo_FUN.test.arff",
    },
    num_features=86,
    num_labels=499,
    split_rule="shipped_train_valid_test",
    split=splits.SPLIT_RULES["shipped_train_valid_test"],
    counts=_counts(1600, 837, 1266),
    url=_CHMCNN_URL.format("spo_FUN"),
    sizes={"spo_FUN.train.arff": 648397, "spo_FUN.valid.arff": 343575, "spo_FUN.test.arff": 515774},
    license=_FUNCAT_LICENSE,
    sha256={
      "spo_FUN.train.arff": "8049c3a620b8fcbbbe3f195ccca7dafb36372fce418d9bfe49d6ffadd4bcf6ca",
      "spo_FUN.valid.arff": "5ab7eaab567b80144299761abec833aa1a4a1115a347819362d06a149b43b0cf",
      "spo_FUN.test.arff": "18a9be63b28d636e767b5886121dee5ddc8ae5a61a05098408d1b8991419f284",
    },
    standardize=True,
    citation="Vens, Struyf, Schietgat, Dzeroski, Blockeel. Decision trees for "
    "hierarchical multi-label classification. Machine Learning 73(2), 2008; "
    "data from Clare & King 2003.",
    notes="77 numeric + 3 nominal attributes -> 86 features after one-hot. Labels: "
    "the 499 FunCat nodes, ancestor-closed; no root label.",
  ),
  "synthetic": DatasetSpec(
    name="synthetic",
    kind="synthetic",
    subdir="",
    files={},
    num_features=64,
    num_labels=16,
    split_rule="generated",
    split=splits.SPLIT_RULES["generated"],
    license="Generated in-process from split_seed; no third-party data.",
    counts=_counts(
      synthetic.DEFAULT_NUM_TRAIN, synthetic.DEFAULT_NUM_VALIDATION, synthetic.DEFAULT_NUM_TEST
    ),
    citation="Belanger, McCallum. Structured Prediction Energy Networks. ICML 2016, Section 7.3.",
    notes="Block exclusivity: X ~ N(0,1) [., 64], A ~ N(0,1) [64, 16], Z = XA, y = "
    "one-hot argmax of Z in each of 4 blocks of 4. Generated from split_seed: "
    "rows [0, test) are test, then validation, then train, so held-out sets do "
    "not change with num_train and smaller train sets are prefixes of larger "
    "ones. The paper trains on 15k (and 1.5k); held-out sizes are this "
    "project's choice.",
  ),
}

"""BiLSTM-CRF: the BiLSTM tagger's logits as unaries of a linear-chain CRF, trained by
exact likelihood (forward algorithm), decoded by Viterbi: the sequence papers' CRF row.

--config=experiments/configs/crf.py:twitter_pos|conll2003|conll2003_plus

The tagger is bilstm.py's; the transition, start and end scores start at zero.
"""

from experiments.configs import base

TASKS = ("sequence",)


def get_config(dataset: str = "twitter_pos"):
  config = base.get_sequence_base_config(dataset)
  config.method = "crf"
  return config

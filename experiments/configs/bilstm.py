"""BiLSTM tagger trained with token cross-entropy: the sequence papers' BiLSTM-CE row.

--config=experiments/configs/bilstm.py:twitter_pos|conll2003|conll2003_plus

Word embeddings (100-d, learned from scratch: no pretrained vectors ship here) and a
character CNN (30-d characters, 50 filters of width 3), one BiLSTM layer of 100 units
per direction (Tu et al.'s inference-network size), dropout 0.5, Adam 1e-3 with cosine
decay, batches of 32 sentences. conll2003_plus adds 25-d POS and chunk embeddings (the
NER+ setting).
"""

from experiments.configs import base

TASKS = ("sequence",)


def get_config(dataset: str = "twitter_pos"):
  return base.get_sequence_base_config(dataset)

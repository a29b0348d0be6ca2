"""FCN: the feed-forward segmentation baseline, trained with pixel BCE.

--config=experiments/configs/fcn.py:weizmann_horse

SEAL Table 4's "FCN (cross-entropy)" row (77.80 mean IoU on this split) and the task-net
every SEAL / implicit segmentation run starts from. The net is `nets.FCN` with SEAL's
public task-net widths (base.get_segmentation_base_config); the loss is binary
cross-entropy summed over the 32×32 pixels, averaged over images (`objectives.local_bce`:
a pixel is a label); batches are augmented with padded random crops and horizontal flips.
Selection on validation mean IoU; results: `test/mean_iou`, `test/dataset_iou`.
"""

from experiments.configs import base

TASKS = ("segmentation",)


def get_config(dataset: str = "weizmann_horse"):
  config = base.get_segmentation_base_config(dataset)
  config.method = "local"
  return config

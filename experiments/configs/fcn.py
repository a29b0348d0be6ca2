"""FCN: the feed-forward segmentation baseline, trained with pixel BCE.

--config=experiments/configs/fcn.py:weizmann_horse

SEAL Table 4's "FCN (cross-entropy)" row (77.80 mean IoU on this split) and the task-net
every SEAL / implicit segmentation run starts from. The net is `nets.FCN` with SEAL's
public task-net widths, trained as SEAL's public horse config trains it
(base.get_segmentation_base_config): random 24×24 crops (and flips), SGD with momentum
0.9 and weight decay at SEAL's values rescaled to our loss (`base.segmentation_sgd`),
36 averaged crops at validation and test. The loss is binary cross-entropy summed over
the crop's pixels, averaged over images (`objectives.local_bce`: a pixel is a label).
Selection on validation mean IoU; results: `test/mean_iou`, `test/dataset_iou`.

`loss.score='soft_iou'` with `loss.score_weight=w` trains on BCE − w·soft IoU(σ(F(x)), y):
SEAL-dynamic regression's task loss (seal_dynamic.py: BCE − 576·σ(−E)) with the
loss-net replaced by the exact score it regresses onto. w = 576 (one per pixel of the
24×24 crop) is SEAL's weight on our pixel-summed BCE.
"""

from experiments.configs import base

TASKS = ("segmentation",)


def get_config(dataset: str = "weizmann_horse"):
  config = base.get_segmentation_base_config(dataset)
  config.method = "local"
  return config

"""Training: the sharded step builder, the loop, checkpoints and metric writers."""

from energynets.train import step
from energynets.train.checkpoint import Checkpointer
from energynets.train.guards import NonFiniteLossError
from energynets.train.loop import FitResult
from energynets.train.loop import LoopOptions
from energynets.train.loop import fit
from energynets.train.predictor import Predictor
from energynets.train.predictor import load_run
from energynets.train.process_rows import predict_in_batches
from energynets.train.run import BuilderError
from energynets.train.run import RunFormatError
from energynets.train.run import RunNotFoundError
from energynets.train.run import read_run
from energynets.train.selection import Validation
from energynets.train.step import batch_sharded
from energynets.train.step import build_init
from energynets.train.step import build_init_from
from energynets.train.step import build_predict
from energynets.train.step import build_train_step
from energynets.train.step import check_batch_size
from energynets.train.step import label_axis_shardings
from energynets.train.step import make_mesh
from energynets.train.step import replicate
from energynets.train.step import replicated
from energynets.train.step import shard_batch
from energynets.train.writers import MetricWriter
from energynets.train.writers import quiet_library_logs

DATA_AXIS: str = step.DATA_AXIS
"""`'data'`: the name of the device-mesh axis that batches are sharded along."""

MODEL_AXIS: str = step.MODEL_AXIS
"""`'model'`: the name of the device-mesh axis that the label dimension is sharded along
(`make_mesh(model_parallelism=M)`)."""

__all__ = [
  "BuilderError",
  "Checkpointer",
  "DATA_AXIS",
  "FitResult",
  "LoopOptions",
  "MetricWriter",
  "NonFiniteLossError",
  "Predictor",
  "RunFormatError",
  "MODEL_AXIS",
  "RunNotFoundError",
  "Validation",
  "batch_sharded",
  "build_init",
  "build_init_from",
  "build_predict",
  "build_train_step",
  "check_batch_size",
  "fit",
  "label_axis_shardings",
  "load_run",
  "make_mesh",
  "predict_in_batches",
  "read_run",
  "quiet_library_logs",
  "replicate",
  "replicated",
  "shard_batch",
]

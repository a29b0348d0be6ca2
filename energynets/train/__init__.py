"""Training: the sharded step builder, the loop, checkpoints and metric writers."""

from energynets.train.checkpoint import Checkpointer
from energynets.train.loop import FitResult, LoopOptions, NonFiniteLossError, fit
from energynets.train.process_rows import predict_in_batches
from energynets.train.run import (BuilderError, Predictor, RunFormatError, RunNotFoundError,
                                  load_run, read_run)
from energynets.train.step import (batch_sharded, build_init, build_init_from,
                                   build_predict,
                                   build_train_step, check_batch_size, label_axis_shardings,
                                   make_mesh, replicate, replicated, shard_batch)
from energynets.train.writers import MetricWriter, quiet_library_logs
from energynets.train import step

DATA_AXIS: str = step.DATA_AXIS
"""`'data'`: the name of the device-mesh axis that batches are sharded along."""

MODEL_AXIS: str = step.MODEL_AXIS
"""`'model'`: the name of the device-mesh axis that the label dimension is sharded along
(`make_mesh(model_parallelism=M)`)."""

__all__ = ["BuilderError", "Checkpointer", "DATA_AXIS", "FitResult", "LoopOptions",
           "MetricWriter", "NonFiniteLossError", "Predictor", "RunFormatError",
           "MODEL_AXIS", "RunNotFoundError", "batch_sharded", "build_init", "build_init_from",
           "build_predict", "build_train_step", "check_batch_size", "fit",
           "label_axis_shardings", "load_run", "make_mesh",
           "predict_in_batches", "read_run",
           "quiet_library_logs",
           "replicate", "replicated", "shard_batch"]

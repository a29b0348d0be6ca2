"""Energy networks `E(x, y) -> [B]` for the structured-prediction objectives."""

from energynets.energies.icnn import ICNNEnergy, InputConvexNet, NonNegDense
from energynets.energies.image import (DeepPriorEnergy, FieldOfExperts, GaussianDataTerm,
                                       soft_abs, softplus_t)
from energynets.energies.mlc import (Encoding, LocalNetEnergy, MeasurementEnergy, SPENEnergy,
                                     param_groups)

__all__ = ["DeepPriorEnergy", "Encoding", "FieldOfExperts", "GaussianDataTerm", "ICNNEnergy",
           "InputConvexNet", "LocalNetEnergy", "MeasurementEnergy", "NonNegDense", "SPENEnergy", "param_groups",
           "soft_abs", "softplus_t"]

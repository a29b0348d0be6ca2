"""Energy networks `E(x, y) -> [B]` for the structured-prediction objectives."""

from energynets.energies.mlc import Encoding, MeasurementEnergy, SPENEnergy, param_groups

__all__ = ["Encoding", "MeasurementEnergy", "SPENEnergy", "param_groups"]

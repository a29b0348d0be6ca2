"""Energy networks `E(x, y) -> [B]` for the structured-prediction objectives."""

from energynets.energies.icnn import ICNNEnergy, InputConvexNet, NonNegDense
from energynets.energies.image import (DeepPriorEnergy, FieldOfExperts, GaussianDataTerm,
                                       soft_abs, softplus_t)
from energynets.energies.mlc import (Encoding, LocalNetEnergy, MeasurementEnergy, SPENEnergy,
                                     param_groups)
from energynets.energies.sequence import (GLOBAL_ENERGIES, TLM_VARIANTS, SequenceEncoding,
                                          SequenceEnergy, TagLanguageModels, TagLM,
                                          tlm_log_likelihoods, tlm_log_probs,
                                          tlm_pretrain_loss)

__all__ = ["DeepPriorEnergy", "Encoding", "FieldOfExperts", "GaussianDataTerm", "ICNNEnergy",
           "InputConvexNet", "LocalNetEnergy", "MeasurementEnergy", "NonNegDense", "SPENEnergy", "param_groups",
           "soft_abs", "softplus_t",
           "GLOBAL_ENERGIES", "SequenceEncoding", "SequenceEnergy", "TLM_VARIANTS", "TagLM",
           "TagLanguageModels", "tlm_log_likelihoods", "tlm_log_probs", "tlm_pretrain_loss"]

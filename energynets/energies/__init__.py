"""Energy networks `E(x, y) -> [B]` for the structured-prediction objectives."""

from energynets.energies.icnn import ICNNEnergy, InputConvexNet, NonNegDense
from energynets.energies.image import (ConvScoreNet, DeepPriorEnergy, FieldOfExperts,
                                       GaussianDataTerm, SegmentationEncoding,
                                       SegmentationEnergy, segmentation_param_groups,
                                       soft_abs, softplus_t)
from energynets.energies.mlc import (Encoding, LocalNetEnergy, MeasurementEnergy, SPENEnergy,
                                     param_groups)
from energynets.energies.sequence import (SequenceEncoding,
                                          SequenceEnergy, TagLanguageModels, TagLM,
                                          tlm_log_likelihoods, tlm_log_probs,
                                          tlm_pretrain_loss)
from energynets.energies import sequence

TLM_VARIANTS: tuple[str, ...] = sequence.TLM_VARIANTS
"""The tag-language-model global energies of `SequenceEnergy` (Tu et al. 2020):
`'forward'`, `'backward'`, `'word_forward'`, `'word_backward'`."""

GLOBAL_ENERGIES: dict[str, tuple[str, ...]] = sequence.GLOBAL_ENERGIES
"""The paper's three global-energy settings (Tu et al. 2020, Table 4), name -> the
`TLM_VARIANTS` it uses: `'a'` forward, `'b'` forward + backward, `'c'` all four."""

__all__ = ["ConvScoreNet", "DeepPriorEnergy", "Encoding", "FieldOfExperts", "GaussianDataTerm", "ICNNEnergy",
           "InputConvexNet", "LocalNetEnergy", "MeasurementEnergy", "NonNegDense", "SPENEnergy", "param_groups",
           "soft_abs", "softplus_t", "SegmentationEncoding", "SegmentationEnergy",
           "segmentation_param_groups",
           "GLOBAL_ENERGIES", "SequenceEncoding", "SequenceEnergy", "TLM_VARIANTS", "TagLM",
           "TagLanguageModels", "tlm_log_likelihoods", "tlm_log_probs", "tlm_pretrain_loss"]

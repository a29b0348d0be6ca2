"""Energy networks `E(x, y) -> [B]` for the structured-prediction objectives.

Every objective takes an `Energy` (`protocol`): build one from a plain function
(`energy_from_function`) or any Flax module (`energy_from_module`); the energies here
are modules whose `as_energy()` gives theirs.
"""

from energynets.energies.protocol import (Energy, EnergyShapeError, as_energy,
                                          energy_from_function, energy_from_module)
from energynets.energies.protocol import check as check_energy
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

__all__ = ["Energy", "EnergyShapeError", "as_energy", "check_energy", "energy_from_function",
           "energy_from_module", "ConvScoreNet", "DeepPriorEnergy", "Encoding", "FieldOfExperts", "GaussianDataTerm", "ICNNEnergy",
           "InputConvexNet", "LocalNetEnergy", "MeasurementEnergy", "NonNegDense", "SPENEnergy", "param_groups",
           "soft_abs", "softplus_t", "SegmentationEncoding", "SegmentationEnergy",
           "segmentation_param_groups",
           "GLOBAL_ENERGIES", "SequenceEncoding", "SequenceEnergy", "TLM_VARIANTS", "TagLM",
           "TagLanguageModels", "tlm_log_likelihoods", "tlm_log_probs", "tlm_pretrain_loss"]

"""Energy networks `E(x, y) -> [B]` for the structured-prediction objectives.

Every objective takes an `Energy` (`protocol`): build one from a plain function
(`energy_from_function`) or any Flax module (`energy_from_module`); the energies here
are modules whose `as_energy()` gives theirs.
"""

from energynets.energies import sequence
from energynets.energies.icnn import ICNNEnergy
from energynets.energies.icnn import InputConvexNet
from energynets.energies.icnn import NonNegDense
from energynets.energies.image import DeepPriorEnergy
from energynets.energies.image import FieldOfExperts
from energynets.energies.image import GaussianDataTerm
from energynets.energies.image import soft_abs
from energynets.energies.image import softplus_t
from energynets.energies.mlc import Encoding
from energynets.energies.mlc import LocalNetEnergy
from energynets.energies.mlc import MeasurementEnergy
from energynets.energies.mlc import SPENEnergy
from energynets.energies.mlc import param_groups
from energynets.energies.protocol import Energy
from energynets.energies.protocol import EnergyShapeError
from energynets.energies.protocol import as_energy
from energynets.energies.protocol import check as check_energy
from energynets.energies.protocol import energy_from_function
from energynets.energies.protocol import energy_from_module
from energynets.energies.segmentation import ConvScoreNet
from energynets.energies.segmentation import SegmentationEncoding
from energynets.energies.segmentation import SegmentationEnergy
from energynets.energies.segmentation import segmentation_param_groups
from energynets.energies.sequence import SequenceEncoding
from energynets.energies.sequence import SequenceEnergy
from energynets.energies.sequence import TagLanguageModels
from energynets.energies.sequence import TagLM
from energynets.energies.sequence import tlm_log_likelihoods
from energynets.energies.sequence import tlm_log_probs
from energynets.energies.sequence import tlm_pretrain_loss
from energynets.energies.tag_language_models import TLMVariant

FORWARD: TLMVariant = sequence.FORWARD
"""The forward tag language model ȳ_t of Eq. (8): the tags before t."""

BACKWARD: TLMVariant = sequence.BACKWARD
"""The backward tag language model ȳ'_t of Eq. (9): the tags after t, right to left."""

WORD_FORWARD: TLMVariant = sequence.WORD_FORWARD
"""The word-augmented forward TLM ỹ_t of Eq. (9), weighted by γ."""

WORD_BACKWARD: TLMVariant = sequence.WORD_BACKWARD
"""The word-augmented backward TLM ỹ'_t of Eq. (9), weighted by γ."""

TLM_VARIANTS: tuple[TLMVariant, ...] = sequence.TLM_VARIANTS
"""The four tag-language-model global energies of `SequenceEnergy` (Tu et al. 2020):
`FORWARD`, `BACKWARD`, `WORD_FORWARD`, `WORD_BACKWARD`."""

GLOBAL_ENERGIES: dict[str, tuple[TLMVariant, ...]] = sequence.GLOBAL_ENERGIES
"""The paper's three global-energy settings (Tu et al. 2020, Table 4), its label -> the
`TLMVariant`s it uses: `'a'` forward, `'b'` forward + backward, `'c'` all four."""

__all__ = [
  "Energy",
  "EnergyShapeError",
  "as_energy",
  "check_energy",
  "energy_from_function",
  "energy_from_module",
  "ConvScoreNet",
  "DeepPriorEnergy",
  "Encoding",
  "FieldOfExperts",
  "GaussianDataTerm",
  "ICNNEnergy",
  "InputConvexNet",
  "LocalNetEnergy",
  "MeasurementEnergy",
  "NonNegDense",
  "SPENEnergy",
  "param_groups",
  "soft_abs",
  "softplus_t",
  "SegmentationEncoding",
  "SegmentationEnergy",
  "segmentation_param_groups",
  "GLOBAL_ENERGIES",
  "SequenceEncoding",
  "SequenceEnergy",
  "TLM_VARIANTS",
  "TLMVariant",
  "FORWARD",
  "BACKWARD",
  "WORD_FORWARD",
  "WORD_BACKWARD",
  "TagLM",
  "TagLanguageModels",
  "tlm_log_likelihoods",
  "tlm_log_probs",
  "tlm_pretrain_loss",
]

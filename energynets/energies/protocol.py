"""The energy protocol every objective accepts: `Energy`, its adapters and its checks.

An `Energy` is a small value of pure functions (optax style): what the domain of y is and
its shape, how parameters are made, what of x is computed once (`encode`), the energy of
a batch of outputs given that encoding, named GBI start points, and how a previous
stage's parameters continue. Objectives call only these fields, so any energy that
provides them trains with any objective:

    energy = en.energy_from_function(my_energy, domain=en.Box(), y_shape=(16,),
                                     init=my_init)           # energy(params, x, y) -> [B]
    energy = en.energy_from_module(MyModule(), domain=en.Box(), y_shape=(16,))
    energy = en.as_energy(en.SPENEnergy(...))                # the library's own energies

`as_energy` turns a library energy module into its `Energy` through the module's own
`as_energy()` method, and passes an `Energy` through; `check` runs one `jax.eval_shape`
of the energy on a batch and raises a one-line `EnergyShapeError` naming the mismatch.

The pieces live in their own modules, whose names this one re-exports: the `Energy`
value (`energynets.energies.energy`), its checks (`energynets.energies.checks`) and the
adapters (`energynets.energies.adapters`).
"""

from energynets.energies.adapters import as_energy  # re-exported
from energynets.energies.adapters import default_starts  # re-exported
from energynets.energies.adapters import encoded_module  # re-exported
from energynets.energies.adapters import energy_from_function  # re-exported
from energynets.energies.adapters import energy_from_module  # re-exported
from energynets.energies.checks import NON_SMOOTH  # re-exported
from energynets.energies.checks import check  # re-exported
from energynets.energies.checks import check_smooth  # re-exported
from energynets.energies.checks import check_trainable  # re-exported
from energynets.energies.checks import check_y  # re-exported
from energynets.energies.checks import init_checked  # re-exported
from energynets.energies.checks import trainable_groups  # re-exported
from energynets.energies.energy import BOX  # re-exported
from energynets.energies.energy import RANDOM  # re-exported
from energynets.energies.energy import RANDOM_START_SEED  # re-exported
from energynets.energies.energy import Energy  # re-exported
from energynets.energies.energy import EnergyShapeError  # re-exported
from energynets.energies.energy import StartFn  # re-exported
from energynets.energies.energy import carried  # re-exported
from energynets.energies.energy import same_shapes  # re-exported

__all__ = [
  "BOX",
  "NON_SMOOTH",
  "RANDOM",
  "RANDOM_START_SEED",
  "Energy",
  "EnergyShapeError",
  "StartFn",
  "as_energy",
  "carried",
  "check",
  "check_smooth",
  "check_trainable",
  "check_y",
  "default_starts",
  "encoded_module",
  "energy_from_function",
  "energy_from_module",
  "init_checked",
  "same_shapes",
  "trainable_groups",
]

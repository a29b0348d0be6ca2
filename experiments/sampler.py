"""The settings a search tries, in order: the config's own first, then the whole grid or
optuna's TPE draws (seeded, each distinct), with successive halving over folds
(`Search`)."""

from collections.abc import Iterator
from typing import Any

import numpy as np
import optuna

from experiments import search_spaces

# Successive halving over folds: a trial goes on past a rung of folds (1, 3, 9, ...)
# only if its held-out value is among the top 1/PRUNE_FACTOR at that rung.
PRUNE_FACTOR = 3


class Search:
  """The settings of a search, and what it learns from their records.

  The first setting is the config's own (`default`, one trial even where its values are
  not among the space's); then every other grid point in order when `trials` is 0 or
  covers them, else settings drawn by optuna's TPE sampler seeded with `seed`, each
  distinct. The study's choices of a key are its candidates and the default's value, so
  that the config's own setting is a trial of the study, which learns from it and
  whose successive-halving pruner (`keep_going`) compares the other trials with it.
  """

  def __init__(self, space: dict[str, tuple], default: dict[str, Any], trials: int, seed: int):
    self.space = space
    self.default = default
    self._choices = {
      key: values if default[key] in values else (*values, default[key])
      for key, values in space.items()
    }
    in_grid = all(default[key] in values for key, values in space.items())
    size = search_spaces.grid_size(space) + (0 if in_grid else 1)
    self.exhaustive = trials <= 0 or trials >= size
    self.num_trials = size if self.exhaustive else trials
    self._distributions: dict[str, optuna.distributions.BaseDistribution] = {
      key: optuna.distributions.CategoricalDistribution(list(range(len(values))))
      for key, values in self._choices.items()
    }
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    self.study = optuna.create_study(
      direction="maximize",
      # Half the budget at random before the model, at most optuna's default of 10.
      sampler=optuna.samplers.TPESampler(
        seed=seed, n_startup_trials=min(10, max(1, self.num_trials // 2))
      ),
      pruner=optuna.pruners.SuccessiveHalvingPruner(
        min_resource=1, reduction_factor=PRUNE_FACTOR, min_early_stopping_rate=0
      ),
    )
    self._rng = np.random.default_rng(seed)
    self._trial: optuna.Trial | None = None

  @staticmethod
  def rungs(folds: int) -> tuple[int, ...]:
    """The fold counts after which a trial may stop: 1, 3, 9, ... below `folds`."""
    rungs, rung = [], 1
    while rung < folds:
      rungs.append(rung)
      rung *= PRUNE_FACTOR
    return tuple(rungs)

  def settings(self) -> Iterator[dict[str, Any]]:
    """Yields each trial's config overrides (`search_spaces.overrides`); the next is drawn
    after `tell` of the previous."""
    seen = {self._key(self.default)}
    self.study.enqueue_trial(self._indices(self.default))
    self._trial = self.study.ask(self._distributions)
    yield search_spaces.overrides(self.default)
    points = (
      (p for p in search_spaces.grid(self.space) if self._key(p) not in seen)
      if self.exhaustive
      else None
    )
    for _ in range(self.num_trials - 1):
      if points is not None:
        self.study.enqueue_trial(self._indices(next(points)))
      trial = self.study.ask(self._distributions)
      setting = self._setting(trial.params)
      if self._key(setting) in seen:
        # TPE proposes a setting already tried: one not yet seen, at random, instead.
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        unseen = self._unseen(seen)
        if unseen is None:
          return
        setting = unseen
        self.study.enqueue_trial(self._indices(setting))
        trial = self.study.ask(self._distributions)
      seen.add(self._key(setting))
      self._trial = trial
      yield search_spaces.overrides(setting)

  def keep_going(self, record: dict) -> bool:
    """Whether the current trial goes on after the folds of `record` (its held-out value
    so far reported to the pruner); the config's own setting always does."""
    assert self._trial is not None, "keep_going follows a setting"
    self._trial.report(record["value"], step=len(record["folds"]))
    return not self._trial.should_prune() or record["trial"] == 0

  def tell(self, record: dict) -> None:
    """Ends the current trial with its record: its value, or pruned."""
    assert self._trial is not None, "tell follows a setting"
    if record["pruned"]:
      self.study.tell(self._trial, state=optuna.trial.TrialState.PRUNED)
    else:
      self.study.tell(self._trial, record["value"])

  def _setting(self, indices: dict[str, int]) -> dict[str, Any]:
    return {key: choices[indices[key]] for key, choices in self._choices.items()}

  def _indices(self, setting: dict[str, Any]) -> dict[str, int]:
    return {key: self._choices[key].index(value) for key, value in setting.items()}

  def _key(self, setting: dict[str, Any]) -> tuple[int, ...]:
    """What identifies a setting: its values' places among the choices (equal values,
    such as 1 and 1.0, are one choice)."""
    return tuple(self._indices(setting).values())

  def _unseen(self, seen: set, attempts: int = 1000) -> dict[str, Any] | None:
    for _ in range(attempts):
      setting = {key: values[self._rng.integers(len(values))] for key, values in self.space.items()}
      if self._key(setting) not in seen:
        return setting
    return None

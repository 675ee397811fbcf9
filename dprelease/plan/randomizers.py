"""The respondents' randomizers of local tables, one type each: k-ary randomized response and
the coin flip (randomized response on yes/no). Each states its per-respondent ε bound (a
rational upper bound of the exact ε) and its keep probability, and owns its draw; the
planner's :class:`dprelease.plan.local.LocalPlan` holds one, and ``dprelease randomize``
draws with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np

from dprelease.accounting import ln_upper_bound
from dprelease.mechanisms.local import coin_flip, keep_probability, randomize
from dprelease.mechanisms.sampling import Entropy


@dataclass(frozen=True, slots=True)
class KRandomizedResponse:
    """k-ary randomized response, run by each respondent: the true category with probability
    e^ε/(e^ε + k − 1), each other one with probability 1/(e^ε + k − 1). ε-local DP for that
    respondent's answer (any two answers' report distributions are within e^ε)."""

    k: int
    epsilon: Fraction
    kind: ClassVar[str] = "k_rr"

    @property
    def epsilon_bound(self) -> Fraction:
        """The per-respondent ε the ledger records (exact)."""
        return self.epsilon

    @property
    def epsilon_shown(self) -> str:
        return str(self.epsilon)

    @property
    def keep_probability(self) -> float:
        """e^ε/(e^ε + k − 1), for the estimators (float: post-processing, never sampling)."""
        return keep_probability(float(self.epsilon), self.k)

    def draw(self, values: np.ndarray, rng: Entropy | None = None) -> np.ndarray:
        """Each respondent's report of their code in [0, k), exactly, from the OS CSPRNG."""
        return randomize(values, self.k, self.epsilon, rng=rng)


@dataclass(frozen=True, slots=True)
class CoinFlip:
    """Warner's coin flip for a yes/no answer: the truth with probability 3/4, the other answer
    with 1/4. ln 3-local DP; ln 3 is recorded as a rational upper bound."""

    k: ClassVar[int] = 2
    kind: ClassVar[str] = "coin_flip"

    @property
    def epsilon_bound(self) -> Fraction:
        return ln_upper_bound(3)

    @property
    def epsilon_shown(self) -> str:
        return "ln 3"

    @property
    def keep_probability(self) -> float:
        return 0.75

    def draw(self, values: np.ndarray, rng: Entropy | None = None) -> np.ndarray:
        """Each respondent's report of their yes/no code (0 or 1): two fair bits from the OS CSPRNG."""
        return coin_flip(values, rng=rng)


LocalRandomizer = KRandomizedResponse | CoinFlip

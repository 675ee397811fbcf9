"""Noise mechanisms: exact integer samplers fed by the OS CSPRNG, and their accuracy.

The only place randomness enters dprelease.
"""

from dprelease.mechanisms.discrete_laplace import epsilon_for_margin, margin_of_error
from dprelease.mechanisms.sampling import OsEntropy, check_scale, discrete_laplace

__all__ = ["OsEntropy", "check_scale", "discrete_laplace", "epsilon_for_margin", "margin_of_error"]

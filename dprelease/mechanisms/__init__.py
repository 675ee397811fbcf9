"""Noise mechanisms: exact integer samplers fed by the OS CSPRNG, and their accuracy.

The only place randomness enters dprelease.
"""

from dprelease.mechanisms.discrete_laplace import epsilon_for_margin, margin_of_error
from dprelease.mechanisms.exponential import permute_and_flip
from dprelease.mechanisms.gaussian import discrete_gaussian, sigma2_for, zcdp_rho
from dprelease.mechanisms.sampling import OsEntropy, check_scale, discrete_laplace
from dprelease.mechanisms.truncated import truncated_geometric

__all__ = ["OsEntropy", "check_scale", "discrete_gaussian", "discrete_laplace", "epsilon_for_margin",
           "margin_of_error", "permute_and_flip", "sigma2_for", "truncated_geometric", "zcdp_rho"]

"""Client-level DP: clipping, Gaussian and discrete Gaussian noise, secure sums, accounting."""

from fedjax_dp.privacy.accounting import (ACCOUNTANTS, accountant_label, epsilon,
                                          epsilon_curve, epsilon_discrete_gaussian,
                                          epsilon_discrete_gaussian_curve,
                                          noise_multiplier_for_epsilon)
from fedjax_dp.privacy.clipping import clip_by_l2_norm, l2_sensitivity
from fedjax_dp.privacy.discrete_gaussian import (discrete_gaussian_pmf,
                                                 sample_discrete_gaussian)
from fedjax_dp.privacy.noise import noise_share_std, noisy_sum, privatize
from fedjax_dp.privacy.secure_aggregation import bit_width, secure_sum

__all__ = ["ACCOUNTANTS", "accountant_label", "bit_width", "clip_by_l2_norm",
           "discrete_gaussian_pmf", "epsilon", "epsilon_curve",
           "epsilon_discrete_gaussian", "epsilon_discrete_gaussian_curve",
           "l2_sensitivity", "noise_multiplier_for_epsilon", "noise_share_std",
           "noisy_sum", "privatize", "sample_discrete_gaussian", "secure_sum"]

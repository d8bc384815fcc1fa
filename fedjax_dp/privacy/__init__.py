"""Client-level DP: clipping, Gaussian noise shares, accounting."""

from fedjax_dp.privacy.accounting import (ACCOUNTANTS, accountant_label, epsilon,
                                          epsilon_curve, noise_multiplier_for_epsilon)
from fedjax_dp.privacy.clipping import clip_by_l2_norm, l2_sensitivity
from fedjax_dp.privacy.noise import noise_share_std, noisy_sum

__all__ = ["ACCOUNTANTS", "accountant_label", "clip_by_l2_norm", "epsilon",
           "epsilon_curve", "l2_sensitivity", "noise_multiplier_for_epsilon",
           "noise_share_std", "noisy_sum"]

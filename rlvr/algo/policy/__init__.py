"""The policy term, token by token: importance ratios (`ratios.py`), surrogates
(`surrogates.py`: clip, CISPO, SAPO, GMPO, DPPO, ...), which tokens count (`masks.py`,
`token_selection.py`, `covariance.py`: Clip-Cov/KL-Cov), how they are averaged
(`aggregation.py`), and sampler/trainer mismatch correction (`rollout_correction.py`)."""

"""Advantages: the estimators a recipe names (`estimators.py`: group-normalized, RLOO,
REINFORCE++, batch-normalized, ...), GAE and VAPO's length-adaptive λ (`gae.py`), prompt
groups (`groups.py`), masked whitening (`whiten.py`) and per-token returns (`token_advantages.py`)."""

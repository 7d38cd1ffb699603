"""`rlvr show`: look at a run (config, last metrics, the completions it logged) in the
terminal or as one static HTML page, and at `rlvr eval --items` files, alone or two side
by side (items won and lost).

Nothing here imports torch at module level, so `rlvr show` starts fast; the curves' panel
definitions (rlvr/runlog/plots.py) and the paired statistics (rlvr/eval/paired.py) are
imported where they are used.
"""

from rlvr.show.load import ShowError, detect_kind

__all__ = ["ShowError", "detect_kind"]

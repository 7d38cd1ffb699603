"""Episodes in segments from saved mid-game states, through the sampling client (the
macro-steps of TEMPO, agentic-rl-lab 09-tempo): `sample_segments` resumes a `SavedState`
(its exact token ids, and the environment rebuilt after its actions) for at most `turns`
answered turns, and each `Segment` says whether it paused at that boundary with the game
going on (a value can be bootstrapped there) or ended, and what state it ends in."""

from rlvr.service.segments.resume import SavedState, Segment, sample_segments

__all__ = ["SavedState", "Segment", "sample_segments"]

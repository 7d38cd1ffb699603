"""Peer reference implementations, transcribed for equality tests only (never imported by rlvr)."""

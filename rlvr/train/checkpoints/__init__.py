"""Checkpoints a run resumes from bit for bit: weights, optimizer, scheduler, data order and
sampler state with a manifest of hashes (`checkpoint`), and every RNG state (`rng_state`)."""

"""A user's own reward functions, referenced from configs as `user_rewards:<name>`."""


def brevity(prompts, completions, **columns):
    """Shorter is better: -characters / 100 (hand-checkable, always has variance)."""
    return [-len(c) / 100 for c in completions]


def seen_columns(prompts, completions, question, reference, correct, **columns):
    """Records what it was called with; rewards 1 where the reference is even, else None."""
    seen_columns.calls.append({"question": question, "reference": reference, "correct": correct})
    return [1.0 if int(r) % 2 == 0 else None for r in reference]


seen_columns.calls = []

"""A user's own reward functions, referenced from configs as `user_rewards:<name>`."""


def brevity(prompts, completions, **columns):
    """Shorter is better: -characters / 100 (hand-checkable, always has variance)."""
    return [-len(c) / 100 for c in completions]


def seen_columns(prompts, completions, question, reference, correct, **columns):
    """Records what it was called with; rewards 1 where the reference is even, else None."""
    seen_columns.calls.append({"question": question, "reference": reference, "correct": correct})
    return [1.0 if int(r) % 2 == 0 else None for r in reference]


seen_columns.calls = []


def hang(prompts, completions, **columns):
    """Never returns in time: a reward function stuck on a network call."""
    import time

    time.sleep(60)
    return [0.0] * len(completions)


def nan_for_first(prompts, completions, **columns):
    """NaN for completion 0, 1 for every other: one bad value in a batch."""
    return [float("nan")] + [1.0] * (len(completions) - 1)


def always_nan(prompts, completions, **columns):
    return [float("nan")] * len(completions)


def raises(prompts, completions, **columns):
    raise KeyError("judge_score")


def one_too_few(prompts, completions, **columns):
    return [1.0] * (len(completions) - 1)


def text_values(prompts, completions, **columns):
    return ["good"] * len(completions)


def positional_only(texts):
    """A wrong signature: TRL's convention passes prompts= and completions= by keyword."""
    return [0.0] * len(texts)


def needs_difficulty(prompts, completions, difficulty):
    """Names a dataset column and takes no **kwargs: only that column is passed."""
    return [float(d) for d in difficulty]


def always_zero(prompts, completions, **columns):
    """0 for every completion: a verifier that never passes (the vision trial's first run)."""
    return [0.0] * len(completions)

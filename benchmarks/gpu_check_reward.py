"""The stand-in reward of `gpu_check.py`'s GRPO steps, in a module that imports nothing,
so that a reward worker process (rlvr runs reward functions under a time limit) starts
in milliseconds."""


def parity_reward(prompts: list[str], completions: list[str], **_) -> list[float]:
    """The parity of the completion's code points: random text gets a reward with variance
    inside every group, so GRPO's advantages are not all zero and the update does the
    work it does in a real run."""
    return [float(sum(map(ord, text)) % 2) for text in completions]

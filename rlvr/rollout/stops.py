"""Where a sampled sequence reaches a stop string: found on the decoded text, not on the
string's own token ids, because a BPE tokenizer may merge the string with what precedes
it (`)</` is one byte-level token) so its standalone ids never occur."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def stop_end(
    ids: Sequence[int], stops: Sequence[str], decode: Callable[[Sequence[int]], str]
) -> int | None:
    """The length of the shortest prefix of `ids` whose text contains one of `stops`, or
    None. A prefix's text grows with the prefix, so containment is found by bisection:
    about log2(len(ids)) decodes, not one per token."""
    if not stops or not any(s in decode(ids) for s in stops):
        return None
    low, high = 1, len(ids)
    while low < high:
        middle = (low + high) // 2
        if any(s in decode(ids[:middle]) for s in stops):
            high = middle
        else:
            low = middle + 1
    return low

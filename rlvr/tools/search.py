"""`search` over a local corpus, the Search-R1 tool: BM25 (`bm25s`) over a JSONL file of
passages, one `{"id": ..., "text": ..., "title": ...}` object per line (title optional).

    tools:
      - factory: rlvr.tools.search:make_search_tool
        options: {corpus: data/wiki.jsonl, top_k: 3}

`make_search_tool` indexes the corpus once, when the run starts, and returns the tool
`search(query: str) -> str`, whose text lists the top-k passages with their ids. Any other
retriever (an online search API, a dense index) fits behind the same function: an object
with `search(query, top_k) -> list[Passage]` (`SearchBackend`), passed as `backend=`
or named as `backend: module:factory` in the options.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rlvr.checks import resolve_callable


@dataclass(frozen=True)
class Passage:
    id: str
    text: str
    title: str = ""


class SearchBackend(Protocol):
    """What `make_search_tool` needs of a retriever."""

    def search(self, query: str, top_k: int) -> list[Passage]: ...


def read_corpus(path: str | Path) -> list[Passage]:
    """The passages of a JSONL file; a bad line is named by its number."""
    passages, seen = [], set()
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path} line {number}: not JSON ({error.msg})") from None
            if not isinstance(row, dict) or "id" not in row or not isinstance(row.get("text"), str):
                raise ValueError(f'{path} line {number}: needs "id" and a "text" string')
            if str(row["id"]) in seen:
                raise ValueError(f"{path} line {number}: id {row['id']!r} repeats")
            seen.add(str(row["id"]))
            passages.append(Passage(str(row["id"]), row["text"], str(row.get("title") or "")))
    if not passages:
        raise ValueError(f"{path}: no passages")
    return passages


class BM25Backend:
    """BM25 (Robertson & Zaragoza 2009; bm25s's Lucene variant, k1 = 1.5, b = 0.75) over
    title + text, English stop words removed; passages that share no term with the query
    are not returned."""

    def __init__(self, passages: list[Passage]) -> None:
        try:
            import bm25s
        except ImportError:
            raise ImportError(
                "the bm25 search backend needs bm25s: pip install 'rlvr[agent]'"
            ) from None
        self.bm25s, self.passages = bm25s, passages
        texts = [f"{p.title} {p.text}" if p.title else p.text for p in passages]
        self.index = bm25s.BM25()
        self.index.index(self._tokens(texts), show_progress=False)

    def _tokens(self, texts: list[str]) -> list[list[str]]:
        return self.bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)

    def search(self, query: str, top_k: int) -> list[Passage]:
        k = min(top_k, len(self.passages))
        rows, scores = self.index.retrieve(self._tokens([query]), k=k, show_progress=False)
        return [self.passages[int(r)] for r, s in zip(rows[0], scores[0], strict=True) if s > 0]


def format_passages(passages: list[Passage]) -> str:
    """`[1] (id: doc-7) Title: text`, one passage per line; a search that finds nothing
    says so."""
    if not passages:
        return "no results"
    lines = []
    for rank, p in enumerate(passages, 1):
        title = f"{p.title}: " if p.title else ""
        lines.append(f"[{rank}] (id: {p.id}) {title}{p.text}")
    return "\n".join(lines)


def make_search_tool(
    corpus: str | None = None, top_k: int = 3, backend: str | SearchBackend = "bm25", **options: Any
):
    """The `search` tool over `corpus` (a JSONL path) with BM25, or over `backend` (a
    `SearchBackend`, or `module:factory` called with `options`)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"search top_k must be an integer ≥ 1, got {top_k!r}")
    if backend == "bm25":
        if corpus is None:
            raise ValueError("the bm25 search backend needs corpus: a JSONL file of passages")
        if options:
            raise ValueError(f"search options {sorted(options)} do not apply to backend bm25")
        retriever: SearchBackend = BM25Backend(read_corpus(corpus))
    elif isinstance(backend, str):
        retriever = resolve_callable(backend, "search backend", "factory")(**options)
    else:
        retriever = backend
    if not callable(getattr(retriever, "search", None)):
        raise ValueError(f"search backend {backend!r} has no search(query, top_k) method")

    def search(query: str) -> str:
        """Search the knowledge base; returns the most relevant passages with their ids.

        Args:
            query: a short search query.
        """
        return format_passages(retriever.search(query, top_k))

    return search

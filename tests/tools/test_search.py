"""`search` over a local JSONL corpus: BM25 through bm25s ranks the passage that shares
the query's rare terms first and lists passages with their ids; a bad corpus is named by
line; another backend fits behind the same function; the config's tool factory makes it."""

from __future__ import annotations

import json

import pytest

from rlvr.envs.chat_tools import ChatToolEnvironment
from rlvr.tools.search import Passage, format_passages, make_search_tool, read_corpus

pytest.importorskip("bm25s", reason="the bm25 backend needs bm25s (rlvr[agent])")

ROWS = [
    {"id": "d1", "title": "Paris", "text": "Paris is the capital of France."},
    {"id": "d2", "title": "Berlin", "text": "Berlin is the capital of Germany."},
    {"id": "d3", "text": "The Seine flows through Paris."},
    {"id": "d4", "text": "Bread is baked in ovens."},
]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return str(path)


def test_bm25_ranks_passages_by_shared_rare_terms(corpus):
    search = make_search_tool(corpus, top_k=3)
    # "germany" occurs only in d2; "capital" in d1 and d2: d2 first, d1 second; d3 and d4
    # share no term with the query and are not listed
    assert search("capital of Germany") == (
        "[1] (id: d2) Berlin: Berlin is the capital of Germany.\n"
        "[2] (id: d1) Paris: Paris is the capital of France."
    )
    assert search("Paris").splitlines()[0].startswith("[1] (id: d1)")  # title + text: 2 hits
    assert make_search_tool(corpus, top_k=1)("Seine river") == (
        "[1] (id: d3) The Seine flows through Paris."
    )
    assert search("zebra") == "no results"


def test_a_bad_corpus_is_named_by_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1, "text": "a"}\n{"text": "no id"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl line 2: needs \"id\""):
        read_corpus(path)
    path.write_text('{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n')
    with pytest.raises(ValueError, match="line 2: id 1 repeats"):
        read_corpus(path)
    with pytest.raises(ValueError, match="top_k must be an integer ≥ 1"):
        make_search_tool(str(path), top_k=0)
    with pytest.raises(ValueError, match="needs corpus"):
        make_search_tool()


class FakeOnline:
    """An online backend stand-in: answers every query with one passage naming it."""

    def __init__(self, prefix: str = "web") -> None:
        self.prefix = prefix

    def search(self, query: str, top_k: int) -> list[Passage]:
        return [Passage(f"{self.prefix}-{i}", f"result {i} for {query}") for i in range(top_k)]


def test_another_backend_fits_behind_the_same_function():
    search = make_search_tool(backend=FakeOnline(), top_k=2)
    assert search("who") == "[1] (id: web-0) result 0 for who\n[2] (id: web-1) result 1 for who"
    named = make_search_tool(backend="test_search:FakeOnline", prefix="api", top_k=1)
    assert named("x") == format_passages([Passage("api-0", "result 0 for x")])


def test_the_config_factory_makes_a_search_the_chat_model_calls(corpus):
    from rlvr.envs.attach import environment_factory

    entry = {
        "factory": "rlvr.tools.search:make_search_tool",
        "options": {"corpus": corpus, "top_k": 1},
        "timeout_s": 3,
    }
    env = environment_factory(None, {}, [entry], "hermes")()
    assert isinstance(env, ChatToolEnvironment) and env.timeout_s == {"search": 3.0}
    reply = env.step('<tool_call>{"name": "search", "arguments": {"query": "Seine"}}</tool_call>')
    assert reply.observation == "[1] (id: d3) The Seine flows through Paris."

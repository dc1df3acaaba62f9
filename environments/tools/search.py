"""`search` tool: BM25 (bm25s library) over a small bundled corpus.

The default corpus, environments/data/search_corpus.jsonl, holds 80 short
documents about fictional towns and inventors (authored for this project, so
no model can know the answers without searching). Each line is
`{"id": str, "title": str, "text": str}`.
"""

from __future__ import annotations

import functools
import importlib.resources
import json

import bm25s

from jaxrl_agent.agent.tool_calls import ToolSpec
from jaxrl_agent.environments.tools.base import Tool, ToolError


def load_jsonl(name: str) -> list[dict]:
    """Reads environments/data/<name> (one JSON object per line) from the installed package."""
    text = importlib.resources.files("jaxrl_agent.environments").joinpath("data", name).read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@functools.lru_cache(maxsize=4)
def _index(corpus_name: str) -> tuple[bm25s.BM25, tuple[dict, ...]]:
    docs = tuple(load_jsonl(corpus_name))
    retriever = bm25s.BM25()
    tokens = bm25s.tokenize([f"{d['title']} {d['text']}" for d in docs], stopwords="en", show_progress=False)
    retriever.index(tokens, show_progress=False)
    return retriever, docs


class Search(Tool):
    """Returns the top-k documents for a keyword query, formatted `[id] title: text`."""

    spec = ToolSpec(
        name="search",
        description="Search a small encyclopedia of towns and inventors. Returns the best matching documents.",
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Keywords, e.g. a name.", "maxLength": 300}
            },
            "required": ["query"],
        },
    )

    def __init__(self, corpus_name: str = "search_corpus.jsonl", k: int = 2):
        if k < 1:
            raise ValueError(f"k: expected >= 1, got {k}")
        self.corpus_name = corpus_name
        self.k = k
        self.retriever, self.docs = _index(corpus_name)

    def run(self, query: str) -> str:
        tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        if not tokens or not tokens[0]:
            raise ToolError("the query has no searchable words")
        k = min(self.k, len(self.docs))
        ids, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        hits = [self.docs[int(i)] for i, s in zip(ids[0], scores[0]) if s > 0]
        if not hits:
            return "No results."
        return "\n".join(f"[{d['id']}] {d['title']}: {d['text']}" for d in hits)

"""A response's `file_search`, answered by us: the vector stores it names (those the project
reaches, else a 404) ground the chat in place of the project's store, and what was searched
becomes the response's `file_search_call` item and its citations' files."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.clients.ledger import Call
from gateway.clients.responses_input import new_id
from gateway.clients.responses_output import FileSearch, file_search_item
from gateway.clients.v1.grounding import Grounding
from gateway.clients.vector_store_ids import document_file_id
from gateway.clients.vector_store_selectors import files_of_documents, searchable_stores
from retrieval.search import Hit


@dataclass
class FileSearchGrounding(Grounding):
    """A chat grounded by a `file_search`; once searched, ``search`` is what the response says of
    it (with the passages as `results` when ``with_results``: `include` names them)."""

    with_results: bool = False
    search: FileSearch | None = None

    async def found(self) -> None:
        named = await files_of_documents(document_ids=list({hit.document_id for hit in self.hits}))
        # A document deleted since the search is still named, as it was found.
        files = [named.get(hit.document_id, (document_file_id(hit.document_id), hit.filename)) for hit in self.hits]
        results = (
            [_result(hit, *file) for hit, file in zip(self.hits, files, strict=True)] if self.with_results else None
        )
        item = file_search_item(new_id("fs"), [self.query], results, _status(self))
        self.search = FileSearch(item=item, files=files)


async def file_search_grounding(call: Call, tool: dict, *, with_results: bool) -> FileSearchGrounding:
    """The stores of the checked `file_search` ``tool``, searched with its results bound and its
    filter (the key's document scope is ANDed in by the search itself)."""
    stores = await searchable_stores(project=call.project, vector_store_ids=tool["vector_store_ids"])
    return FileSearchGrounding(stores, tool["filters"], tool["max_num_results"], with_results=with_results)


def _result(hit: Hit, file_id: str, filename: str) -> dict:
    # A reranked hit's relevance, else its store's fused score: each store's own scale.
    score = hit.rerank_score if hit.rerank_score is not None else hit.score
    return {
        "file_id": file_id,
        "filename": filename,
        "score": round(score, 4),
        "text": hit.content,
        "attributes": hit.attributes,
    }


def _status(grounding: Grounding) -> str:
    if grounding.failed == 0:
        return "completed"
    return "failed" if grounding.failed == len(grounding.stores) else "incomplete"

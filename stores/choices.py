"""The fixed vocabularies of stores and documents (plain enums: no database, no app registry)."""

from __future__ import annotations

from django.db import models

# The longest section path a chunk keeps (the column's length); a longer heading is cut by the
# chunker, which cannot reach the model.
SECTION_MAX_LENGTH = 1024


class SearchMode(models.TextChoices):
    VECTOR = "vector"
    HYBRID = "hybrid"
    LEXICAL = "lexical"


class SearchBackend(models.TextChoices):
    PGVECTOR = "pgvector"
    BM25 = "bm25"
    PG_SEARCH = "pg_search"


class FusionRule(models.TextChoices):
    """How a hybrid search fuses its vector and lexical lists (retrieval/ranking.py). ``scores``
    (min-max score fusion) won issue 40's measurements (docs/benchmarks.md); ``rrf`` is the
    seed's weighted reciprocal rank fusion, kept so the two can be compared."""

    SCORES = "scores"
    RRF = "rrf"


# New stores', searches' and fusion's rule when none is named.
DEFAULT_FUSION = FusionRule.SCORES


class RerankBackend(models.TextChoices):
    LLM = "llm"
    COHERE = "cohere"
    VOYAGE = "voyage"


class UnknownStrategy(ValueError):
    def __init__(self, name: str):
        super().__init__(f'unknown chunking strategy "{name}"; valid: {ChunkingStrategy.described()}')
        self.name = name


class ChunkingStrategy(models.TextChoices):
    SECTION = "section"
    WORD = "word"
    SEMANTIC = "semantic"
    CHARACTER = "character"

    @classmethod
    def parse(cls, name: str) -> ChunkingStrategy:
        """The strategy for ``name``, ignoring case and surrounding spaces, aliases included."""
        key = name.strip().lower()
        key = CHUNKING_ALIASES.get(key, key)
        if key not in cls.values:
            raise UnknownStrategy(name.strip())
        return cls(key)

    @classmethod
    def described(cls) -> str:
        """Every strategy with its aliases, for error messages."""
        described = []
        for strategy in cls.values:
            aliases = [alias for alias, target in CHUNKING_ALIASES.items() if target == strategy]
            described.append(f"{strategy} ({', '.join(aliases)})" if aliases else strategy)
        return ", ".join(described)


CHUNKING_ALIASES = {
    "words": "word",
    "sentence": "semantic",
    "paragraph": "semantic",
    "char": "character",
    "chars": "character",
}


class DocumentStatus(models.TextChoices):
    PENDING = "pending"
    PROCESSING = "processing"
    READY = "ready"
    FAILED = "failed"


class ErrorStage(models.TextChoices):
    """Where a failed document stopped."""

    UPLOAD = "upload"
    PARSE = "parse"
    CHUNK = "chunk"
    EMBED = "embed"
    INDEX = "index"

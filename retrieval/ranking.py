"""Pure ranking logic: query shaping, min-max score fusion and reciprocal rank fusion, the distance cut-off and the
edit distance used by typo correction. No database here."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from stores.choices import DEFAULT_FUSION, FusionRule
from stores.lexical import OR_OPERATOR, is_exclusion

# Reciprocal rank fusion's constant (the seed's): a rank r scores weight / (RRF_K + r).
RRF_K = 60

# Unknown words corrected per query at most: each costs a trigram lookup in the vocabulary, and a
# pasted page of unknown words (4000 characters, 570 words) took a second without a bound.
MAX_TYPO_CORRECTIONS = 32
# A corrected stem's word is its most frequent form in this many of the chunks holding it most.
SURFACE_FORM_CHUNKS = 10
# The trigram similarity (pg_trgm's) a vocabulary term needs to be a candidate correction at all.
TYPO_SIMILARITY_FLOOR = 0.2
# Candidate lookups run one statement per similarity threshold, rounded down to this step, so a
# page of misspellings costs a handful of statements. Finer would not be rounded away where it
# counts most: a 4-letter stem has five trigrams, and at 0.22 the index needs two of them shared
# where at 0.2 one will do (one shared trigram is thousands of terms to recheck).
TYPO_SIMILARITY_STEP = 0.01
_WORD = re.compile(r"\S+")
_TRIGRAM_WORD = re.compile(r"[a-z0-9]+")


def uses_websearch_syntax(query: str) -> bool:
    """Quoted phrases, an upper-case ``OR`` or an excluded ``-term`` (stores.lexical.is_exclusion)
    make a query websearch syntax. A lower-case "or" and hyphens within words are text."""
    words = query.split()
    return '"' in query or OR_OPERATOR in words or any(is_exclusion(word) for word in words)


def or_query(query: str) -> str:
    """A plain question matches chunks with any of its words (ranking prefers more of them);
    websearch syntax is passed through unchanged."""
    if uses_websearch_syntax(query):
        return query
    return f" {OR_OPERATOR} ".join(_WORD.findall(query))


# A quoted phrase, excluded when a hyphen starting a word comes right before its opening quote.
_PHRASE = re.compile(r'(?:(?<!\S)-)?"[^"]*"')


def phrase_and_exclusion_filter(query: str) -> str | None:
    """The quoted phrases and ``-excluded`` terms of a query, as websearch syntax, or None.

    BM25 already ranks chunks by any of the query's words; only phrases and exclusions restrict
    which chunks may match. A hyphen excludes only where it starts a word of the query as typed:
    ``"exact"-word`` excludes nothing.
    """
    phrases = [p for p in _PHRASE.findall(query) if p.strip('-" ')]
    # A phrase leaves a non-space mark behind, so a hyphen right after it does not start a word.
    outside = _PHRASE.sub('""', query)
    exclusions = [w.replace('"', "") for w in outside.split() if is_exclusion(w)]
    return " ".join(phrases + exclusions) or None


def positive_text(query: str) -> str:
    """The words that score: everything but excluded terms and the ``OR`` operator, phrase
    quotes removed. A lower-case "or" is a word like any other."""
    kept = [w for w in query.split() if not is_exclusion(w) and w != OR_OPERATOR]
    return " ".join(" ".join(kept).replace('"', " ").split())


@dataclass(frozen=True)
class Fused:
    chunk_id: int
    # Score fusion: 0–1, the weighted mean of the chunk's normalised scores on the searched sides.
    # Reciprocal rank fusion: the sum of weight / (RRF_K + rank) over the sides holding the chunk.
    score: float
    vector_rank: int  # 1-based; 0 when the chunk was not a vector candidate
    fts_rank: int  # 1-based; 0 when the chunk was not a lexical candidate


def min_max(scores: Sequence[float]) -> list[float]:
    """Each score placed between its list's lowest (0) and highest (1); a list whose scores are
    all equal places every one at 1 (each is as good as the best)."""
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high == low:
        return [1.0] * len(scores)
    return [(score - low) / (high - low) for score in scores]


def fuse(
    vector: Sequence[tuple[int, float]],
    lexical: Sequence[tuple[int, float]],
    *,
    vector_weight: float = 1.0,
    lexical_weight: float = 1.0,
    rule: str = DEFAULT_FUSION,
) -> list[Fused]:
    """The two lists fused by ``rule`` (a FusionRule): ``vector`` is (chunk id, cosine distance),
    ``lexical`` (chunk id, score: higher is better), each best first.

    Ties keep a stable order: a chunk both sides found first (two witnesses over one: under
    min-max the lexical leg's best, when it is the vector leg's last, ties with a chunk only the
    vector leg found, first there), then the better best rank, then the lower chunk id.
    """
    vector_rank = {chunk_id: rank for rank, (chunk_id, _) in enumerate(vector, start=1)}
    lexical_rank = {chunk_id: rank for rank, (chunk_id, _) in enumerate(lexical, start=1)}
    if rule == FusionRule.RRF:
        score_of = reciprocal_rank_scores(vector_rank, lexical_rank, vector_weight, lexical_weight)
    else:
        score_of = min_max_scores(vector, lexical, vector_weight, lexical_weight)
    fused = [
        Fused(chunk_id, score_of(chunk_id), vector_rank.get(chunk_id, 0), lexical_rank.get(chunk_id, 0))
        for chunk_id in {**vector_rank, **lexical_rank}
    ]
    best_rank = lambda item: min(r for r in (item.vector_rank, item.fts_rank) if r)  # noqa: E731
    sides_found = lambda item: bool(item.vector_rank) + bool(item.fts_rank)  # noqa: E731
    fused.sort(key=lambda item: (-item.score, -sides_found(item), best_rank(item), item.chunk_id))
    return fused


def min_max_scores(
    vector: Sequence[tuple[int, float]],
    lexical: Sequence[tuple[int, float]],
    vector_weight: float,
    lexical_weight: float,
) -> Callable[[int], float]:
    """Min-max score fusion. Each side's scores are placed between 0 (its worst candidate) and 1
    (its best), and a chunk scores the weighted mean of its two: score = (wv · v + wl · l) /
    (wv + wl), a side the chunk is missing from giving 0. A side with no candidates has no share,
    so a one-sided search scores its side's normalised score alone.

    Unlike reciprocal rank fusion this keeps how far apart the candidates are: a lexical leg
    whose best chunk stands far above the rest is not levelled down to the vector leg's ranks
    (on LISA's long questions rank fusion fell below its lexical leg; docs/benchmarks.md).
    """
    sides = [
        (weight, dict(zip((chunk_id for chunk_id, _ in rows), min_max(values), strict=True)))
        for weight, rows, values in (
            (vector_weight, vector, [-distance for _, distance in vector]),
            (lexical_weight, lexical, [score for _, score in lexical]),
        )
        if rows
    ]
    total_weight = sum(weight for weight, _ in sides)

    def score(chunk_id: int) -> float:
        weighted = sum(weight * normalised.get(chunk_id, 0.0) for weight, normalised in sides)
        return weighted / total_weight if total_weight > 0 else 0.0

    return score


def reciprocal_rank_scores(
    vector_rank: dict[int, int], lexical_rank: dict[int, int], vector_weight: float, lexical_weight: float
) -> Callable[[int], float]:
    """Weighted reciprocal rank fusion (the seed's): score = wv / (60 + vector_rank) + wl / (60 +
    fts_rank), a side the chunk is missing from adding nothing. With 1:1 weights this is plain
    RRF: a chunk first on both sides scores 2/61. Only ranks count, not how far apart the
    candidates' scores are."""

    def score(chunk_id: int) -> float:
        return sum(
            weight / (RRF_K + ranks[chunk_id])
            for weight, ranks in ((vector_weight, vector_rank), (lexical_weight, lexical_rank))
            if chunk_id in ranks
        )

    return score


def within_distance(fused: Iterable[Fused], distances: dict[int, float | None], max_distance: float) -> list[Fused]:
    """Drops hits further than ``max_distance`` (0 = off) after fusion, so the hits that stay keep
    their scores and ranks. A hit whose distance is unknown cannot be judged and is dropped."""
    if max_distance <= 0:
        return list(fused)
    return [
        item for item in fused if distances.get(item.chunk_id) is not None and distances[item.chunk_id] <= max_distance
    ]


def edit_distance(a: str, b: str, *, limit: int) -> int:
    """Levenshtein distance, or ``limit + 1`` as soon as it must exceed ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        if min(current) > limit:
            return limit + 1
        previous = current
    return previous[-1]


def allowed_typos(word: str) -> int:
    """Words under 4 characters are never corrected; 1 edit up to 7 characters, 2 from 8."""
    if len(word) < 4:
        return 0
    return 1 if len(word) <= 7 else 2


@dataclass(frozen=True)
class Correction:
    original: str
    # The vocabulary term: under a stemming configuration a stem ("liabil"), what the query uses.
    corrected: str
    distance: int
    # The word to show a person: the term's most frequent form in the indexed text ("liability").
    corrected_word: str = ""


def typo_limit(word: str, lexeme: str) -> int:
    """Edits allowed for a typed ``word`` whose lexeme is ``lexeme`` (the word itself, lowercased,
    under `simple`; its stem under a stemming configuration): what both lengths allow, so a short
    stem of a longer word is not loosened by its lost ending."""
    return min(allowed_typos(word), allowed_typos(lexeme))


def correction_similarity(lexeme: str, edits: int) -> float:
    """The trigram similarity every term within ``edits`` edits of ``lexeme`` reaches, rounded
    down to TYPO_SIMILARITY_STEP and at least TYPO_SIMILARITY_FLOOR: looking up only the terms at
    or above it finds the same corrections while the trigram index rechecks far fewer terms.

    pg_trgm pads a word to "  word " and compares sets of trigrams: similarity = shared / (|A| +
    |B| − shared). An edit touches at most three of the lexeme's trigrams, so a term within
    ``edits`` keeps at least |A| − 3 · edits of them, and has at most len + edits + 1 trigrams of its
    own: similarity ≥ (|A| − 3 · edits) / (len + 4 · edits + 1). A 7-letter stem one edit away
    is at least 0.4 similar. Only for lowercase ASCII letters and digits: which other characters
    pg_trgm splits words at depends on the database's locale."""
    if not _TRIGRAM_WORD.fullmatch(lexeme):
        return TYPO_SIMILARITY_FLOOR
    padded = f"  {lexeme} "
    trigrams = len({padded[i : i + 3] for i in range(len(padded) - 2)})
    bound = (trigrams - 3 * edits) / (len(lexeme) + 4 * edits + 1)
    # Strictly below the bound: pg_trgm computes similarity in single precision, and 7/20 in
    # float4 is a little under 0.35.
    steps = math.floor((bound - 1e-6) / TYPO_SIMILARITY_STEP)
    return max(TYPO_SIMILARITY_FLOOR, round(steps * TYPO_SIMILARITY_STEP, 2))


def best_correction(word: str, lexeme: str, candidates: Iterable[tuple[str, int]]) -> Correction | None:
    """The vocabulary term closest to the lexeme of a typed ``word`` (terms are lexemes too)
    within :func:`typo_limit`; ties go to the more frequent term, then alphabetical order.
    ``candidates`` are (term, document frequency) pairs."""
    limit = typo_limit(word, lexeme)
    if limit == 0:
        return None
    best: tuple[int, int, str] | None = None
    for term, df in candidates:
        distance = edit_distance(lexeme, term, limit=limit)
        if distance <= limit and (best is None or (distance, -df, term) < best):
            best = (distance, -df, term)
    return Correction(word, best[2], best[0]) if best else None


def apply_corrections(query: str, corrections: Sequence[Correction]) -> str:
    """The query with each corrected word replaced (case-insensitive, whole words)."""
    for correction in corrections:
        query = re.sub(
            rf"(?<!\w){re.escape(correction.original)}(?!\w)", correction.corrected, query, flags=re.IGNORECASE
        )
    return query

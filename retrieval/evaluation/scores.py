"""The evaluation engine's arithmetic: document rankings scored against graded judgements, their
means over a set of questions, and the paired bootstrap that tells two configurations apart.

Pure functions, no Django: the product's evaluation runs, ``ragmux eval`` and bench/quality.py all
call these, so the bench and the product cannot disagree. A ranking is a sequence of document
keys, best first (Document ids in the product, BEIR ids in the bench); judgements map a document
key to its grade (0 or absent: not relevant).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Generic, TypeVar

import numpy as np

NDCG_DEPTH = 10
RECALL_DEPTH = 100
POOL = 100  # chunks asked of each search (and candidates per side); collapsed to documents
BOOTSTRAP_RESAMPLES = 10_000
LATENCY_PERCENTILE = 95

T = TypeVar("T")
K = TypeVar("K")


def collapse_to_documents(ids: Iterable[T]) -> list[T]:
    """The documents of a chunk ranking (each chunk given as its document), each at its best
    chunk: order of first appearance."""
    return list(dict.fromkeys(ids))


def relevant(judgements: Mapping[K, int]) -> set[K]:
    return {document for document, grade in judgements.items() if grade > 0}


def ndcg(ranking: Sequence[K], judgements: Mapping[K, int], depth: int = NDCG_DEPTH) -> float:
    """nDCG with graded (linear) gains and a log2 discount; the ideal ranking orders every
    judged document of the question, retrieved or not."""
    dcg = sum(max(judgements.get(doc, 0), 0) / math.log2(rank + 1) for rank, doc in enumerate(ranking[:depth], 1))
    ideal_gains = sorted((gain for gain in judgements.values() if gain > 0), reverse=True)[:depth]
    ideal = sum(gain / math.log2(rank + 1) for rank, gain in enumerate(ideal_gains, 1))
    return dcg / ideal if ideal else 0.0


def recall(ranking: Sequence[K], judgements: Mapping[K, int], depth: int = RECALL_DEPTH) -> float:
    """The share of relevant documents among the first ``depth`` ranked."""
    wanted = relevant(judgements)
    return len(wanted.intersection(ranking[:depth])) / len(wanted) if wanted else 0.0


def reciprocal_rank(ranking: Sequence[K], judgements: Mapping[K, int]) -> float:
    """1 / the rank of the first relevant document; 0 when none came back."""
    return next((1.0 / rank for rank, doc in enumerate(ranking, 1) if judgements.get(doc, 0) > 0), 0.0)


def hit(ranking: Sequence[K], judgements: Mapping[K, int], depth: int = NDCG_DEPTH) -> float:
    """1.0 when a relevant document is among the first ``depth``, else 0.0."""
    return 1.0 if any(judgements.get(doc, 0) > 0 for doc in ranking[:depth]) else 0.0


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of ``values``, interpolated linearly between the closest
    ranks (numpy's default method), so p50 of an even count is the mean of the middle two."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    position = (len(ordered) - 1) * q / 100
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


@dataclass(frozen=True)
class QuestionScore(Generic[K]):
    ndcg: float
    recall: float
    reciprocal_rank: float
    hit: float
    latency_ms: float
    # Each relevant judged document that came back, with its 1-based rank, best first.
    found: tuple[tuple[K, int], ...]


def score_question(ranking: Sequence[K], judgements: Mapping[K, int], latency_ms: float) -> QuestionScore[K]:
    return QuestionScore(
        ndcg=ndcg(ranking, judgements),
        recall=recall(ranking, judgements),
        reciprocal_rank=reciprocal_rank(ranking, judgements),
        hit=hit(ranking, judgements),
        latency_ms=latency_ms,
        found=tuple((doc, rank) for rank, doc in enumerate(ranking, 1) if judgements.get(doc, 0) > 0),
    )


@dataclass(frozen=True)
class Summary:
    questions: int
    ndcg: float
    recall: float
    mrr: float
    hit_rate: float
    latency_mean_ms: float
    latency_p95_ms: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def summarise(scores: Sequence[QuestionScore[K]]) -> Summary:
    """Means over the questions (and the latency's p95); every figure 0 for no questions."""
    if not scores:
        return Summary(
            questions=0, ndcg=0.0, recall=0.0, mrr=0.0, hit_rate=0.0, latency_mean_ms=0.0, latency_p95_ms=0.0
        )
    count = len(scores)
    return Summary(
        questions=count,
        ndcg=sum(score.ndcg for score in scores) / count,
        recall=sum(score.recall for score in scores) / count,
        mrr=sum(score.reciprocal_rank for score in scores) / count,
        hit_rate=sum(score.hit for score in scores) / count,
        latency_mean_ms=sum(score.latency_ms for score in scores) / count,
        latency_p95_ms=percentile((score.latency_ms for score in scores), LATENCY_PERCENTILE),
    )


@dataclass(frozen=True)
class Difference:
    """Mean of ``ours − theirs`` over paired per-question scores, with its 95 % interval."""

    mean: float
    low: float
    high: float

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def paired_bootstrap(
    ours: Sequence[float], theirs: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> Difference:
    """The mean of ``ours − theirs`` over paired per-question scores and its 95 % confidence
    interval by the percentile bootstrap over questions (fixed seed: the same scores always give
    the same interval)."""
    if len(ours) != len(theirs):
        raise ValueError(f"paired scores differ in length: {len(ours)} and {len(theirs)}")
    if not ours:
        raise ValueError("paired bootstrap of no scores")
    differences = np.asarray(ours, dtype=np.float64) - np.asarray(theirs, dtype=np.float64)
    resampled = np.random.default_rng(seed).integers(0, len(differences), size=(resamples, len(differences)))
    means = differences[resampled].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Difference(mean=float(differences.mean()), low=float(low), high=float(high))


# Scores are shown, compared in words and ranked for "Best" to this many decimals.
SHOWN_PLACES = 3


def _three_places(value: float) -> str:
    return f"{round(value, SHOWN_PLACES) + 0.0:.{SHOWN_PLACES}f}"  # + 0.0: a tiny negative shows as 0.000, not -0.000


def describe(difference: Difference, *, ours: str, theirs: str) -> str:
    """The comparison in words, e.g. "B is better than A by 0.031, and the interval
    [0.012, 0.050] excludes 0"."""
    if difference.low == difference.high == 0:
        return f"{ours} and {theirs} score the same on every question"
    interval = f"[{_three_places(difference.low)}, {_three_places(difference.high)}]"
    size = _three_places(abs(difference.mean))
    if size == _three_places(0.0):
        said = f"{ours} and {theirs} score the same to three decimals"
    elif difference.mean > 0:
        said = f"{ours} is better than {theirs} by {size}"
    else:
        said = f"{ours} is worse than {theirs} by {size}"
    if difference.excludes_zero:
        return f"{said}, and the interval {interval} excludes 0"
    return f"{said}, but the interval {interval} includes 0, so the difference may be chance"

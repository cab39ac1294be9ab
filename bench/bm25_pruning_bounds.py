"""How many postings exact BM25 top-k must read on long queries, under three kinds of upper bound:
a model of the bm25 backend's pruning, with no database, on the corpus of bench/search_latency.py.

    python bench/bm25_pruning_bounds.py [--chunks N] [--queries Q] [--top K] [--seed S]

The corpus and the queries follow search_latency.py's model (Zipf law over its pseudo-word
vocabulary, chunks of its word-count span, paragraph queries of its length; words are counted as
they are drawn, without the index language's stemming). For each query the exact scores of every
chunk are computed and the k-th best is the threshold. A chunk can be left unread only if the
bounds of what it could still score stay below that threshold, so each scheme reports how many
postings it must read:

- ``idf``: a term adds less than its idf to any chunk; the most frequent terms are skipped while
  their idfs sum below the threshold, every other term is read in full (the exact pass,
  retrieval/bm25.py ``_bm25_exact_statement``);
- ``largest``: the same with each term bounded by its largest contribution to any chunk;
- ``density``: postings read densest first (the ``chunk_terms_by_density`` order), each term cut
  where the remaining postings' contribution bound (idf · d / (d + k1 · (1 − b) / longest +
  k1 · b / average length), d the density where the term was cut) is cheapest against its
  postings, so that all terms' bounds sum to ``margin`` times the threshold (the best cut-offs
  over all terms, found by a Lagrangian search); it also reports the chunks read whose bound
  still reaches the threshold, which would each need an index probe to rescore.

Last line: one JSON object.
"""

from __future__ import annotations

import argparse

import numpy as np
from harness import print_table, report
from search_latency import PARAGRAPH_WORDS, TOP_K, VOCABULARY, WORDS_PER_CHUNK, ZIPF_EXPONENT, draw_ranks, zipf_cdf

from retrieval.bm25 import BM25_B, BM25_K1

MARGINS = (0.95, 0.7, 0.4)


class Corpus:
    """Postings of a synthetic corpus, each term's sorted densest first."""

    def __init__(self, rng: np.random.Generator, chunks: int):
        self.cdf = zipf_cdf(VOCABULARY, ZIPF_EXPONENT)
        lengths = rng.integers(WORDS_PER_CHUNK[0], WORDS_PER_CHUNK[1] + 1, size=chunks)
        ranks = draw_ranks(rng, self.cdf, int(lengths.sum()))
        keys, tf = np.unique(
            ranks.astype(np.int64) * chunks + np.repeat(np.arange(chunks), lengths), return_counts=True
        )
        terms, chunk_ids = keys // chunks, keys % chunks
        self.chunks = chunks
        self.starts = np.searchsorted(terms, np.arange(VOCABULARY + 1))
        df = np.diff(self.starts)
        self.idf = np.log(1 + (chunks - df + 0.5) / (df + 0.5))
        average = lengths.mean()
        length = lengths[chunk_ids]
        self.density = tf / length
        self.part = tf / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / average))
        self.chunk_ids = chunk_ids
        # The smallest denominator a posting of density d can have: d + this, at the longest chunk.
        self.density_offset = BM25_K1 * (1 - BM25_B) / lengths.max() + BM25_K1 * BM25_B / average
        self._postings: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chunk ids, densities, contributions) of ``term``, densest first."""
        if term not in self._postings:
            span = slice(self.starts[term], self.starts[term + 1])
            order = np.argsort(-self.density[span], kind="stable")
            self._postings[term] = (
                self.chunk_ids[span][order],
                self.density[span][order],
                self.part[span][order] * self.idf[term],
            )
        return self._postings[term]

    def remaining_bounds(self, term: int) -> np.ndarray:
        """Entry n: the bound of what ``term`` adds to a chunk among its postings after the first n."""
        _, density, _ = self.postings(term)
        return np.append(self.idf[term] * density / (density + self.density_offset), 0.0)


def skipped_postings(corpus: Corpus, terms: np.ndarray, bounds: np.ndarray, threshold: float) -> int:
    """Postings of the terms that must be read when the others, weakest bound first, are
    skipped while their bounds sum below ``threshold``."""
    order = np.argsort(bounds, kind="stable")
    deciding = terms[order][np.cumsum(bounds[order]) >= threshold]
    return int(sum(len(corpus.postings(t)[0]) for t in deciding))


def density_cutoffs(corpus: Corpus, terms: np.ndarray, threshold: float, margin: float) -> tuple[int, int]:
    """(postings read, chunks read whose bound reaches ``threshold``) with the cheapest per-term
    cut-offs whose remaining bounds sum to at most ``margin`` · ``threshold``."""
    curves = {term: corpus.remaining_bounds(term) for term in terms}

    def cut(weight: float) -> tuple[dict[int, int], float]:
        depths = {t: int(np.argmin(np.arange(len(c)) + weight * c)) for t, c in curves.items()}
        return depths, sum(curves[t][n] for t, n in depths.items())

    low, high = 1e-3, 1e12
    for _ in range(80):
        middle = np.sqrt(low * high)
        if cut(middle)[1] <= margin * threshold:
            high = middle
        else:
            low = middle
    depths, unread = cut(high)
    partial = np.zeros(corpus.chunks)
    seen = np.zeros(corpus.chunks, dtype=bool)
    for term, depth in depths.items():
        chunk_ids, _, scores = corpus.postings(term)
        np.add.at(partial, chunk_ids[:depth], scores[:depth] - curves[term][depth])
        seen[chunk_ids[:depth]] = True
    return sum(depths.values()), int((seen & (partial + unread >= threshold)).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--top", type=int, default=TOP_K)
    parser.add_argument("--seed", type=int, default=20261203)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    corpus = Corpus(rng, args.chunks)
    rows = []
    for _ in range(args.queries):
        terms = np.unique(draw_ranks(rng, corpus.cdf, PARAGRAPH_WORDS))
        terms = terms[[len(corpus.postings(t)[0]) > 0 for t in terms]]
        scores = np.zeros(corpus.chunks)
        for term in terms:
            chunk_ids, _, parts = corpus.postings(term)
            np.add.at(scores, chunk_ids, parts)
        threshold = np.sort(scores)[-args.top]
        largest = np.array([corpus.postings(t)[2].max() for t in terms])
        row = {
            "postings": int(sum(len(corpus.postings(t)[0]) for t in terms)),
            "idf": skipped_postings(corpus, terms, corpus.idf[terms], threshold),
            "largest": skipped_postings(corpus, terms, largest, threshold),
        }
        for margin in MARGINS:
            row[f"density {margin}"], row[f"rescored {margin}"] = density_cutoffs(corpus, terms, threshold, margin)
        rows.append(row)
    summary = {
        key: {
            "median": float(np.median([r[key] for r in rows])),
            "p95": float(np.percentile([r[key] for r in rows], 95)),
        }
        for key in rows[0]
    }
    print(f"{args.queries} paragraph queries of {PARAGRAPH_WORDS} words, top {args.top}, {args.chunks} chunks")
    print_table(
        [(key, round(value["median"]), round(value["p95"])) for key, value in summary.items()],
        ("postings read (or chunks to rescore)", "median", "p95"),
    )
    report({"chunks": args.chunks, "queries": args.queries, "top": args.top, "summary": summary})


if __name__ == "__main__":
    main()

"""Property tests of the chunker: any blocks, any strategy, any valid size and overlap give bounded chunks."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingestion.chunking import chunk_blocks
from stores.choices import CHUNKING_ALIASES, ChunkingStrategy

# Deterministic (the same examples on every run, no example database) and fast enough for every test run.
PROPERTY_SETTINGS = settings(
    max_examples=100,
    derandomize=True,
    database=None,
    # A generous bound: chunking these inputs takes milliseconds, so only runaway work reaches it.
    deadline=5000,
    # Generating examples can be slow on a loaded machine; that is no failure of the code under test.
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass(frozen=True)
class Block:
    text: str
    section: str
    page: int | None


# Sentence ends, blank lines, runs of spaces and long words are where the chunker's rules meet.
PIECES = st.sampled_from([" ", "  ", "\n", "\n\n", " \n \n ", "\t", ".", "!", "?", ". ", "\u00a0", "\u3000"])
WORDS = st.text(alphabet="abcxyzé漢", min_size=1, max_size=40)
TEXT = st.lists(st.one_of(PIECES, WORDS, st.text(max_size=8)), max_size=30).map("".join)
BLOCKS = st.lists(
    st.builds(
        Block, text=TEXT, section=st.sampled_from(["", "Intro", "Intro > Setup"]), page=st.none() | st.integers(1, 3)
    ),
    max_size=12,
)
STRATEGY_NAMES = st.sampled_from([*ChunkingStrategy.values, *CHUNKING_ALIASES, " Section "])


@st.composite
def sizes(draw: st.DrawFn) -> tuple[int, int]:
    chunk_size = draw(st.integers(min_value=1, max_value=120))
    return chunk_size, draw(st.integers(min_value=0, max_value=chunk_size - 1))


def runs(blocks: list[Block]) -> list[list[Block]]:
    """Consecutive non-blank blocks sharing (section, page): the chunker chunks each run on its own."""
    grouped: list[list[Block]] = []
    for block in blocks:
        if not block.text.strip():
            continue
        if grouped and (grouped[-1][0].section, grouped[-1][0].page) == (block.section, block.page):
            grouped[-1].append(block)
        else:
            grouped.append([block])
    return grouped


def is_character(strategy: str) -> bool:
    return ChunkingStrategy.parse(strategy) == ChunkingStrategy.CHARACTER


@PROPERTY_SETTINGS
@given(blocks=BLOCKS, strategy=STRATEGY_NAMES, size=sizes())
def test_chunks_are_non_blank_bounded_numbered_and_never_span_two_runs(blocks, strategy, size):
    chunk_size, chunk_overlap = size
    settings = {"strategy": strategy, "chunk_size": chunk_size, "chunk_overlap": chunk_overlap}

    drafts = chunk_blocks(blocks, **settings)

    assert [draft.index for draft in drafts] == list(range(len(drafts)))
    for draft in drafts:
        assert draft.content.strip()
        assert len(draft.content) <= chunk_size
    run_by_run = [
        (draft.content, draft.section, draft.page) for run in runs(blocks) for draft in chunk_blocks(run, **settings)
    ]
    assert [(draft.content, draft.section, draft.page) for draft in drafts] == run_by_run


@PROPERTY_SETTINGS
@given(blocks=BLOCKS, strategy=STRATEGY_NAMES, size=sizes())
def test_a_run_keeps_its_words_and_its_chunk_count_stays_proportional(blocks, strategy, size):
    chunk_size, chunk_overlap = size

    for run in runs(blocks):
        chunks = [
            draft.content
            for draft in chunk_blocks(run, strategy=strategy, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
        ]
        run_text = "\n\n".join(block.text.strip() for block in run)
        assert chunks
        for content in chunks:
            if is_character(strategy):
                assert content in run_text
            else:
                assert all(word in run_text for word in content.split())
        for word in run_text.split():
            # A word longer than a chunk is cut, and character windows cut words at any edge.
            if len(word) <= chunk_size and not is_character(strategy):
                assert any(word in content for content in chunks)
        # Every chunk brings text the one before did not have: character windows advance by size - overlap,
        # the other strategies by at least one character.
        step = chunk_size - chunk_overlap if is_character(strategy) else 1
        assert len(chunks) <= len(run_text) // step + 1

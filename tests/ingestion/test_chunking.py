from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

import pytest

from ingestion.chunking import ChunkDraft, chunk_blocks, embedded_text, normalise_for_hash, text_hash
from stores.choices import ChunkingStrategy, UnknownStrategy

STRATEGIES = ChunkingStrategy.values


@dataclass(frozen=True)
class Block:
    text: str
    section: str = ""
    page: int | None = None


def contents(blocks: list[Block], **settings) -> list[str]:
    return [draft.content for draft in chunk_blocks(blocks, **settings)]


# --- section strategy -------------------------------------------------------------------------


def test_section_packs_whole_blocks_separated_by_a_blank_line():
    blocks = [Block("The cat sat."), Block("A dog ran far away."), Block("Birds sing loudly at dawn.")]

    assert chunk_blocks(blocks, strategy="section", chunk_size=40, chunk_overlap=0) == [
        ChunkDraft(index=0, content="The cat sat.\n\nA dog ran far away.", section="", page=None),
        ChunkDraft(index=1, content="Birds sing loudly at dawn.", section="", page=None),
    ]


def test_section_overlap_repeats_the_previous_tail_without_cutting_a_word():
    blocks = [Block("The cat sat."), Block("A dog ran far away."), Block("Birds sing loudly at dawn.")]

    # The last 12 characters are "an far away."; the cut inside "ran" moves to the next word.
    assert contents(blocks, strategy="section", chunk_size=40, chunk_overlap=12) == [
        "The cat sat.\n\nA dog ran far away.",
        "far away.\n\nBirds sing loudly at dawn.",
    ]


def test_section_overlap_shrinks_so_the_next_chunk_still_fits():
    blocks = [Block("The cat sat on the mat."), Block("Birds sing loudly at dawn!")]

    # 20 characters of overlap ("sat on the mat.") would make the chunk 43 characters long.
    assert contents(blocks, strategy="section", chunk_size=40, chunk_overlap=20) == [
        "The cat sat on the mat.",
        "on the mat.\n\nBirds sing loudly at dawn!",
    ]


def test_an_oversize_block_splits_on_sentences_then_on_words():
    long_sentence = "An extraordinarily long sentence with many words in it"
    blocks = [
        Block(f"First sentence here. Second one is a bit longer! Third? {long_sentence}"),
        Block("tiny"),
    ]

    assert contents(blocks, strategy="section", chunk_size=30, chunk_overlap=0) == [
        "First sentence here.",
        "Second one is a bit longer!",
        "Third? An extraordinarily long",
        "sentence with many words in it",
        "tiny",
    ]


def test_overlap_prefers_whole_sentences():
    blocks = [Block("First part here. Short one. Tail bit."), Block("Next block with more words.")]

    # A word-boundary suffix of 15 characters would be "one. Tail bit.": half a sentence.
    assert contents(blocks, strategy="section", chunk_size=45, chunk_overlap=15) == [
        "First part here. Short one. Tail bit.",
        "Tail bit.\n\nNext block with more words.",
    ]


def test_overlap_applies_between_pieces_of_a_split_block():
    blocks = [Block("Alpha beta gamma. Delta epsilon zeta. Eta theta iota.")]

    assert contents(blocks, strategy="section", chunk_size=32, chunk_overlap=10) == [
        "Alpha beta gamma.",
        "gamma. Delta epsilon zeta.",
        "zeta. Eta theta iota.",
    ]


def test_only_a_word_longer_than_the_chunk_is_hard_cut():
    blocks = [Block("see https://example.com/a/very/long/path/indeed now")]

    # No overlap is possible inside the cut word: any suffix of it would split a word.
    assert contents(blocks, strategy="section", chunk_size=12, chunk_overlap=4) == [
        "see",
        "https://exam",
        "ple.com/a/ve",
        "ry/long/path",
        "/indeed now",
    ]


def test_a_chunk_never_spans_two_sections_or_two_pages_and_overlap_stays_inside_a_run():
    blocks = [
        Block("Intro text here.", "Install", 1),
        Block("More intro.", "Install", 1),
        Block("   \n", "Elsewhere", 9),
        Block("Page two.", "Install", 2),
        Block("Docker bits.", "Install > Docker", 2),
        Block("Back.", "Install", 2),
    ]

    assert chunk_blocks(blocks, strategy="section", chunk_size=200, chunk_overlap=50) == [
        ChunkDraft(index=0, content="Intro text here.\n\nMore intro.", section="Install", page=1),
        ChunkDraft(index=1, content="Page two.", section="Install", page=2),
        ChunkDraft(index=2, content="Docker bits.", section="Install > Docker", page=2),
        ChunkDraft(index=3, content="Back.", section="Install", page=2),
    ]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_blank_blocks_produce_no_chunks(strategy):
    assert chunk_blocks([], strategy=strategy, chunk_size=200, chunk_overlap=0) == []
    blank = [Block(""), Block(" \n\t ")]
    assert chunk_blocks(blank, strategy=strategy, chunk_size=200, chunk_overlap=0) == []


def test_block_text_is_trimmed():
    blocks = [Block("  padded  "), Block("\nnext\n")]

    assert contents(blocks, strategy="section", chunk_size=200, chunk_overlap=0) == ["padded\n\nnext"]


# --- word strategy ----------------------------------------------------------------------------


def test_word_windows_repeat_whole_words_within_the_overlap():
    blocks = [Block("one two three four five"), Block("six   seven\neight nine ten")]

    assert contents(blocks, strategy="word", chunk_size=20, chunk_overlap=9) == [
        "one two three four",
        "four five six seven",
        "six seven eight nine",
        "nine ten",
    ]


def test_word_windows_without_overlap_join_words_with_single_spaces():
    blocks = [Block("one two three four five"), Block("six   seven\neight nine ten")]

    assert contents(blocks, strategy="words", chunk_size=20, chunk_overlap=0) == [
        "one two three four",
        "five six seven eight",
        "nine ten",
    ]


# --- semantic strategy ------------------------------------------------------------------------


def test_semantic_packs_whole_sentences_across_paragraphs_without_overlap():
    blocks = [
        Block("Short one. Another short one! A third?"),
        Block("New paragraph here.\n\nSplit paragraph."),
    ]

    assert contents(blocks, strategy="semantic", chunk_size=30, chunk_overlap=10) == [
        "Short one. Another short one!",
        "A third?\n\nNew paragraph here.",
        "Split paragraph.",
    ]


def test_semantic_splits_a_sentence_longer_than_the_chunk_on_words():
    blocks = [Block("Tiny. This sentence is far too long to fit.")]

    assert contents(blocks, strategy="sentence", chunk_size=20, chunk_overlap=0) == [
        "Tiny. This sentence",
        "is far too long to",
        "fit.",
    ]


# --- character strategy -----------------------------------------------------------------------


def test_character_windows_step_by_size_minus_overlap_over_the_joined_run():
    blocks = [Block("abcdefghij"), Block("klmnop")]

    assert contents(blocks, strategy="character", chunk_size=8, chunk_overlap=3) == [
        "abcdefgh",
        "fghij\n\nk",
        "\n\nklmnop",
    ]


def test_character_drops_a_last_window_contained_in_the_previous_one():
    assert contents([Block("abcdefghijkl")], strategy="chars", chunk_size=8, chunk_overlap=4) == [
        "abcdefgh",
        "efghijkl",
    ]


def test_character_windows_restart_at_each_run():
    blocks = [Block("abcdef", page=1), Block("ghijkl", page=2)]

    drafts = chunk_blocks(blocks, strategy="char", chunk_size=4, chunk_overlap=1)

    assert [(draft.content, draft.page) for draft in drafts] == [
        ("abcd", 1),
        ("def", 1),
        ("ghij", 2),
        ("jkl", 2),
    ]


# --- strategy names and settings --------------------------------------------------------------


def test_chunk_blocks_rejects_an_unknown_strategy():
    with pytest.raises(UnknownStrategy):
        chunk_blocks([Block("text")], strategy="tokens", chunk_size=200, chunk_overlap=0)


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (200, 200), (200, 300), (200, -1)])
def test_impossible_sizes_are_rejected(size, overlap):
    with pytest.raises(ValueError):
        chunk_blocks([Block("text")], strategy="section", chunk_size=size, chunk_overlap=overlap)


# --- invariants over random documents ---------------------------------------------------------

VOCABULARY = ["a", "tiny", "word", "words.", "end!", "why?", "e.g.", "x" * 45, "y" * 130, "\n", "\n\n", "  "]


def random_document(rng: random.Random) -> list[Block]:
    blocks = []
    for _ in range(rng.randint(0, 12)):
        text = " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(0, 30)))
        blocks.append(Block(text, rng.choice(["", "Intro", "Install > Docker"]), rng.choice([None, 1, 2])))
    return blocks


def expected_runs(blocks: list[Block]) -> list[tuple[str, int | None, str]]:
    runs: list[tuple[str, int | None, list[str]]] = []
    for block in blocks:
        if not block.text.strip():
            continue
        if runs and runs[-1][:2] == (block.section, block.page):
            runs[-1][2].append(block.text.strip())
        else:
            runs.append((block.section, block.page, [block.text.strip()]))
    return [(section, page, "\n\n".join(texts)) for section, page, texts in runs]


def non_whitespace(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_invariants_hold_on_random_documents(strategy):
    rng = random.Random(f"chunking-{strategy}")
    for _ in range(400):
        blocks = random_document(rng)
        size = rng.randint(1, 120)
        overlap = rng.choice([0, rng.randrange(size)])
        drafts = chunk_blocks(blocks, strategy=strategy, chunk_size=size, chunk_overlap=overlap)
        runs = expected_runs(blocks)
        context = f"{blocks=} {size=} {overlap=}"

        assert [draft.index for draft in drafts] == list(range(len(drafts))), context
        for draft in drafts:
            assert draft.content.strip(), context
            assert len(draft.content) <= size, context

        chunks_by_run = []
        for draft in drafts:
            if chunks_by_run and chunks_by_run[-1][0] == (draft.section, draft.page):
                chunks_by_run[-1][1].append(draft.content)
            else:
                chunks_by_run.append(((draft.section, draft.page), [draft.content]))
        assert [key for key, _ in chunks_by_run] == [(section, page) for section, page, _ in runs], context

        for (_, run_chunks), (_, _, run_text) in zip(chunks_by_run, runs, strict=True):
            source = " ".join(run_text.split()) if strategy == "word" else run_text
            for content in run_chunks:
                assert content in source, context
            if overlap == 0 or strategy == "semantic":
                covered = "".join(non_whitespace(content) for content in run_chunks)
                assert covered == non_whitespace(run_text), context


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_two_megabyte_document_is_chunked(strategy):
    rng = random.Random(2)
    words = ["retrieval", "augmented", "generation.", "chunk", "vector", "index?", "a", "the", "store!"]
    blocks = [
        Block(" ".join(rng.choice(words) for _ in range(rng.randint(1, 600))), f"Part {number // 40}", None)
        for number in range(4000)
    ]
    blocks.append(Block(" ".join(words) * 20_000, "Appendix", None))
    assert sum(len(block.text) for block in blocks) > 2_000_000

    drafts = chunk_blocks(blocks, strategy=strategy, chunk_size=1000, chunk_overlap=200)

    assert drafts[-1].index == len(drafts) - 1
    assert max(len(draft.content) for draft in drafts) <= 1000
    assert drafts[-1].section == "Appendix"


# --- embedded text ----------------------------------------------------------------------------


def test_contextual_text_names_the_file_and_section():
    assert (
        embedded_text(filename="guide.md", section="Install > Docker", content="Run it.", contextual=True)
        == "guide.md · Install > Docker\nRun it."
    )


def test_contextual_text_without_a_section_names_only_the_file():
    text = embedded_text(filename="guide.md", section="", content="Run it.", contextual=True)

    assert text == "guide.md\nRun it."


def test_contextual_header_is_kept_on_one_line():
    text = embedded_text(
        filename="my\r\nguide.md", section="Install\n>\x00 Docker", content="Run\nit.", contextual=True
    )

    assert text == "my guide.md · Install > Docker\nRun\nit."


def test_without_contextual_chunks_the_content_is_embedded_as_is():
    text = embedded_text(filename="guide.md", section="Install", content=" Run\nit. ", contextual=False)

    assert text == " Run\nit. "


# --- hashing and deduplication ----------------------------------------------------------------


def test_hash_normalisation_trims_and_collapses_whitespace():
    assert normalise_for_hash(" hello world \n\t again ") == "hello world again"


def test_text_hash_is_the_sha256_of_the_normalised_text():
    expected = hashlib.sha256(b"hello world again").hexdigest()

    assert text_hash(" hello world \n\t again ") == expected
    assert text_hash("hello world again") == expected
    assert text_hash("hello world  again!") != expected

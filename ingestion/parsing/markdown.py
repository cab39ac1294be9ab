"""Markdown, read line by line: ATX and setext headings form the section path; paragraphs, list items
and fenced code blocks become blocks.

A linear block reader rather than a Markdown-to-HTML renderer: renderers are superlinear on some
inputs (a single 1 MB paragraph takes Python-Markdown many seconds), and blocks need no HTML.
Inline markup (emphasis, links, code spans) is kept as written: it is text a language model reads as is.
"""

from __future__ import annotations

import re

from .sections import Headings, section_path, with_heading
from .text import decode_text, normalise_newlines
from .types import Block, ParsedDocument

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_ATX_HEADING = re.compile(r" {0,3}(#{1,6})(?=[ \t]|$)")
_SETEXT_UNDERLINE = re.compile(r" {0,3}(=+|-+)[ \t]*")
_LIST_ITEM = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+(.*)")
# YAML front matter (static site generators) is metadata, not text, and its closing "---" would read as a heading.
_FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)


def parse_markdown(data: bytes) -> ParsedDocument:
    text = _FRONT_MATTER.sub("", normalise_newlines(decode_text(data)), count=1)
    reader = _MarkdownReader()
    for line in text.split("\n"):
        reader.feed(line)
    return reader.finish()


class _MarkdownReader:
    def __init__(self) -> None:
        self._headings: Headings = ()
        self._first_heading = ""
        self._blocks: list[Block] = []
        self._lines: list[str] = []
        self._in_list_item = False
        self._fence: str | None = None

    def feed(self, line: str) -> None:
        if self._fence is not None:
            self._feed_code(line)
        elif fence := _FENCE.match(line):
            self._flush()
            self._fence = fence.group(1)
        elif heading := _ATX_HEADING.match(line):
            self._flush()
            self._enter_heading(len(heading.group(1)), _without_closing_hashes(line[heading.end() :]))
        elif (underline := _SETEXT_UNDERLINE.fullmatch(line)) and self._lines and not self._in_list_item:
            title = " ".join(part.strip() for part in self._lines)
            self._lines = []
            self._enter_heading(1 if underline.group(1)[0] == "=" else 2, title)
        elif not line.strip() or _SETEXT_UNDERLINE.fullmatch(line):
            # A blank line ends a paragraph; so does a thematic break ("---") that underlines nothing.
            self._flush()
        elif item := _LIST_ITEM.fullmatch(line):
            self._flush()
            self._lines = [item.group(1)]
            self._in_list_item = True
        else:
            self._lines.append(line)

    def finish(self) -> ParsedDocument:
        # An unclosed fence runs to the end of the document.
        self._flush()
        return ParsedDocument(blocks=self._blocks, title=self._first_heading)

    def _feed_code(self, line: str) -> None:
        closing = _FENCE.match(line)
        # A fence closes only with a bare run of its own character, at least as long as the opening one.
        if closing and closing.group(1).startswith(self._fence) and not line[closing.end() :].strip():
            self._flush()
        else:
            self._lines.append(line)

    def _enter_heading(self, level: int, title: str) -> None:
        title = title.strip()
        if title:
            self._first_heading = self._first_heading or title
            self._headings = with_heading(self._headings, level, title)

    def _flush(self) -> None:
        if self._fence is None:
            self._emit("\n".join(line.strip() for line in self._lines).strip())
        else:
            # Code keeps its indentation; only the blank lines around it go.
            self._emit("\n".join(self._lines).strip("\n").rstrip())
        self._lines = []
        self._in_list_item = False
        self._fence = None

    def _emit(self, text: str) -> None:
        if text:
            self._blocks.append(Block(text=text, section=section_path(self._headings)))


def _without_closing_hashes(title: str) -> str:
    """A closing run of hashes goes ("Install ##" is "Install"); a hash ending a word stays ("C#")."""
    title = title.strip()
    unclosed = title.rstrip("#")
    return unclosed.strip() if not unclosed or unclosed[-1] in " \t" else title

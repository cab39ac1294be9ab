"""Markdown: rendered to HTML by Python-Markdown, then read like HTML with every heading level in the section path."""

from __future__ import annotations

import markdown as python_markdown

from .html import document_from_html
from .text import decode_text
from .types import ParsedDocument

# Markdown has no <title>: its headings are the only structure, so all six levels count.
MARKDOWN_SECTION_DEPTH = 6
_EXTENSIONS = ("fenced_code", "tables")


def parse_markdown(data: bytes) -> ParsedDocument:
    markup = python_markdown.markdown(decode_text(data), extensions=list(_EXTENSIONS), output_format="html")
    return document_from_html(markup, section_depth=MARKDOWN_SECTION_DEPTH)

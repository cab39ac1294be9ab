"""Built-in model prices, upserted at every `migrate`.

A user row for the same (provider_type, model) key overrides the built-in one and is never
touched by an upgrade. Built-in rows no longer shipped are retired.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import transaction

# USD per million tokens: (provider_type, model, input, output, cached input, cache write, per
# search unit). A cache write is what Anthropic bills for its default five-minute cache, 1.25
# times the input rate; OpenAI and Gemini bill none for their implicit caches and report none.
BUILTIN_PRICES: list[tuple[str, str, str, str, str | None, str | None, str | None]] = [
    ("openai", "text-embedding-3-small", "0.02", "0", None, None, None),
    ("openai", "text-embedding-3-large", "0.13", "0", None, None, None),
    ("openai", "text-embedding-ada-002", "0.10", "0", None, None, None),
    ("openai", "gpt-4o", "2.50", "10.00", "1.25", None, None),
    ("openai", "gpt-4o-mini", "0.15", "0.60", "0.075", None, None),
    ("openai", "gpt-4.1", "2.00", "8.00", "0.50", None, None),
    ("openai", "gpt-4.1-mini", "0.40", "1.60", "0.10", None, None),
    ("openai", "gpt-4.1-nano", "0.10", "0.40", "0.025", None, None),
    ("openai", "gpt-5", "1.25", "10.00", "0.125", None, None),
    ("openai", "gpt-5-mini", "0.25", "2.00", "0.025", None, None),
    ("openai", "gpt-5-nano", "0.05", "0.40", "0.005", None, None),
    ("anthropic", "claude-opus-4-5*", "5.00", "25.00", "0.50", "6.25", None),
    ("anthropic", "claude-opus-4*", "15.00", "75.00", "1.50", "18.75", None),
    ("anthropic", "claude-sonnet-4*", "3.00", "15.00", "0.30", "3.75", None),
    ("anthropic", "claude-haiku-4-5*", "1.00", "5.00", "0.10", "1.25", None),
    ("anthropic", "claude-3-5-haiku*", "0.80", "4.00", "0.08", "1.00", None),
    ("gemini", "gemini-2.5-pro*", "1.25", "10.00", "0.31", None, None),
    ("gemini", "gemini-2.5-flash*", "0.30", "2.50", "0.075", None, None),
    ("gemini", "gemini-2.5-flash-lite*", "0.10", "0.40", "0.025", None, None),
    ("gemini", "gemini-embedding-001", "0.15", "0", None, None, None),
    ("gemini", "text-embedding-004", "0", "0", None, None, None),
    # The services the connection form offers as custom_openai presets (models.OPENAI_COMPATIBLE_
    # PRESETS), at their published list prices: DeepSeek's cache hits are its cached rate.
    ("custom_openai", "deepseek-chat", "0.28", "0.42", "0.028", None, None),
    ("custom_openai", "deepseek-reasoner", "0.28", "0.42", "0.028", None, None),
    ("custom_openai", "mistral-small-latest", "0.10", "0.30", None, None, None),
    ("custom_openai", "mistral-medium-latest", "0.40", "2.00", None, None, None),
    ("custom_openai", "codestral-latest", "0.30", "0.90", None, None, None),
    ("custom_openai", "mistral-embed", "0.10", "0", None, None, None),
    ("custom_openai", "grok-4*", "3.00", "15.00", "0.75", None, None),
    ("custom_openai", "grok-4-fast*", "0.20", "0.50", "0.05", None, None),
    ("custom_openai", "grok-3-mini*", "0.30", "0.50", "0.075", None, None),
    ("custom_openai", "grok-code-fast-1", "0.20", "1.50", "0.02", None, None),
    ("custom_openai", "llama-3.3-70b-versatile", "0.59", "0.79", None, None, None),
    ("custom_openai", "llama-3.1-8b-instant", "0.05", "0.08", None, None, None),
    ("ollama", "*", "0", "0", None, None, None),
    ("local", "*", "0", "0", None, None, None),
    ("cohere_rerank", "rerank-v3.5", "0", "0", None, None, "0.002"),
    ("cohere_rerank", "rerank-english-v3.0", "0", "0", None, None, "0.002"),
    ("cohere_rerank", "rerank-multilingual-v3.0", "0", "0", None, None, "0.002"),
    ("voyage_rerank", "rerank-2.5", "0.05", "0", None, None, None),
    ("voyage_rerank", "rerank-2.5-lite", "0.02", "0", None, None, None),
    ("voyage_rerank", "rerank-2", "0.05", "0", None, None, None),
    ("voyage_rerank", "rerank-2-lite", "0.02", "0", None, None, None),
]


def _decimal(value: str | None) -> Decimal | None:
    return None if value is None else Decimal(value)


def builtin_values(provider_type: str, model: str) -> dict[str, Any] | None:
    for row in BUILTIN_PRICES:
        if row[0] == provider_type and row[1] == model:
            return {
                "input_per_mtok": Decimal(row[2]),
                "output_per_mtok": Decimal(row[3]),
                "cached_input_per_mtok": _decimal(row[4]),
                "cache_write_per_mtok": _decimal(row[5]),
                "per_search_unit": _decimal(row[6]),
            }
    return None


@transaction.atomic
def upsert_builtin_prices(**_: Any) -> None:
    from gateway.connections.models import ModelPrice, PriceSource

    shipped = set()
    for provider_type, model, *_rest in BUILTIN_PRICES:
        shipped.add((provider_type, model))
        existing = ModelPrice.objects.filter(provider_type=provider_type, model=model).first()
        if existing is not None and existing.source == PriceSource.USER:
            continue
        ModelPrice.objects.update_or_create(
            provider_type=provider_type,
            model=model,
            defaults={**builtin_values(provider_type, model), "source": PriceSource.BUILTIN},
        )
    for row in ModelPrice.objects.filter(source=PriceSource.BUILTIN):
        if (row.provider_type, row.model) not in shipped:
            row.delete()

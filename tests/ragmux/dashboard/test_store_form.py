"""The settings form's pure parts: each help text ends with the setting's default, read from the
model rather than written a second time."""

from ragmux.dashboard.store_form import GROUPS, shown_default


def test_every_setting_shows_the_models_default():
    shown = {setting.name: shown_default(setting.name) for _, settings in GROUPS for setting in settings}
    assert shown == {
        "embedding_connection_id": None,
        "contextual_chunks": "on",
        "chunking_strategy": "section",
        "chunk_size": "1000",
        "chunk_overlap": "200",
        "ocr": "on",
        "ocr_language": "eng",
        "search_mode": "hybrid",
        "search_backend": "bm25",
        "index_config": "english",
        "fts_config": "simple",
        "top_k": "5",
        "max_distance": "0",
        "fusion": "scores",
        "fusion_vector": "1",
        "fusion_lexical": "1",
        "typo_tolerance": "off",
        "rerank": "off",
        "rerank_backend": "llm",
        "rerank_connection_id": None,
        "rerank_route_id": None,
        "rerank_candidates": "15",
        "max_documents": "0",
        "max_bytes": "0",
    }
    assert not any("Default:" in setting.help for _, settings in GROUPS for setting in settings)


def test_the_index_language_default_is_the_deployments(settings):
    settings.DEFAULT_INDEX_CONFIG = "german"
    assert shown_default("index_config") == "german"

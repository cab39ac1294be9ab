from gateway.clients.injection import inject, message_texts, query_text


def test_the_query_is_the_last_user_message_text():
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "image_url", "image_url": {}}]},
    ]
    assert query_text(messages) == "second"
    assert query_text([{"role": "user", "content": [{"text": "untyped part"}]}]) == "untyped part"
    assert query_text([{"role": "system", "content": "only system"}]) == ""


def test_context_then_system_prompt_then_client_text_in_one_message():
    messages = [{"role": "user", "content": "q"}, {"role": "system", "content": "client"}]
    injected = inject(messages, context="CTX", system_prompt="PROMPT")
    assert injected == [{"role": "user", "content": "q"}, {"role": "system", "content": "CTX\n\nPROMPT\n\nclient"}]
    assert messages[1]["content"] == "client"  # the client's list is not modified
    assert inject([{"role": "user", "content": "q"}], context="", system_prompt="") == [
        {"role": "user", "content": "q"}
    ]
    assert inject([{"role": "user", "content": "q"}], context="CTX", system_prompt="")[0] == {
        "role": "system",
        "content": "CTX",
    }


def test_parts_keep_their_order_and_lose_cache_control_only_with_context():
    parts = [{"type": "text", "text": "client", "cache_control": {"type": "ephemeral"}}]
    with_prompt_only = inject([{"role": "system", "content": parts}], context="", system_prompt="P")
    assert with_prompt_only[0]["content"] == [{"type": "text", "text": "P"}, parts[0]]
    with_context = inject([{"role": "system", "content": parts}], context="C", system_prompt="P")
    assert with_context[0]["content"] == [
        {"type": "text", "text": "C"},
        {"type": "text", "text": "P"},
        {"type": "text", "text": "client"},
    ]
    assert "cache_control" in parts[0]


def test_message_texts_for_estimates():
    assert message_texts([{"role": "user", "content": "ab"}, {"role": "user", "content": [{"text": "cd"}]}]) == [
        "ab",
        "cd",
    ]

"""The dashboard's one form adapter, without a database: what it reads from a post, where each
message lands beside the inputs, and that a service's refusal is an answer, not a failure."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from rest_framework import serializers

from ragmux.core.errors import Conflict, InvalidInput, NotFound
from ragmux.dashboard.forms import NON_FIELD, Form, attempt
from stores.serializers import FusionWeights

# How the dashboard says the API's refusal of two zero weights (which names `fusion_weights`).
WORDS = "Vector weight and Lexical weight cannot both be 0: give one of them a weight."
WEIGHT_INPUTS = {"fusion_weights": {"vector": "fusion_vector", "lexical": "fusion_lexical"}}


class WeightsInput(serializers.Serializer):
    name = serializers.CharField(max_length=5)
    fusion_weights = FusionWeights()


def posted(data: dict):
    return RequestFactory().post("/", data)


def test_a_post_is_read_by_kind_of_input_and_a_query_is_not():
    form = Form(
        posted({"name": "kb", "tags": ["a", "b"], "on": "on"}),
        names=("name", "gone"),
        checkboxes=("on", "off"),
        lists=("tags",),
    )
    assert form.values == {"name": "kb", "gone": "", "on": True, "off": False, "tags": ["a", "b"]}
    shown = Form(RequestFactory().get("/", {"name": "kb"}), names=("name",), initial={"name": "saved"})
    assert shown.values == {"name": "saved"}


@pytest.mark.parametrize(
    ("weights", "errors"),
    [
        ({"vector": "x", "lexical": "1"}, {"fusion_vector": ["A valid number is required."]}),
        ({"vector": 0, "lexical": 0}, {"fusion_vector": [WORDS]}),
        ({"vector": 1, "lexical": 101}, {"fusion_lexical": ["Ensure this value is less than or equal to 100."]}),
    ],
)
def test_the_errors_of_a_field_made_of_several_inputs_stand_beside_each_input(weights, errors):
    form = Form(names=("name", "fusion_vector", "fusion_lexical"), nested=WEIGHT_INPUTS)
    assert form.validated(WeightsInput, {"name": "kb", "fusion_weights": weights}) is None
    assert form.errors == errors


def test_without_parts_a_nested_fields_messages_stand_beside_the_field():
    form = Form(names=("name",))
    assert form.validated(WeightsInput, {"name": "toolong", "fusion_weights": {"vector": 0, "lexical": 0}}) is None
    assert form.errors == {
        "name": ["Ensure this field has no more than 5 characters."],
        "fusion_weights": [WORDS],
    }
    assert form.problems == f"name: Ensure this field has no more than 5 characters.; fusion_weights: {WORDS}"


@pytest.mark.parametrize(
    ("names", "refusal", "field", "errors"),
    [
        (("name",), Conflict("taken", code="duplicate_name"), None, {"name": ["taken"]}),
        (("username",), Conflict("taken", code="duplicate_name"), "username", {"username": ["taken"]}),
        (("username",), Conflict("taken", code="duplicate_name"), None, {NON_FIELD: ["taken"]}),
        (("a", "b"), InvalidInput("bad b", field="b"), "a", {"b": ["bad b"]}),
        (("name",), NotFound.of("connection"), None, {NON_FIELD: ["connection not found"]}),
    ],
)
def test_a_refusal_stands_beside_the_input_it_concerns(names, refusal, field, errors):
    form = Form(names=names)

    def refuse():
        raise refusal

    assert form.run(refuse, field=field) is False
    assert (form.errors, form.refusal, form.problems) == (errors, refusal, refusal.message)


def test_a_service_is_called_with_the_validated_data_only_when_it_is_valid():
    calls = []

    def save(**data):
        calls.append(data)
        return "saved"

    form = Form(names=("name",))
    weights = {"vector": 1, "lexical": 2}
    assert form.submit(WeightsInput, {"name": "toolong", "fusion_weights": weights}, save) is False
    assert calls == [] and list(form.errors) == ["name"] and form.refusal is None
    assert form.submit(WeightsInput, {"name": "kb", "fusion_weights": weights}, save) is True
    assert form.result == "saved" and form.errors == {}
    assert calls == [{"name": "kb", "fusion_weights": {"vector": 1.0, "lexical": 2.0}}]


def test_only_a_services_refusal_is_caught():
    assert attempt(lambda: 3).result == 3

    def fail():
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        attempt(fail)

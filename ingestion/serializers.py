from __future__ import annotations

from rest_framework import serializers

from ragmux.core.serializers import StrictInput
from stores.models import DocumentStatus
from stores.serializers import AttributesField


class TextDocumentInput(StrictInput):
    title = serializers.CharField(max_length=500)
    content = serializers.CharField(trim_whitespace=False, allow_blank=True)
    source = serializers.CharField(max_length=2048, required=False, allow_blank=True, default="")
    tags = serializers.ListField(
        child=serializers.CharField(max_length=128), max_length=64, required=False, default=list
    )
    attributes = AttributesField(required=False, default=dict)


class UploadFormInput(StrictInput):
    """A multipart upload's fields besides its files: the attributes every file of it gets, as
    JSON text."""

    attributes = AttributesField(binary=True, required=False, default=dict)


class ReprocessInput(StrictInput):
    """Which documents of the store go back to the queue: all, or those in one status."""

    status = serializers.ChoiceField(choices=DocumentStatus.choices, required=False)

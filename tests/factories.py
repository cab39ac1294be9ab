from __future__ import annotations

import hashlib

import factory
from django.contrib.auth.models import Group, User

from gateway.connections.models import ModelConnection
from stores.models import Document, RagStore

PASSWORD = "correct horse battery"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def role(user, create, extracted, **kwargs):
        if extracted:
            user.groups.add(Group.objects.get_or_create(name=extracted)[0])
        user.save()


class ConnectionFactory(factory.django.DjangoModelFactory):
    """A connection row written directly; API tests create theirs through the API instead."""

    class Meta:
        model = ModelConnection

    name = factory.Sequence(lambda n: f"connection-{n}")
    provider_type = "openai"
    base_url = ""
    model_name = "text-embedding-3-small"


class StoreFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RagStore

    name = factory.Sequence(lambda n: f"store-{n}")
    embedding_connection = factory.SubFactory(ConnectionFactory)


class DocumentFactory(factory.django.DjangoModelFactory):
    """A stored document row; admission and ingestion are not run."""

    class Meta:
        model = Document

    store = factory.SubFactory(StoreFactory)
    filename = factory.Sequence(lambda n: f"document-{n}.txt")
    mime = "text/plain"
    original = factory.LazyAttribute(lambda d: f"contents of {d.filename}".encode())
    size_bytes = factory.LazyAttribute(lambda d: len(d.original))
    content_sha256 = factory.LazyAttribute(lambda d: hashlib.sha256(d.original).hexdigest())

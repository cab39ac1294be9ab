from __future__ import annotations

import hashlib

import factory
from django.contrib.auth.models import Group, User

from gateway.clients.models import GatewayKey, Project, RequestLog
from gateway.connections.models import ModelConnection, Route, RouteTarget
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


class RouteFactory(factory.django.DjangoModelFactory):
    """A route row written directly, without targets; API tests create theirs through the API."""

    class Meta:
        model = Route

    name = factory.Sequence(lambda n: f"route-{n}")
    kind = "chat"
    strategy = "ordered"


class RouteTargetFactory(factory.django.DjangoModelFactory):
    """A route's target; ``position`` follows the order targets are made in."""

    class Meta:
        model = RouteTarget

    route = factory.SubFactory(RouteFactory)
    position = factory.LazyAttribute(lambda t: t.route.targets.count())
    connection = factory.SubFactory(ConnectionFactory, model_name="gpt-4o-mini")
    model_name = ""
    weight = 1
    first_byte_timeout = None


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


class ProjectFactory(factory.django.DjangoModelFactory):
    """A project row written directly: a chat connection (an OpenAI chat model) and no store."""

    class Meta:
        model = Project

    name = factory.Sequence(lambda n: f"project-{n}")
    chat_connection = factory.SubFactory(ConnectionFactory, model_name="gpt-4o-mini")
    embedding_connection = None
    store = None


class GatewayKeyFactory(factory.django.DjangoModelFactory):
    """A key issued by the service that issues keys (how a secret is hashed is its business);
    the plaintext secret, which only its issuer ever sees, is the row's ``secret``."""

    class Meta:
        model = GatewayKey

    project = factory.SubFactory(ProjectFactory)
    name = factory.Sequence(lambda n: f"key-{n}")
    scopes = None
    expires_at = None

    @classmethod
    def _create(cls, model_class, *, project, name, scopes, expires_at):
        from gateway.clients.services import key_create

        issued = key_create(project=project, name=name, scopes=scopes, expires_at=expires_at)
        issued.api_key.secret = issued.key
        return issued.api_key


class RequestLogFactory(factory.django.DjangoModelFactory):
    """A request log row as the ledger writes one; ``created_at=`` back-dates it (the column
    is stamped on insert)."""

    class Meta:
        model = RequestLog
        skip_postgeneration_save = True

    project = factory.SubFactory(ProjectFactory)
    key = None
    endpoint = "chat"
    status_code = 200

    @factory.post_generation
    def created_at(row, create, extracted, **kwargs):
        if extracted is not None:
            RequestLog.objects.filter(pk=row.pk).update(created_at=extracted)
            row.created_at = extracted

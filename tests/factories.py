from __future__ import annotations

import factory
from django.contrib.auth.models import Group, User

from gateway.models import ModelConnection
from stores.models import RagStore

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

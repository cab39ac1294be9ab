import pytest
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from gateway.clients.models import Project
from tests.factories import ConnectionFactory, ProjectFactory, RouteFactory, RouteTargetFactory


def test_a_target_asks_for_its_own_model_or_else_its_connections(db):
    connection = ConnectionFactory(model_name="gpt-4o-mini")
    inheriting = RouteTargetFactory(connection=connection)
    overriding = RouteTargetFactory(route=inheriting.route, connection=connection, model_name="gpt-4o")
    assert [t.position for t in inheriting.route.targets.all()] == [0, 1]
    assert inheriting.effective_model_name == "gpt-4o-mini"
    assert overriding.effective_model_name == "gpt-4o"


@pytest.mark.parametrize(
    "fields",
    [{"weight": 0}, {"first_byte_timeout": 0.0}, {"first_byte_timeout": -1.0}],
    ids=["zero weight", "zero timeout", "negative timeout"],
)
def test_the_database_refuses_a_target_that_could_never_be_chosen(db, fields):
    with pytest.raises(IntegrityError), transaction.atomic():
        RouteTargetFactory(**fields)


def test_two_targets_cannot_share_a_position(db):
    first = RouteTargetFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        RouteTargetFactory(route=first.route, position=first.position)


def test_a_project_chats_through_exactly_one_connection_or_route(db):
    route = RouteFactory()
    by_route = ProjectFactory(chat_connection=None, chat_route=route)
    assert by_route.chat_route == route
    with pytest.raises(IntegrityError), transaction.atomic():
        ProjectFactory(chat_connection=None, chat_route=None)
    with pytest.raises(IntegrityError), transaction.atomic():
        ProjectFactory(chat_route=route)
    assert Project.objects.count() == 1


def test_a_route_in_use_cannot_be_deleted(db):
    route = RouteFactory()
    ProjectFactory(chat_connection=None, chat_route=route)
    with pytest.raises(ProtectedError):
        route.delete()

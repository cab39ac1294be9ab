"""The models and the migrations describe the same schema: a model change without its migration
(or a hand-written migration whose state drifts from the models) fails here."""

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_lacks_a_migration(capsys):
    call_command("makemigrations", "--check", "--dry-run", verbosity=1)
    assert "No changes detected" in capsys.readouterr().out

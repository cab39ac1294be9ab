"""What every app's services share."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from django.db.models import Model

M = TypeVar("M", bound=Model)


def model_update(*, instance: M, fields: Iterable[str], data: Mapping[str, Any], save: bool = True) -> tuple[M, bool]:
    """Sets on ``instance`` each of ``fields`` that ``data`` holds (a field ``data`` leaves out
    keeps its value), then saves it unless ``save`` is False (the caller sets more first);
    returns the instance and whether any value changed. The services' one field-by-field update,
    after the HackSoft styleguide's helper; what a value may be is checked before, by the service."""
    changed = False
    for name in fields:
        if name in data and getattr(instance, name) != data[name]:
            setattr(instance, name, data[name])
            changed = True
    if save:
        instance.save()
    return instance, changed

"""The role check every dashboard page and form goes through."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.views.decorators.http import require_http_methods

from ragmux.core.errors import NotFound
from ragmux.core.roles import has_role


def page(role: str, *, methods: tuple[str, ...] = ("GET", "HEAD")):
    """A dashboard view for ``role`` and up: strangers go to the sign-in page, a lower role gets
    the 403 page (a forged form post included), and a missing object is the 404 page."""

    def decorate(view):
        @login_required
        @require_http_methods(list(methods))
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not has_role(request.user, role):
                raise PermissionDenied(f"This needs the {role} role.")
            try:
                return view(request, *args, **kwargs)
            except NotFound as missing:
                raise Http404(missing.message) from None

        return wrapper

    return decorate


def wants_fragment(request) -> bool:
    """htmx and the upload script ask for a piece of a page rather than a whole one."""
    return request.headers.get("HX-Request") == "true"

"""The role check every dashboard page and form goes through."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from ragmux.core.errors import Forbidden, NotFound, error_response
from ragmux.core.middleware import is_api_path
from ragmux.core.roles import has_role


def page(role: str, *, methods: tuple[str, ...] = ("GET", "HEAD"), shown_on: Callable[..., str] | None = None):
    """A dashboard view for ``role`` and up: strangers go to the sign-in page, a lower role gets
    the 403 page (a forged form post included), and a missing object is the 404 page.

    ``shown_on`` is, for a form's address that answers only its post, the address of the page the
    form is on (called with the view's arguments): a plain visit (a reload of the form's answer,
    a bookmark) goes there rather than getting a bare 405."""
    allowed = [*methods, "GET", "HEAD"] if shown_on else list(methods)

    def decorate(view):
        @login_required
        @require_http_methods(allowed)
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not has_role(request.user, role):
                # Answered here rather than raised: Django logs a raised PermissionDenied with a
                # traceback, and a role refusal is an ordinary answer, not an error.
                return forbidden_page(request, f"This needs the {role} role.")
            try:
                if shown_on is not None and request.method not in methods:
                    return redirect(shown_on(*args, **kwargs))
                return view(request, *args, **kwargs)
            except NotFound as missing:
                raise Http404(missing.message) from None

        return wrapper

    return decorate


def forbidden_page(request, reason: str) -> HttpResponse:
    return render(request, "403.html", {"reason": reason}, status=403)


def forbidden(request, exception=None):
    """Django's 403 handler: the error envelope under the API's paths, the dashboard's page
    elsewhere."""
    if is_api_path(request.path):
        return error_response(Forbidden("insufficient role"))
    return forbidden_page(request, str(exception or ""))


def wants_fragment(request) -> bool:
    """htmx and the upload script ask for a piece of a page rather than a whole one."""
    return request.headers.get("HX-Request") == "true"

"""One-time form tokens. A form whose answer shows a secret once (a new key, a rotated key, a
generated password) is that answer's POST: the browser sends it again on a reload. Each such
form carries a token, and the session remembers the tokens already spent, so a form sent twice
creates nothing the second time and its page says why."""

from __future__ import annotations

import secrets

from django.contrib import messages

FIELD = "once"
# Spent tokens kept per session, oldest forgotten first: far more than one sitting sends.
SPENT_KEPT = 200
_SPENT = "spent_form_tokens"
MISSING = "The form was sent without its one-time token, so nothing was done: send it from its page."


def new_token() -> str:
    """A token for one rendering of a page's forms (every answer to them renders a new one)."""
    return secrets.token_urlsafe(16)


def refused(request, *, again: str) -> int | None:
    """None when the request's token is unspent. Else it says why nothing is to be done in a
    message (``again`` for a token spent before: a reload of the page that answered it; or that
    the form came without one) and returns the status to answer with."""
    token = request.POST.get(FIELD, "")
    if not token:
        messages.error(request, MISSING)
        return 400
    if token in request.session.get(_SPENT, []):
        messages.warning(request, again)
        return 409
    return None


def spend_token(request) -> None:
    """Records the request's token as spent: called once its form did what it asks, so a form
    that was refused can be corrected and sent again from the page that says why."""
    spent = request.session.get(_SPENT, [])
    request.session[_SPENT] = [*spent, request.POST[FIELD]][-SPENT_KEPT:]

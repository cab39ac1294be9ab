"""The dashboard's sign-in and sign-out pages."""

from __future__ import annotations

import math

from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.shortcuts import redirect

from ragmux.core.signin import InvalidCredentials, SignInThrottled, sign_in, sign_out

# Said only to someone who typed the account's right password.
DEACTIVATED_MESSAGE = "This account is deactivated. Ask an admin to reactivate it."


class SignInForm(AuthenticationForm):
    """Django's sign-in form, checking the password through the throttled `sign_in`."""

    def clean(self):
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username and password:
            try:
                self.user_cache = sign_in(request=self.request, username=username, password=password)
            except InvalidCredentials as refused:
                if refused.deactivated:
                    raise ValidationError(DEACTIVATED_MESSAGE, code="inactive") from None
                raise self.get_invalid_login_error() from None
        return self.cleaned_data


class DashboardLoginView(auth_views.LoginView):
    template_name = "dashboard/login.html"
    authentication_form = SignInForm
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        form = self.get_form()
        try:
            valid = form.is_valid()
        except SignInThrottled as throttled:
            context = self.get_context_data(
                form=form, throttled=throttled, retry_minutes=math.ceil(throttled.retry_after / 60)
            )
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(throttled.retry_after)
            return response
        return self.form_valid(form) if valid else self.form_invalid(form)


class DashboardLogoutView(auth_views.LogoutView):
    next_page = "/admin/login/"
    http_method_names = ["get", "post", "options"]

    def get(self, request, *args, **kwargs):
        """A visit (a bookmark, a reload) signs no one out, and is no bare 405 either: it goes to
        the overview, or to the sign-in page for whoever is signed out."""
        return redirect("dashboard:overview")

    def post(self, request, *args, **kwargs):
        sign_out(request=request)  # audited; Django's own sign-out that follows finds no one
        return super().post(request, *args, **kwargs)

"""The user's preferences page (``/preferences/``, from the user menu): the time zone every page
writes absolute times in, overriding the browser's."""

from __future__ import annotations

from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone

from dashboard.models import Preference
from dashboard.pages import browser_time_zone, page, render_page, safe_next, viewer_time_zone

BROWSER = ""


@cache
def zone_names() -> tuple[str, ...]:
    """Every IANA zone this server knows, "UTC" first, then by name."""
    names = sorted(
        name
        for name in available_timezones()
        if "/" in name and not name.startswith(("Etc/", "SystemV/", "posix/", "right/"))
    )
    return ("UTC", *names)


def valid_zone(name: str) -> ZoneInfo | None:
    """The zone named ``name`` if it is one of :func:`zone_names`, else None."""
    if name not in zone_names():
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


class PreferenceForm(forms.Form):
    time_zone = forms.ChoiceField(
        label="Time zone",
        required=False,
        help_text="Absolute times on every page are written in this zone; the relative time "
        "stays beside them.",
    )

    def __init__(self, *args: Any, browser_zone: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        browser = f"Browser's time zone ({browser_zone})" if browser_zone else "Browser's time zone"
        field = self.fields["time_zone"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(BROWSER, browser), *((name, name) for name in zone_names())]


@page
def preferences_page(request: HttpRequest) -> HttpResponse:
    """Show and save the user's preferences (one row per user, created on first save)."""
    user_id = int(request.user.pk or 0)  # signed in (``page``)
    saved = Preference.objects.filter(user_id=user_id).first()
    browser = browser_time_zone(request)
    browser_name = browser.key if browser is not None else ""
    if request.method == "POST":
        form = PreferenceForm(request.POST, browser_zone=browser_name)
        if form.is_valid():
            zone = form.cleaned_data["time_zone"]
            Preference.objects.update_or_create(user_id=user_id, defaults={"time_zone": zone})
            messages.success(
                request,
                f"Times are now shown in {zone}." if zone else "Times now follow your browser.",
            )
            back = safe_next(request, request.POST.get("next") or "", request.path)
            return redirect(back)
        status = 400
    else:
        form = PreferenceForm(
            initial={"time_zone": saved.time_zone if saved else BROWSER},
            browser_zone=browser_name,
        )
        status = 200
    return render_page(
        request,
        "dashboard/preferences.html",
        {
            "form": form,
            "shown_zone": viewer_time_zone(request),
            "now_moment": timezone.now(),
            "next": safe_next(request, request.GET.get("next") or "", ""),
        },
        status=status,
    )

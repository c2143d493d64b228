"""The Django admin is for superusers: a staff operator (olga) or a tenant admin (amy) is sent to
the admin's login, which says they are not authorized, and sees no tenant's rows."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", ["olga", "amy", "alice", "carl"])
def test_the_admin_refuses_everyone_but_superusers(client_for: Any, name: str) -> None:
    for path in ("/admin/", "/admin/mcptasks/task/", "/admin/audit/auditevent/"):
        response = client_for(name).get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/admin/login/")


def test_a_superuser_uses_the_admin(cast: Any) -> None:
    root = get_user_model().objects.create_superuser("root", "root@example.com", "root-pass-123")
    client = Client()
    client.force_login(root)
    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/mcptasks/task/").status_code == 200

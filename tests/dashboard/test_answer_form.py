"""The answer form generated from an elicitation ``requestedSchema`` (PROTOCOL §3.4): every
kind of property, its bounds and formats, defaults, and the final check by validate_response."""

from __future__ import annotations

from typing import Any

import pytest
from django import forms

from dashboard.forms import ElicitationForm

EVERY_KIND: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "title": "Name",
            "minLength": 2,
            "maxLength": 10,
            "default": "web",
        },
        "email": {"type": "string", "format": "email"},
        "homepage": {"type": "string", "format": "uri"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.5},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 9},
        "confirm": {"type": "boolean", "title": "Confirm", "default": True},
        "region": {"type": "string", "enum": ["eu", "us"], "enumNames": ["Europe", "America"]},
        "tier": {
            "type": "string",
            "oneOf": [
                {"const": "gold", "title": "Gold tier"},
                {"const": "free", "title": "Free tier"},
            ],
            "default": "free",
        },
        "zone": {"type": "string", "enum": ["a", "b", "c", "d", "e", "f", "g"]},
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["x", "y", "z"]},
            "minItems": 1,
            "maxItems": 2,
        },
        "teams": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "ops", "title": "Operations"},
                    {"const": "dev", "title": "Developers"},
                ]
            },
        },
    },
    "required": ["name", "email", "replicas", "region", "tags"],
}
PARAMS = {"mode": "form", "message": "Fill in", "requestedSchema": EVERY_KIND}
VALID = {
    "content-name": "web",
    "content-email": "ops@example.com",
    "content-homepage": "https://example.com/x",
    "content-day": "2026-05-04",
    "content-at": "2026-05-04T10:30:00",
    "content-ratio": "0.25",
    "content-replicas": "3",
    "content-region": "eu",
    "content-tier": "gold",
    "content-zone": "g",
    "content-tags": ["x", "z"],
    "content-teams": ["dev"],
}


def test_every_kind_gets_the_right_field_and_widget():
    form = ElicitationForm(PARAMS)
    fields = form.fields
    assert isinstance(fields["name"], forms.CharField)
    assert (fields["name"].min_length, fields["name"].max_length) == (2, 10)
    assert isinstance(fields["email"], forms.EmailField)
    assert fields["homepage"].widget.input_type == "url"
    assert fields["day"].widget.input_type == "date"
    assert fields["at"].widget.input_type == "datetime-local"
    assert isinstance(fields["ratio"], forms.FloatField)
    assert isinstance(fields["replicas"], forms.IntegerField)
    assert isinstance(fields["confirm"], forms.BooleanField)
    assert fields["region"].choices == [("eu", "Europe"), ("us", "America")]
    assert isinstance(fields["region"].widget, forms.RadioSelect)
    assert fields["tier"].choices == [("gold", "Gold tier"), ("free", "Free tier")]
    assert isinstance(fields["zone"].widget, forms.Select)  # many options: a select
    assert isinstance(fields["tags"].widget, forms.CheckboxSelectMultiple)
    assert fields["teams"].choices == [("ops", "Operations"), ("dev", "Developers")]
    assert [n for n, f in fields.items() if f.required] == [
        "name",
        "email",
        "replicas",
        "region",
        "tags",
    ]


def test_defaults_are_initial_values_and_titles_are_labels():
    form = ElicitationForm(PARAMS)
    assert form.fields["name"].initial == "web"
    assert form.fields["ratio"].initial == 0.5
    assert form.fields["confirm"].initial is True
    assert form.fields["tier"].initial == "free"
    assert form.fields["name"].label == "Name"
    assert form.fields["email"].label == "email"
    html = form.as_div()
    assert 'value="web"' in html and "checked" in html


def test_valid_answer_has_json_types_and_passes_validate_response():
    form = ElicitationForm(PARAMS, VALID)
    answer = form.answer()
    assert answer is not None, form.errors
    assert answer["action"] == "accept"
    content = answer["content"]
    assert content == {
        "name": "web",
        "email": "ops@example.com",
        "homepage": "https://example.com/x",
        "day": "2026-05-04",
        "at": "2026-05-04T10:30:00+00:00",
        "ratio": 0.25,
        "replicas": 3,
        "confirm": False,
        "region": "eu",
        "tier": "gold",
        "zone": "g",
        "tags": ["x", "z"],
        "teams": ["dev"],
    }


def test_optional_fields_left_empty_are_omitted_and_booleans_are_false():
    data = {
        key: value
        for key, value in VALID.items()
        if key
        in ("content-name", "content-email", "content-replicas", "content-region", "content-tags")
    }
    answer = ElicitationForm(PARAMS, data).answer()
    assert answer is not None
    assert answer["content"] == {
        "name": "web",
        "email": "ops@example.com",
        "replicas": 3,
        "region": "eu",
        "tags": ["x", "z"],
        "confirm": False,
    }


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("content-name", "w", "at least 2"),
        ("content-name", "w" * 11, "at most 10"),
        ("content-email", "not-an-email", "valid email"),
        ("content-homepage", "no scheme here", "absolute URI"),
        ("content-day", "2026-13-01", "valid date"),
        ("content-at", "yesterday", "valid date/time"),
        ("content-ratio", "1.5", "less than or equal to 1"),
        ("content-replicas", "0", "greater than or equal to 1"),
        ("content-replicas", "2.5", "whole number"),
        ("content-region", "mars", "valid choice"),
        ("content-tier", "platinum", "valid choice"),
        ("content-tags", ["x", "y", "z"], "at most 2"),
        ("content-tags", [], "required"),
        ("content-teams", ["nobody"], "valid choice"),
    ],
)
def test_out_of_bounds_and_badly_formatted_values_are_refused(field, value, message):
    form = ElicitationForm(PARAMS, {**VALID, field: value})
    assert form.answer() is None
    name = field.removeprefix("content-")
    assert message in " ".join(form.errors[name]), form.errors


def test_required_fields_are_required():
    form = ElicitationForm(PARAMS, {"content-tags": ["x"]})
    assert form.answer() is None
    assert set(form.errors) == {"name", "email", "replicas", "region"}


def test_schema_rules_the_form_does_not_model_are_enforced_by_validate_response():
    params = {
        "requestedSchema": {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^A"}},
        }
    }
    form = ElicitationForm(params, {"content-code": "B1"})
    assert form.answer() is None
    assert "does not fit the request" in str(form.non_field_errors())
    assert ElicitationForm(params, {"content-code": "A1"}).answer() == {
        "action": "accept",
        "content": {"code": "A1"},
    }


def test_a_property_of_an_unknown_kind_is_entered_as_json():
    params = {
        "requestedSchema": {
            "type": "object",
            "properties": {
                "limits": {"type": "object", "properties": {"cpu": {"type": "integer"}}}
            },
        }
    }
    form = ElicitationForm(params, {"content-limits": '{"cpu": 2}'})
    assert form.answer() == {"action": "accept", "content": {"limits": {"cpu": 2}}}
    assert ElicitationForm(params, {"content-limits": "{nope"}).answer() is None


def test_an_empty_schema_accepts_an_empty_answer():
    assert ElicitationForm({"message": "OK?"}, {}).answer() == {"action": "accept", "content": {}}

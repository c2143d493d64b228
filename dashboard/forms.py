"""Dashboard forms: the answer form generated from an elicitation ``requestedSchema``, and the
small forms of the operator's actions. Forms parse and validate; they never save."""

from __future__ import annotations

import json
import re
from datetime import date, datetime
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from audit.redact import redact_text
from mcptasks.lifecycle import RECONCILE_DECISIONS
from mcptasks.tools.answers import ELICIT_ACTIONS, InvalidAnswer, validate_response
from mcptasks.tools.context import ELICIT

# Radio buttons up to this many options, a select beyond.
RADIO_MAX = 5
MULTILINE_MIN_LENGTH = 200
REASON_MAX = 2000
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:[^\s]+$")


def validate_uri(value: str) -> None:
    """An absolute URI (JSON Schema ``format: uri``): a scheme, a colon, no whitespace."""
    if not _URI.match(value):
        raise ValidationError("Enter an absolute URI, such as https://example.com/path.")


class JsonValueField(forms.CharField):
    """A property of a kind the form does not model, entered as JSON (the schema still
    validates it)."""

    widget = forms.Textarea(attrs={"rows": 3, "spellcheck": "false"})

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if text is None or text in self.empty_values:
            return None
        try:
            return json.loads(text)
        except ValueError:
            raise ValidationError("Enter a JSON value.") from None


def _choices(options: list[Any], titles: list[Any] | None = None) -> list[tuple[str, str]]:
    labels = titles if titles and len(titles) == len(options) else options
    return [
        (str(value), redact_text(str(label))) for value, label in zip(options, labels, strict=True)
    ]


def _titled(options: list[Any]) -> list[tuple[str, str]]:
    return [
        (str(option.get("const")), redact_text(str(option.get("title") or option.get("const"))))
        for option in options
        if isinstance(option, dict) and "const" in option
    ]


def _single_select(choices: list[tuple[str, str]], common: dict[str, Any]) -> forms.Field:
    widget: forms.Widget
    if len(choices) <= RADIO_MAX:
        widget = forms.RadioSelect()
    else:
        widget = forms.Select()
        if not common["required"]:
            choices = [("", "—"), *choices]
    return forms.ChoiceField(choices=choices, widget=widget, **common)


def _string_field(prop: dict[str, Any], common: dict[str, Any]) -> forms.Field:
    lengths: dict[str, Any] = {
        name: prop[key]
        for name, key in (("min_length", "minLength"), ("max_length", "maxLength"))
        if isinstance(prop.get(key), int)
    }
    fmt = prop.get("format")
    if fmt == "email":
        return forms.EmailField(**lengths, **common)
    if fmt == "uri":
        return forms.CharField(
            validators=[validate_uri], widget=forms.URLInput, **lengths, **common
        )
    if fmt == "date":
        return forms.DateField(widget=forms.DateInput(attrs={"type": "date"}), **common)
    if fmt == "date-time":
        return forms.DateTimeField(
            widget=forms.DateTimeInput(
                attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"
            ),
            **common,
        )
    multiline = lengths.get("max_length", 0) > MULTILINE_MIN_LENGTH
    widget = forms.Textarea(attrs={"rows": 3}) if multiline else forms.TextInput
    return forms.CharField(widget=widget, strip=False, **lengths, **common)


def _number_field(prop: dict[str, Any], common: dict[str, Any]) -> forms.Field:
    bounds: dict[str, Any] = {
        name: prop[key]
        for name, key in (("min_value", "minimum"), ("max_value", "maximum"))
        if isinstance(prop.get(key), int | float) and not isinstance(prop.get(key), bool)
    }
    if prop.get("type") == "integer":
        return forms.IntegerField(**bounds, **common)
    return forms.FloatField(widget=forms.NumberInput(attrs={"step": "any"}), **bounds, **common)


class MultiSelectField(forms.MultipleChoiceField):
    """A multi-select enum with the schema's ``minItems`` / ``maxItems``."""

    def __init__(
        self, *, min_items: int | None = None, max_items: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.min_items, self.max_items = min_items, max_items

    def validate(self, value: Any) -> None:
        super().validate(value)
        count = len(value or [])
        if self.min_items is not None and count < self.min_items and (count or self.required):
            raise ValidationError(f"Choose at least {self.min_items}.")
        if self.max_items is not None and count > self.max_items:
            raise ValidationError(f"Choose at most {self.max_items}.")


def _array_field(prop: dict[str, Any], common: dict[str, Any]) -> forms.Field | None:
    items: dict[str, Any] = prop["items"] if isinstance(prop.get("items"), dict) else {}
    if isinstance(items.get("enum"), list):
        choices = _choices(items["enum"])
    elif isinstance(items.get("anyOf"), list):
        choices = _titled(items["anyOf"])
    else:
        return None
    counts: dict[str, Any] = {
        name: prop[key]
        for name, key in (("min_items", "minItems"), ("max_items", "maxItems"))
        if isinstance(prop.get(key), int)
    }
    return MultiSelectField(
        choices=choices, widget=forms.CheckboxSelectMultiple, **counts, **common
    )


def field_for(prop: Any, *, label: str, required: bool) -> forms.Field:
    """The form field of one ``requestedSchema`` property (PROTOCOL §3.4)."""
    prop = prop if isinstance(prop, dict) else {}
    # What the tool wrote into the question is shown redacted, as everywhere on the dashboard.
    common: dict[str, Any] = {
        "label": redact_text(str(prop.get("title") or label)),
        "required": required,
        "help_text": redact_text(str(prop.get("description") or "")),
    }
    if "default" in prop:
        default = prop["default"]
        common["initial"] = redact_text(default) if isinstance(default, str) else default
    kind = prop.get("type")
    field: forms.Field | None = None
    if kind == "string" and isinstance(prop.get("enum"), list):
        field = _single_select(_choices(prop["enum"], prop.get("enumNames")), common)
    elif kind == "string" and isinstance(prop.get("oneOf"), list):
        field = _single_select(_titled(prop["oneOf"]), common)
    elif kind == "string":
        field = _string_field(prop, common)
    elif kind in ("number", "integer"):
        field = _number_field(prop, common)
    elif kind == "boolean":
        # An unticked box is the answer false, never a missing one.
        field = forms.BooleanField(**{**common, "required": False})
    elif kind == "array":
        field = _array_field(prop, common)
    if field is None:
        initial = common.pop("initial", None)
        field = JsonValueField(
            **common, initial=json.dumps(initial) if initial is not None else None
        )
        field.help_text = (field.help_text + " " if field.help_text else "") + "Enter JSON."
    return field


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        if timezone.is_naive(value):
            value = timezone.make_aware(value, timezone.get_current_timezone())
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return value


class ElicitationForm(forms.Form):
    """The fields of an elicitation's ``requestedSchema``; :meth:`content` is the answer's
    ``content``, checked once more against the schema by ``validate_response``."""

    def __init__(self, params: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("prefix", "content")
        super().__init__(*args, **kwargs)
        self.params = params
        schema = params.get("requestedSchema") if isinstance(params, dict) else None
        self.schema: dict[str, Any] = schema if isinstance(schema, dict) else {}
        properties = self.schema.get("properties")
        required = set(self.schema.get("required") or [])
        for name, prop in (properties if isinstance(properties, dict) else {}).items():
            self.fields[name] = field_for(prop, label=name, required=name in required)

    def content(self) -> dict[str, Any]:
        """The accepted answer's content (call after ``is_valid()``)."""
        content: dict[str, Any] = {}
        for name, field in self.fields.items():
            value = self.cleaned_data.get(name)
            if isinstance(field, forms.BooleanField):
                content[name] = bool(value)
            elif value is None or value == "" or (value == [] and not field.required):
                continue
            else:
                content[name] = _json_value(value)
        return content

    def answer(self) -> dict[str, Any] | None:
        """The validated ``{action: accept, content}``, or None with the form's errors set."""
        if not self.is_valid():
            return None
        try:
            return validate_response(
                ELICIT, self.params, {"action": "accept", "content": self.content()}
            )
        except InvalidAnswer as exc:
            self.add_error(None, f"The answer does not fit the request: {exc}")
            return None


class RawAnswerForm(forms.Form):
    """The answer to a request the dashboard has no form for (sampling, roots), as JSON."""

    response = JsonValueField(label="Response (JSON)", required=True)

    def __init__(self, method: str, params: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.method, self.params = method, params

    def answer(self) -> dict[str, Any] | None:
        if not self.is_valid():
            return None
        try:
            return validate_response(self.method, self.params, self.cleaned_data["response"])
        except InvalidAnswer as exc:
            self.add_error("response", str(exc))
            return None


class DecisionForm(forms.Form):
    """Accept, decline or cancel an elicitation, with an optional comment for the audit trail."""

    action = forms.ChoiceField(choices=[(a, a) for a in ELICIT_ACTIONS])
    comment = forms.CharField(
        label="Comment for the audit trail",
        required=False,
        max_length=REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("prefix", "decision")
        super().__init__(*args, **kwargs)


def _reason_field(label: str = "Reason") -> forms.CharField:
    return forms.CharField(
        label=label, max_length=REASON_MAX, strip=True, widget=forms.Textarea(attrs={"rows": 2})
    )


class CancelForm(forms.Form):
    reason = _reason_field("Why cancel this task?")


class ForceCancelForm(forms.Form):
    reason = _reason_field("Why force-cancel this task?")
    confirm = forms.BooleanField(
        label="I understand: the task stops now, and a step in flight becomes 'unknown' and "
        "needs reconciling."
    )


class ReconcileForm(forms.Form):
    decision = forms.ChoiceField(
        choices=[
            ("applied", "It was applied — continue with this outcome"),
            ("not_applied", "It was not applied — run the step again"),
            ("fail", "Fail the task"),
        ],
        widget=forms.RadioSelect,
    )
    external_ref = forms.CharField(
        label="External reference (for 'applied')", required=False, max_length=500
    )
    note = _reason_field("Reason (what you checked)")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("decision") not in RECONCILE_DECISIONS:
            return data
        if data.get("decision") == "applied" and not data.get("external_ref"):
            self.add_error("external_ref", "Give the external reference of what was applied.")
        return data


class DelegationForm(forms.Form):
    grantee = forms.ChoiceField(label="Member")
    delegation = forms.ChoiceField(
        choices=[
            ("answer", "Approver (may answer its input requests)"),
            ("view", "Viewer (may see this task)"),
        ]
    )

    def __init__(self, candidates: list[Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        grantee = self.fields["grantee"]
        assert isinstance(grantee, forms.ChoiceField)
        grantee.choices = [(str(user.pk), user.get_username()) for user in candidates]


class RevokeDelegationForm(forms.Form):
    # A user id in ASCII digits: an IntegerField would read a fullwidth "５" as 5.
    grantee = forms.RegexField(regex=r"^[0-9]{1,18}\Z")
    delegation = forms.ChoiceField(choices=[("answer", "answer"), ("view", "view")])


class TenantSwitchForm(forms.Form):
    tenant = forms.CharField(max_length=64)


class TaskFilterForm(forms.Form):
    """The tasks list's filters (GET)."""

    q = forms.CharField(label="Search", required=False, max_length=200)
    tenant = forms.ChoiceField(required=False)
    state = forms.ChoiceField(required=False)
    outcome = forms.ChoiceField(
        required=False,
        choices=[
            ("", "Any outcome"),
            ("completed", "completed"),
            ("failed", "failed"),
            ("rejected", "rejected (tool error)"),
            ("cancelled", "cancelled"),
        ],
    )
    error_code = forms.IntegerField(
        label="Error code",
        required=False,
        min_value=-(2**31),
        max_value=2**31 - 1,
        widget=forms.TextInput(attrs={"placeholder": "-32603", "inputmode": "numeric"}),
    )
    sort = forms.ChoiceField(
        required=False,
        choices=[
            ("-created", "newest first"),
            ("created", "oldest first"),
            ("-updated", "recently updated"),
            ("updated", "least recently updated"),
        ],
    )
    tool = forms.ChoiceField(required=False)
    principal = forms.CharField(label="Principal", required=False, max_length=150)
    created_from = forms.DateField(
        label="Created from", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    created_to = forms.DateField(
        label="Created to", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )

    def __init__(
        self,
        *args: Any,
        tenants: list[tuple[str, str]],
        states: list[str],
        tools: list[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._set_choices("tenant", [("", "All my tenants"), *tenants])
        self._set_choices("state", [("", "Any state"), *((s, s.replace("_", " ")) for s in states)])
        self._set_choices("tool", [("", "Any tool"), *((t, t) for t in tools)])

    def _set_choices(self, name: str, choices: list[tuple[str, str]]) -> None:
        field = self.fields[name]
        assert isinstance(field, forms.ChoiceField)
        field.choices = choices


class AuditFilterForm(forms.Form):
    """The audit list's (and export's) filters (GET)."""

    tenant = forms.ChoiceField(required=False)
    actor = forms.CharField(required=False, max_length=200)
    action = forms.CharField(required=False, max_length=64)
    task = forms.CharField(label="Task id", required=False, max_length=64)
    since = forms.DateTimeField(
        label="From", required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    until = forms.DateTimeField(
        label="Until", required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )

    def __init__(self, *args: Any, tenants: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["tenant"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = tenants


class ExportForm(forms.Form):
    format = forms.ChoiceField(
        choices=[("jsonl", "JSON Lines"), ("csv", "CSV")], initial="jsonl", widget=forms.RadioSelect
    )


class TokenIssueForm(forms.Form):
    name = forms.CharField(max_length=100, label="Name", help_text="What the token is for.")
    owner = forms.ChoiceField(label="Owner")
    scopes = forms.MultipleChoiceField(
        choices=[("mcp", "mcp — the MCP endpoint"), ("api", "api — the REST API")],
        initial=["mcp"],
        widget=forms.CheckboxSelectMultiple,
    )
    expires_in_days = forms.TypedChoiceField(
        label="Expires",
        coerce=int,
        initial=90,
        choices=[(30, "in 30 days"), (90, "in 90 days"), (365, "in a year"), (0, "never")],
    )

    def __init__(self, *args: Any, owners: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["owner"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = owners


class TokenRevokeForm(forms.Form):
    reason = forms.CharField(max_length=REASON_MAX, required=False)

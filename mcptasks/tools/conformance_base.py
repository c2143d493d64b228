"""Fixture tools of the official suite's base scenarios (server-stateless,
input-required-result-*). Loaded only in conformance mode."""

from __future__ import annotations

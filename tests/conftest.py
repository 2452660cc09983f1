"""Shared test helpers."""

from __future__ import annotations

import importlib.util

import pytest


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


requires_torch = pytest.mark.skipif(not _has("torch"), reason="torch is not installed")

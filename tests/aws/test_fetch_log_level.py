"""On AWS the line per fetch is off unless asked for: at INFO the page function would write a JSON line per
page to CloudWatch Logs."""

from __future__ import annotations

import logging

import pytest

from harvester.adapters.aws.lambda_runtime import ENV_FETCH_LOG_LEVEL, structured_logger

FETCH_LOG = logging.getLogger("harvester.pipeline.fetch_log")


@pytest.mark.parametrize(
    ("given", "level"), [(None, logging.WARNING), ("info", logging.INFO), ("nonsense", logging.WARNING)]
)
def test_the_fetch_lines_are_warning_level_unless_the_environment_asks(monkeypatch, given, level):
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "INFO")
    if given is None:
        monkeypatch.delenv(ENV_FETCH_LOG_LEVEL, raising=False)
    else:
        monkeypatch.setenv(ENV_FETCH_LOG_LEVEL, given)
    before = FETCH_LOG.level
    try:
        structured_logger()
        assert FETCH_LOG.getEffectiveLevel() == level
        assert logging.getLogger("harvester.pipeline").getEffectiveLevel() <= logging.INFO
    finally:
        FETCH_LOG.setLevel(before)

"""The ``discovery`` section of a job request: a section of defaults is no section (one job, one fingerprint),
and a site whose discovery keeps its path keeps it (as a folder), while the crawl database's origin stays."""

from __future__ import annotations

import pytest

from harvester.model.base import ValidationError
from harvester.model.discovery import DiscoveryOptions
from harvester.model.messages import JobRequest


def test_a_section_of_defaults_is_the_job_without_one():
    plain = JobRequest(site="https://example.com/")
    empty = JobRequest.model_validate({"site": "https://example.com/", "discovery": {}})

    assert empty.discovery is None and empty.fingerprint() == plain.fingerprint()
    skipping = JobRequest(site="https://example.com/", discovery=DiscoveryOptions(use_robots=False)).validated()
    assert skipping.fingerprint() != plain.fingerprint()
    assert JobRequest.model_validate_json(skipping.model_dump_json()) == skipping


def test_a_site_keeps_its_path_as_a_folder_only_when_its_discovery_says_so():
    given = "https://Example.com/foo/bar?page=2#top"
    kept = JobRequest.model_validate({"site": given, "discovery": {"normalize_homepage_url": False}})

    assert JobRequest(site=given).site == "https://example.com/"
    assert kept.site == "https://example.com/foo/bar/" and kept.origin == "https://example.com"
    assert kept.validated() == kept  # (as the queue reads it back: the same site, the same fingerprint)


def test_options_of_a_job_that_runs_no_discovery_are_refused():
    with pytest.raises(
        ValidationError, match=r"names its sitemaps runs no discovery: leave its options out - at `\$.discovery`"
    ):
        JobRequest.model_validate(
            {
                "site": "https://example.com/",
                "sitemaps": ["https://example.com/s.xml"],
                "discovery": {"use_robots": False},
            }
        )

"""The ``select`` section of a job request (issue 43, items 1-3): its moments, its checks, and the language
rules it applies, translated from the peers' own cases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from harvester.languages import hreflang_is, other_language
from harvester.model.base import ValidationError
from harvester.model.messages import JobRequest
from harvester.model.selection import EntrySelection, moment

START = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)


def test_a_moment_is_a_date_or_a_duration_before_the_start():
    assert moment("2026-01-01", START) == datetime(2026, 1, 1, tzinfo=UTC)
    assert moment("2026-01-01T10:00:00+02:00", START) == datetime(2026, 1, 1, 8, tzinfo=UTC)
    assert moment("7d", START) == START - timedelta(days=7)
    assert moment("2w", START) == START - timedelta(weeks=2)
    assert moment("12h", START) == START - timedelta(hours=12)
    assert moment("30m", START) == START - timedelta(minutes=30)
    assert moment("90s", START) == START - timedelta(seconds=90)
    for bad in ("yesterday", "7 days", "-7d", "2026", "99999999w"):
        with pytest.raises(ValueError, match=r"neither a date|before the year 1"):
            moment(bad, START)


def test_the_section_is_checked_where_it_enters_and_left_out_of_the_fingerprint_when_unset():
    with pytest.raises(ValidationError, match=r"neither a date.*\$\.select"):
        JobRequest.model_validate({"site": "https://example.com/", "select": {"since": "soon"}})
    with pytest.raises(ValidationError, match="is not after since"):
        EntrySelection.model_validate({"since": "2026-02-01", "before": "2026-01-01"})
    assert EntrySelection.model_validate({"since": "400w", "before": "2026-01-01"}).since == "400w"  # (moves on)
    with pytest.raises(ValidationError, match="changefreq"):
        EntrySelection.model_validate({"changefreq": ["sometimes"]})
    assert EntrySelection.model_validate({"lang": "DE"}).lang == "de"
    plain = JobRequest(site="https://example.com/")
    assert plain.fingerprint() == JobRequest(site="https://example.com/", select=None).fingerprint()
    chosen = JobRequest.model_validate({"site": "https://example.com/", "select": {"since": "7d"}})
    assert chosen.fingerprint() != plain.fingerprint()


def test_what_leaves_urls_out_and_what_rewrites_them():
    assert not EntrySelection().leaves_out and not EntrySelection(alternates=True).leaves_out
    assert EntrySelection(since="7d").leaves_out and EntrySelection(sitemap_since="7d").leaves_out
    assert EntrySelection(lang="de").leaves_out and EntrySelection(lang="de").rewrites
    assert EntrySelection(alternates=True).rewrites and not EntrySelection(since="7d").rewrites


# courlan, tests/unit_tests.py, test_lang_filter (trafilatura's sitemaps apply courlan's lang_filter): its cases
# with the default trailing slash, strict (the host tested) where the language is in the host.
@pytest.mark.parametrize(
    ("url", "lang", "kept"),
    [
        ("http://test.com/az/", "de", False),
        ("http://test.com/de/", "de", True),
        (
            "https://www.20min.ch/fr/story/des-millions-pour-produire-de-l-energie-renouvelable-467974085377",
            "de",
            False,
        ),
        ("https://www.20min.ch/fr/story/des-millions-pour-produire-de-l-energie-renouvelable-467974085377", "fr", True),
        (
            "https://www.20min.ch/fr/story/des-millions-pour-produire-de-l-energie-renouvelable-467974085377",
            "en",
            False,
        ),
        ("https://www.sitemaps.org/en_GB/protocol.html", "en", True),
        ("https://www.sitemaps.org/en_GB/protocol.html", "de", False),
        ("https://en.wikipedia.org/", "de", False),
        ("https://de.wikipedia.org/", "de", True),
        ("http://de.musclefood.com/neu/neue-nahrungsergaenzungsmittel.html", "de", True),
        ("http://de.musclefood.com/neu/neue-nahrungsergaenzungsmittel.html", "fr", False),
        # courlan (not strict) keeps it; its host's first label is a language code (ch: Chamorro), which the
        # host test (courlan's strict one) reads as another language's.
        ("http://ch.postleitzahl.org/sankt_gallen/liste-T.html", "de", False),
        ("http://www.uni-rostock.de/fakult/philfak/fkw/iph/thies/mythos.html", "de", True),
        ("http://stifter.literature.at/witiko/htm/h15-22b.html", "de", True),
        ("http://stifter.literature.at/doc/witiko/h15-22b.html", "de", True),
        ("http://stifter.literature.at/nl/witiko/h15-22b.html", "de", False),
        ("http://stifter.literature.at/de_DE/witiko/h15-22b.html", "de", True),
        ("http://stifter.literature.at/en_US/witiko/h15-22b.html", "de", False),
        ("http://www.stiftung.koerber.de/bg/recherche/de/beitrag.php?id=15132&refer=", "de", True),
        ("http://www.solingen-internet.de/si-hgw/eiferer.htm", "de", True),
        ("http://ig.cs.tu-berlin.de/oldstatic/w2000/ir1/aufgabe2/ir1-auf2-gr16.html", "de", True),
        # courlan strict drops this one ("bz" is not "de"); "bz" is no language code, so no language is marked.
        ("http://bz.berlin1.de/kino/050513/fans.html", "de", True),
    ],
)
def test_a_url_marks_its_language_by_courlans_rules(url, lang, kept):
    assert other_language(url, lang) is not kept


def test_an_hreflang_is_of_a_language_with_or_without_its_region():
    """trafilatura's sitemaps.py keeps the hreflang values that begin with the language (de, de-ch)."""
    assert hreflang_is("de", "de") and hreflang_is("de-ch", "de") and hreflang_is("DE_at", "de")
    assert not hreflang_is("en", "de") and not hreflang_is("x-default", "de") and not hreflang_is("dev", "de")

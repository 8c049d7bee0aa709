"""The three-crawl scenario of the re-crawl issue, shared by the local and the AWS tests.

A 40-page site (two urlsets under an index, declared in robots.txt): pages 0-29 carry an ETag and a
Last-Modified header, 30-34 only Last-Modified, 35-39 neither. Crawl 1 fetches everything; crawl 2 right
after fetches nothing (nothing is due; every sitemap is asked conditionally and answered 304); then the site
changes X pages, adds Y, drops Z from its sitemaps, makes W answer 404, and stamps a new lastmod on two
pages whose content stays the same (one with an ETag: a 304; one without validators: the same signature),
and crawl 3 must report exactly that and store exactly X + Y new documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harvester.demo.live import Hit, LiveSite
from harvester.model.crawl import ChangeKind

SITEMAP_PATHS = ("/robots.txt", "/sitemap_index.xml", "/sitemaps/0.xml", "/sitemaps/1.xml")
#: The well-known locations probed besides the index robots.txt declares: absent, asked each crawl.
PROBES = 13


def build(site: LiveSite) -> LiveSite:
    for n in range(40):
        site.add(f"/pages/{n}.html", etag=n < 30, last_modified=n < 35)
    return site


def page(n: int | str) -> str:
    return f"/pages/{n}.html"


@dataclass
class Mutation:
    changed: list[str] = field(default_factory=lambda: [page(1), page(2), page(31)])
    added: list[str] = field(default_factory=lambda: [page("new-a"), page("new-b")])
    removed: list[str] = field(default_factory=lambda: [page(10), page(11)])
    gone: list[str] = field(default_factory=lambda: [page(20), page(36)])
    touched_304: str = page(5)
    touched_same: str = page(37)

    def apply(self, site: LiveSite) -> None:
        for path in self.changed:
            site.change(path)
        for path in self.added:
            site.add(path)
        for path in self.removed:
            site.unlist(path)
        for path in self.gone:
            site.fail(path, 404)
        site.touch(self.touched_304)
        site.touch(self.touched_same)

    @property
    def fetched(self) -> set[str]:
        return {*self.changed, *self.added, *self.gone, self.touched_304, self.touched_same}

    @property
    def asked_conditionally(self) -> set[str]:
        """Known pages with a validator and a stored content: 1, 2, 31 (Last-Modified only), 20, 5."""
        return {page(1), page(2), page(31), page(20), self.touched_304}

    def expected_changes(self) -> dict[str, int]:
        return {
            "new": 2,
            "changed": 3,
            "unchanged": 1,
            "notmodified": 1,
            "gone": 2,
            "failed": 0,
            "excluded": 0,
            "removed": 2,
            "not_due": 31,
            "back": 0,
            "listed": 0,
        }

    def expected_feed(self, site: LiveSite) -> dict[str, str]:
        feed = {site.url(p): ChangeKind.CHANGED.value for p in self.changed}
        feed |= {site.url(p): ChangeKind.NEW.value for p in self.added}
        feed |= {site.url(p): ChangeKind.REMOVED.value for p in self.removed}
        feed |= {site.url(p): ChangeKind.GONE.value for p in self.gone}
        feed[site.url(self.touched_304)] = ChangeKind.NOTMODIFIED.value
        feed[site.url(self.touched_same)] = ChangeKind.UNCHANGED.value
        return feed


def sitemap_hits(site: LiveSite) -> list[Hit]:
    return [h for h in site.hits if h.path in SITEMAP_PATHS]


def probe_hits(site: LiveSite) -> list[Hit]:
    return [h for h in site.hits if not h.page and h.path not in SITEMAP_PATHS]


def check_crawl_1(site: LiveSite, result: dict[str, Any]) -> None:
    pages = site.page_hits()
    assert sorted(h.path for h in pages) == sorted(page(n) for n in range(40))
    assert not any(h.conditional for h in pages)
    assert result["changes"]["new"] == 40 and result["total_urls"] == 40
    # robots.txt is read once, for its Sitemap: lines: the page workers take that reading for their rules.
    hits = [h.path for h in sitemap_hits(site)]
    assert sorted(hits) == sorted(SITEMAP_PATHS)
    assert len(probe_hits(site)) == PROBES


def check_crawl_2(site: LiveSite, result: dict[str, Any]) -> None:
    assert site.page_hits() == []  # nothing is due right after a crawl: not one page request
    hits = sitemap_hits(site)
    assert sorted(h.path for h in hits) == sorted(SITEMAP_PATHS)
    assert all(h.conditional and h.status == 304 for h in hits), hits
    assert len(probe_hits(site)) == PROBES
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (40, 40, 0)
    assert result["changes"]["not_due"] == 40 and result["changes"]["new"] == 0


def check_crawl_3(site: LiveSite, mutation: Mutation, result: dict[str, Any], feed: list[dict[str, Any]]) -> None:
    pages = site.page_hits()
    assert sorted(h.path for h in pages) == sorted(mutation.fetched)  # each once, nothing else
    assert {h.path for h in pages if h.conditional} == mutation.asked_conditionally
    assert result["changes"] == mutation.expected_changes()
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (40, 38, 2)
    assert {line["url"]: line["change"] for line in feed} == mutation.expected_feed(site)
    assert len(feed) == len({line["url"] for line in feed})
    changed = {line["url"]: line for line in feed if line["change"] == "changed"}
    assert all(line["previous_signature"] != line["signature"] for line in changed.values())
    gone = [line for line in feed if line["change"] == "gone"]
    assert all((line["previous_status"], line["status"], line["state"]) == (200, 404, "gone") for line in gone)
    trust = result["lastmod_trust"]["127.0.0.1"]
    assert (trust["confirmed"], trust["refuted"], trust["trusted"]) == (3, 2, True)


def check_crawl_4(site: LiveSite, mutation: Mutation, result: dict[str, Any]) -> None:
    """Right after crawl 3 nothing is due: the two pages it found gone are not asked again, and count as
    failed (known gone), not as successes, with the reason, whether listed one by one or adopted in a part."""
    assert site.page_hits() == []
    assert (result["total_urls"], result["successful_processing"], result["failed_processing"]) == (40, 38, 2)
    assert result["known_failures"] == 2 and result["changes"]["not_due"] == 40
    errors = {e["url"]: e["error"] for e in result["error_details"] if e["kind"] == "page"}
    assert sorted(errors) == sorted(site.url(p) for p in mutation.gone)
    assert all(e.startswith("gone: HTTP 404 Not Found at its last fetch on ") for e in errors.values()), errors

"""What the Python API says when it could read nothing: an error at the call, naming the site and why; and
what it does not call an error: a site that answers with no sitemap."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator

import pytest

from harvester import Discovery, SiteUnreachable, iter_pages, sitemap_tree_for_homepage
from tests.support import LOOPBACK

ALLOW = {"allow_networks": [LOOPBACK]}


@pytest.fixture
def closed_port() -> Iterator[str]:
    """A loopback address where nothing listens: the port is held (bound, never listening), so a connection
    is refused and no other program can take it meanwhile."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}/"


def test_a_local_site_the_policy_refuses_raises_saying_how_to_allow_it(site_factory):
    site = site_factory(pages=5, broken=0, sitemaps=1)

    with pytest.raises(SiteUnreachable) as raised:
        sitemap_tree_for_homepage(f"{site.base_url}/")

    error = raised.value
    assert str(error).startswith(f"{site.base_url}/: nothing could be read: none of the 15 locations")
    assert 'allow_networks=["127.0.0.0/8"] (Python)' in str(error) and "FetchPolicy" not in str(error)
    assert error.site == f"{site.base_url}/" and error.reason == error.tree.unreachable()
    assert error.tree.children[0].url == f"{site.base_url}/robots.txt"
    assert all("127.0.0.1 is in 127.0.0.0/8 (loopback)" in (c.error or "") for c in error.tree.children)


def test_iter_pages_on_a_port_where_nothing_listens_raises(closed_port):
    pages = iter_pages(closed_port, **ALLOW)

    with pytest.raises(SiteUnreachable, match=re.escape(f"{closed_port}: nothing could be read")) as raised:
        next(pages)
    assert "Connect call failed" in raised.value.reason


def test_the_async_form_raises_too_and_keeps_the_tree(closed_port):
    discovery = Discovery(closed_port, **ALLOW)

    async def read() -> list[object]:
        return [page async for page in discovery.pages()]  # (aiter_pages' stream)

    with pytest.raises(SiteUnreachable):
        asyncio.run(read())
    assert discovery.tree is not None and discovery.tree.unreachable() is not None


def test_options_are_checked_at_the_call_not_at_the_first_page():
    with pytest.raises(TypeError, match="bogus"):
        iter_pages("https://example.com/", bogus=1)
    with pytest.raises(ValueError, match="max_depth"):
        iter_pages("https://example.com/", max_depth=-1)


def test_a_site_that_answers_with_no_sitemap_is_an_empty_tree_not_an_error(served_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    base = served_dir(empty)

    tree = sitemap_tree_for_homepage(f"{base}/", **ALLOW)

    assert tree.unreachable() is None and tree.distinct_pages == 0 and list(tree.all_pages()) == []
    assert {c.http_status for c in tree.children} == {404}
    assert list(iter_pages(f"{base}/", **ALLOW)) == []


def test_one_location_answering_is_enough(served_dir, tmp_path):
    """robots.txt answers (with no sitemap), the probes too: not unreachable, whatever else failed."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "robots.txt").write_text("User-agent: *\nAllow: /\n")
    base = served_dir(root)

    tree = sitemap_tree_for_homepage(f"{base}/", **ALLOW)

    assert tree.unreachable() is None and tree.children[0].status == "completed"

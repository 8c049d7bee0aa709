"""The SSRF guard end to end: sitemaps that point, directly or by redirect, at every network of the deny
list and at loopback or the metadata endpoint in disguise. Each is refused at connect time with a reason
naming the address actually refused, the live servers behind the disguises never see a request, and the
good sitemap next to them is read as usual.

Two sites: one on 127.0.0.1 (allowed) aiming at a live server on 127.0.0.2, and one on 127.0.0.2 (allowed
in its turn, through HARVEST_ALLOW_NETWORKS rather than the flag) aiming at 127.0.0.1 in the spellings
fetching-and-safety.md lists.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.corpus import sites as s
from tests.corpus.cli import ONLY_127_0_0_1, ONLY_127_0_0_2, Run, Tree, harvest
from tests.corpus.server import Hit, RouteServer

USER_AGENT = "CorpusBot/1.0 (+https://corpus.invalid/bot)"


@dataclass
class GuardedRun:
    run: Run
    tree: Tree
    site_hits: list[Hit]
    target_hits: list[Hit]


@pytest.fixture(scope="module")
def from_127_0_0_1(server: RouteServer, second_server: RouteServer) -> GuardedRun:
    """The site on 127.0.0.1 (allowed); the trap on 127.0.0.2."""
    s.ssrf_site(server, second_server)
    server.reset_log()
    second_server.reset_log()
    run = harvest(
        "sitemaps",
        server.base + "/",
        "--allow-network",
        ONLY_127_0_0_1,
        "--user-agent",
        USER_AGENT,
        "--format",
        "json",
    )
    return GuardedRun(run, Tree(run.json()), list(server.hits), list(second_server.hits))


@pytest.fixture(scope="module")
def from_127_0_0_2(from_127_0_0_1, server: RouteServer, second_server: RouteServer) -> tuple[GuardedRun, list[str]]:
    """The roles swapped: the site on 127.0.0.2 (allowed), the trap on 127.0.0.1."""
    targets = s.site_on_127_0_0_2(second_server, server)
    server.reset_log()
    second_server.reset_log()
    # The allow list from the environment this time, as the AWS template passes it.
    run = harvest(
        "sitemaps", second_server.base + "/", "--format", "json", env={"HARVEST_ALLOW_NETWORKS": ONLY_127_0_0_2}
    )
    return GuardedRun(run, Tree(run.json()), list(second_server.hits), list(server.hits)), targets


def refused(tree: Tree, url: str, address: str) -> None:
    node = tree[url]
    assert (node["status"], node["pages"]) == ("failed", 0), node
    assert f"refused to connect to {address}" in node["error"], node["error"]


# redirects -----------------------------------------------------------------------------------------


def test_a_redirect_from_an_allowed_address_to_127_0_0_2_is_refused(from_127_0_0_1, server):
    refused(from_127_0_0_1.tree, server.url(s.TO_127_0_0_2), "127.0.0.2")
    # The reason names the hop that was refused, not only the sitemap that was asked for.
    error = from_127_0_0_1.tree[server.url(s.TO_127_0_0_2)]["error"]
    assert "(at http://127.0.0.2:" in error and error.endswith(", reached by redirect)"), error


def test_every_redirect_hop_is_checked_not_only_the_first(from_127_0_0_1, server):
    """The first hop stays on the allowed address; the second goes to 127.0.0.2."""
    refused(from_127_0_0_1.tree, server.url(s.HOP_THEN_127_0_0_2), "127.0.0.2")
    assert any(h.path == "/ssrf/hop" for h in from_127_0_0_1.site_hits)


@pytest.mark.parametrize("path", [s.TO_METADATA, s.TO_HIDDEN_METADATA])
def test_a_redirect_to_the_metadata_endpoint_is_refused(from_127_0_0_1, server, path):
    """Plainly, and spelled 2852039166 (the address is the one connected to, not the name)."""
    refused(from_127_0_0_1.tree, server.url(path), "169.254.169.254")


# the deny list -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("network", "host", "address"), [(n, h, a) for n, (h, a) in s.DENIED_HOSTS.items()])
def test_every_network_of_the_deny_list_is_refused(from_127_0_0_1, network, host, address):
    url = f"http://{host}/sitemap.xml"
    refused(from_127_0_0_1.tree, url, address)
    assert from_127_0_0_1.tree[url]["origin"] == "index"


@pytest.mark.parametrize(
    ("network", "embedded"),
    [("::ffff:0:0/96", "10.0.0.1"), ("64:ff9b::/96", "169.254.169.254"), ("2002::/16", "169.254.169.254")],
)
def test_ipv4_embedded_in_ipv6_is_decoded_and_named(from_127_0_0_1, network, embedded):
    """IPv4-mapped, NAT64 and 6to4 addresses: the reason names the IPv4 address the packet would reach."""
    host, _ = s.DENIED_HOSTS[network]
    assert f"embeds the IPv4 address {embedded}" in from_127_0_0_1.tree[f"http://{host}/sitemap.xml"]["error"]


@pytest.mark.parametrize("host", [h for h in s.HIDDEN_METADATA if not h.startswith("0251.")])
def test_the_metadata_endpoint_in_disguise_is_refused_naming_the_real_address(from_127_0_0_1, host):
    refused(from_127_0_0_1.tree, f"http://{host}/latest/meta-data/", "169.254.169.254")


def test_an_octal_dotted_metadata_address_is_refused(from_127_0_0_1):
    """``0251.0376.0251.0376`` is not even parsed as an address: refused before any connection."""
    node = from_127_0_0_1.tree["http://0251.0376.0251.0376/latest/meta-data/"]
    assert (node["status"], node["pages"]) == ("failed", 0)


def test_an_authority_with_two_at_signs_is_refused_without_guessing_the_host(from_127_0_0_1):
    """``user@169.254.169.254:80@evil.invalid``: httpx would connect to evil.invalid; refuse it outright."""
    node = from_127_0_0_1.tree["http://user@169.254.169.254:80@evil.invalid/sitemap.xml"]
    assert node["status"] == "failed"
    assert "ambiguous authority" in node["error"]


@pytest.mark.parametrize("index", range(len(s.hidden_loopback(2))))
def test_127_0_0_2_in_disguise_is_refused(from_127_0_0_1, second_server, index):
    host = s.hidden_loopback(2)[index]
    url = f"http://{host}:{second_server.port}/secret/{index}.xml"
    node = from_127_0_0_1.tree[url]
    assert (node["status"], node["pages"]) == ("failed", 0)
    assert "127.0.0.2" in node["error"]


def test_the_trap_on_127_0_0_2_never_saw_a_request(from_127_0_0_1):
    assert from_127_0_0_1.target_hits == []


def test_the_good_sitemap_beside_the_refusals_is_whole_and_the_job_completes(from_127_0_0_1, server):
    assert from_127_0_0_1.run.returncode == 0, from_127_0_0_1.run.stderr
    node = from_127_0_0_1.tree[server.url(s.GOOD)]
    assert (node["status"], node["pages"]) == ("completed", 2)


def test_the_user_agent_is_the_one_given(from_127_0_0_1):
    assert {h.headers.get("User-Agent") for h in from_127_0_0_1.site_hits} == {USER_AGENT}


# 127.0.0.1 from a site on 127.0.0.2 ----------------------------------------------------------------


def test_a_utf16_robots_txt_declares_its_sitemaps(from_127_0_0_2, second_server):
    """A UTF-16 byte-order mark, and a relative ``Sitemap:`` line resolved against the robots.txt URL."""
    run, _ = from_127_0_0_2
    declared = run.tree.children_of(second_server.url("/robots.txt"))
    assert declared == [second_server.url(s.LOOPBACK_TRICKS), second_server.url(s.GOOD)]
    assert run.tree[second_server.url(s.GOOD)]["pages"] == 2


def test_loopback_in_every_disguise_is_refused_naming_127_0_0_1(from_127_0_0_2):
    """2130706433, 0x7f.0.0.1, 127.1, 017700000001, [::ffff:127.0.0.1], localhost, 127.0.0.1 itself, and
    http://2130706433/ on port 80: each refused, naming the address it resolved to."""
    run, targets = from_127_0_0_2
    for url in targets:
        node = run.tree[url]
        assert (node["status"], node["pages"]) == ("failed", 0), url
        assert "127.0.0.1" in node["error"], node["error"]
        assert node["error"].startswith("refused to connect to"), node["error"]
    assert run.target_hits == []
    assert run.run.returncode == 0

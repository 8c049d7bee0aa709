"""URL hygiene: what a job accepts, how URLs compare, and the patterns."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvester.urls import UrlFilter, in_scope, normalize, refusal, validate_pattern


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://example.com/a", None),
        ("HTTP://Example.COM/a", None),
        ("ftp://example.com/file", "not_http"),
        ("javascript:alert(1)", "not_http"),
        ("mailto:a@example.com", "not_http"),
        ("/relative/path", "not_http"),
        ("https://", "no_host"),
        ("https://example.com:99999/", "malformed"),
        ("https://example.com/a b", "malformed"),
        ("https://example.com/" + "x" * 2030, "too_long"),
        ("http://.xn--iaur-yva35b.lt", "malformed"),  # an empty label: no resolver answers that name
        ("http://www..example.com/a", "malformed"),
        ("http://.example.com:8080/a", "malformed"),
        ("http://example.com./a", None),  # (a trailing dot is a fully qualified name, not an empty label)
        ("http://[::1]:8080/a", None),
    ],
)
def test_refusal_reasons(url, reason):
    assert refusal(url) == reason


def test_normalize_keeps_path_and_query_but_not_fragments_or_default_ports():
    assert normalize("HTTPS://Example.COM:443/A?b=1&a=2#frag") == "https://example.com/A?b=1&a=2"
    assert normalize("http://example.com:8080") == "http://example.com:8080/"
    assert normalize("http://[::1]:80/x") == "http://[::1]/x"


@pytest.mark.parametrize(
    ("url", "scope", "ok"),
    [
        ("https://www.example.com/a", "same-host", True),
        ("https://blog.example.com/a", "same-host", False),
        ("https://blog.example.com/a", "same-domain", True),
        ("https://example.com/a", "same-domain", True),
        ("https://notexample.com/a", "same-domain", False),
        ("https://other.org/a", "any", True),
    ],
)
def test_scope(url, scope, ok):
    assert in_scope(url, "https://www.example.com/", scope) is ok


def test_patterns_glob_and_regex():
    f = UrlFilter.of(include=["*/blog/*", "re:/news/\\d+$"], exclude=["*.pdf"])
    assert f.refusal("https://e.x/blog/post") is None
    assert f.refusal("https://e.x/news/12") is None
    assert f.refusal("https://e.x/news/12/comments") == "not_included"
    assert f.refusal("https://e.x/blog/paper.pdf") == "excluded"
    assert UrlFilter().refusal("anything") is None


def test_a_bad_pattern_is_refused_with_its_reason():
    with pytest.raises(ValueError, match=r"'re:\(unclosed' is not a valid regular expression"):
        validate_pattern("re:(unclosed")
    with pytest.raises(ValueError, match="empty"):
        validate_pattern("")


# The plain-URL fast path must answer exactly as the general one ----------------------------------------

_PIECES = ["http", "https", "HTTP", "ftp", "://", ":/", "//", "a", "B", "é", "0", "9", ".", "-", "_", "@", ":",
           ":80", ":443", ":8080", ":08080", ":0443", ":00", ":99999", ":0", "/", "//", "?", "?a=1", "#", "#f",
           "[", "]", "[::1]", " ", "\t",
           "\u00a0", "\x00", "%20", "~", "x" * 300]  # fmt: skip


@given(st.lists(st.sampled_from(_PIECES), max_size=12))
@settings(max_examples=3000, deadline=None)
def test_the_fast_path_agrees_with_the_general_one(pieces):
    from harvester.urls import _normalize, _refusal

    for url in ("".join(pieces), "http://" + "".join(pieces), "https://h.example" + "".join(pieces)):
        assert refusal(url) == _refusal(url), url
        if _refusal(url) is None:
            assert normalize(url) == _normalize(url), url


def test_the_fast_path_takes_the_urls_sitemaps_list():
    from harvester.urls import _PLAIN

    for url in ("https://example.com/a/b.html", "http://127.0.0.1:8080/p?x=1&y=2", "https://a-b.example/"):
        assert _PLAIN.fullmatch(url) and refusal(url) is None and normalize(url) == url
    assert refusal("http://example.com:99999/") == "malformed" and refusal("http://EXAMPLE.com/") is None


@given(st.lists(st.sampled_from(_PIECES), max_size=12))
@settings(max_examples=2000, deadline=None)
def test_screen_is_refusal_then_normal_form_and_host(pieces):
    from harvester.urls import _normalize, _refusal, host_of, screen

    for url in ("".join(pieces), "http://" + "".join(pieces), "https://h.example" + "".join(pieces)):
        reason = _refusal(url)
        expected = reason if reason is not None else (_normalize(url), host_of(_normalize(url)))
        assert screen(url) == expected, url


def test_screen_takes_plain_urls_with_ports_in_one_match():
    from harvester.urls import _plain_normal, screen

    for url, host in (("http://127.0.0.1:8080/p?x=1", "127.0.0.1"), ("https://a.example:8443/", "a.example")):
        assert _plain_normal(url) is not None and screen(url) == (url, host)
    # default and zero-padded ports are not the normal form: the general path writes them out
    assert screen("http://a.example:80/x") == ("http://a.example/x", "a.example")
    assert screen("https://a.example:0443/x") == ("https://a.example/x", "a.example")
    assert screen("http://a.example:08080/x") == ("http://a.example:8080/x", "a.example")

"""Page sitemaps (<urlset>): the protocol fields, the extensions, and the leniency real files need."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from harvester.sitemap import Alternate, Image, NewsStory, PageEntry, PageMapObject, SitemapKind, Video

from .helpers import feed_in_pieces, fixture, urls, urlset

URL = "https://example.org/sitemap.xml"


def test_urlset_with_every_extension(parse):
    entries, report = parse(URL, fixture("urlset_extensions.xml"))
    assert report.kind is SitemapKind.URLSET
    assert report.error is None
    assert report.truncated is None
    assert all(isinstance(entry, PageEntry) for entry in entries)
    kettle, story, grilling = entries

    assert kettle.url == "https://shop.example.org/products/kettle"
    assert kettle.last_modified == datetime(2024, 3, 5, 14, 30, tzinfo=timezone(timedelta(hours=1)))
    assert kettle.change_frequency == "weekly"
    assert kettle.priority == 0.8
    assert kettle.images == (
        Image(
            loc="https://cdn.example.org/kettle-front.jpg",
            caption="The kettle, from the front",
            title="Kettle",
            geo_location="Lyon, France",
            license="https://example.org/image-license",
        ),
        Image(loc="https://cdn.example.org/kettle-side.jpg"),
    )
    # Only links with rel="alternate", hreflang and href all present.
    assert kettle.alternates == (
        Alternate(hreflang="fr", href="https://shop.example.org/fr/produits/bouilloire"),
        Alternate(hreflang="x-default", href="https://shop.example.org/products/kettle"),
    )
    assert kettle.news is None
    assert kettle.videos == ()

    assert story.news == NewsStory(
        title="Budget passes, with amendments",
        publication_name="The Example Times",
        publication_language="en",
        publication_date=datetime(2024, 3, 5, tzinfo=UTC),
        keywords=("budget", "parliament", "economy"),
        genres=("PressRelease", "Blog"),
        access="Subscription",
        stock_tickers=("NASDAQ:AMAT", "BOM:500325"),
    )
    assert story.priority == 0.5
    assert story.last_modified is None
    assert story.change_frequency is None

    plus8 = timezone(timedelta(hours=8))
    assert grilling.priority == 1.0
    assert grilling.videos == (
        Video(
            thumbnail_loc="https://video.example.org/thumbs/123.jpg",
            title="Grilling steaks for summer",
            description="Alkis shows you how to get perfectly done steaks every time",
            content_loc="https://video.example.org/video123.mp4",
            player_loc="https://video.example.org/videoplayer.php?video=123",
            duration=600,
            expiration_date=datetime(2031, 11, 5, 19, 20, 30, tzinfo=plus8),
            rating=4.2,
            view_count=12345,
            publication_date=datetime(2007, 11, 5, 19, 20, 30, tzinfo=plus8),
            family_friendly=True,
            requires_subscription=False,
            live=False,
            tags=("steak", "meat", "summer"),
            category="Cooking",
            uploader="GrillyMcGrillerson",
        ),
        # Unreadable values become None rather than costing the video or the page.
        Video(title="Second video", duration=None, rating=None),
    )


def test_extensions_are_json_ready(parse):
    entries, _ = parse(URL, fixture("urlset_extensions.xml"))
    as_json = entries[0].to_json()
    assert as_json["last_modified"] == "2024-03-05T14:30:00+01:00"
    assert as_json["images"][1] == {"loc": "https://cdn.example.org/kettle-side.jpg"}
    assert entries[2].to_json()["videos"][0]["tags"] == ["steak", "meat", "summer"]


@pytest.mark.parametrize("name", ["urlset_prefixed.xml", "urlset_google_namespace.xml", "urlset_no_namespace.xml"])
def test_namespaces_prefixed_wrong_or_missing(parse, name):
    entries, report = parse(URL, fixture(name))
    assert report.kind is SitemapKind.URLSET
    assert report.error is None
    assert report.truncated is None
    assert len(entries) == 2
    first = entries[0]
    assert first.last_modified is not None
    assert first.change_frequency in {"daily", "monthly"}
    assert first.priority == 0.3


def test_undeclared_prefixes_are_fine(parse):
    """Expat with namespace processing would stop at the undeclared image: prefix; local names don't care."""
    entries, _ = parse(URL, fixture("urlset_no_namespace.xml"))
    assert entries[1].images == (Image("https://example.org/undeclared-prefix.png"),)


@pytest.mark.parametrize("name", ["urlset_utf16.xml", "urlset_latin1.xml"])
def test_declared_encodings(parse, name):
    entries, report = parse(URL, fixture(name))
    assert report.error is None
    assert report.truncated is None
    assert urls(entries) == ["https://example.org/café/crème-brûlée", "https://example.org/naïve"]
    assert entries[0].last_modified == datetime(2024, 2, 29, tzinfo=UTC)


def test_windows_1252_is_decoded_through_python_codecs(parse):
    document = (
        '<?xml version="1.0" encoding="windows-1252"?><urlset><url><loc>https://example.org/€</loc></url></urlset>'
    )
    entries, _ = parse(URL, document.encode("cp1252"))
    assert urls(entries) == ["https://example.org/€"]


def test_utf8_document_declaring_utf16_is_read_by_its_bytes(parse):
    document = '<?xml version="1.0" encoding="UTF-16"?><urlset><url><loc>https://example.org/ü</loc></url></urlset>'
    entries, report = parse(URL, document.encode())
    assert urls(entries) == ["https://example.org/ü"]
    assert report.warnings == {"wrong_declared_encoding": 1}


def test_multibyte_declared_encoding_is_refused_with_a_reason(parse):
    document = b'<?xml version="1.0" encoding="Shift_JIS"?><urlset/>'
    _, report = parse(URL, document)
    assert report.error is not None
    assert "multi-byte" in report.error


def test_cdata_entities_and_whitespace_are_cleaned(parse):
    entries, report = parse(URL, fixture("urlset_messy_text.xml"))
    assert urls(entries) == [
        "https://example.org/cdata?a=1&b=2",
        "https://example.org/entities?a=1&b=2&c=3",
        "https://example.org/newlines",
        "https://example.org/unicode-spaces",
        "https://example.org/cdata-in-spaces",
        "https://example.org/split-cdata-and-&-text",
        "https://example.org/html-entity",
    ]
    newlines = entries[2]
    assert newlines.last_modified == datetime(2024, 1, 2, tzinfo=UTC)
    assert newlines.change_frequency == "daily"
    assert newlines.priority == 0.9
    # Two <url>s without a usable <loc>, and one HTML entity expat does not know.
    assert report.warnings == {"missing_loc": 2, "undefined_entity": 1}


def test_html_entities_are_read_rather_than_fatal(parse):
    document = (
        b"<urlset><url><loc>https://example.org/a</loc><image:image>"
        b"<image:loc>https://example.org/i.png</image:loc>"
        b"<image:title>Caf&eacute; &amp; cr&egrave;me&hellip;</image:title></image:image></url>"
        b"<url><loc>https://example.org/b</loc></url></urlset>"
    )
    entries, report = parse(URL, document)
    assert urls(entries) == ["https://example.org/a", "https://example.org/b"]
    assert entries[0].images[0].title == "Café & crème…"
    assert report.truncated is None
    assert report.warnings == {"undefined_entity": 3}


@pytest.mark.parametrize(
    ("priority", "expected", "warned"),
    [
        ("0.0", 0.0, False),
        ("1", 1.0, False),
        (".25", 0.25, False),
        ("1.5", 0.5, True),
        ("-0.1", 0.5, True),
        ("high", 0.5, True),
        ("nan", 0.5, True),
        ("", 0.5, False),
    ],
)
def test_priority(parse, priority, expected, warned):
    document = f"<urlset><url><loc>https://example.org/</loc><priority>{priority}</priority></url></urlset>"
    entries, report = parse(URL, document.encode())
    assert entries[0].priority == expected
    assert ("invalid_priority" in report.warnings) is warned


def test_unknown_changefreq_and_bad_lastmod_are_dropped_with_a_warning(parse):
    document = (
        b"<urlset><url><loc>https://example.org/</loc><changefreq>fortnightly</changefreq>"
        b"<lastmod>yesterday</lastmod></url></urlset>"
    )
    entries, report = parse(URL, document)
    assert entries == [PageEntry("https://example.org/")]
    assert report.warnings == {"invalid_changefreq": 1, "invalid_lastmod": 1}


def test_unknown_elements_and_attributes_are_ignored_and_a_pagemap_attribute_is_no_field(parse):
    document = b"""<urlset xmlns:mobile="http://www.google.com/schemas/sitemap-mobile/1.0" xmlns:pm="urn:x">
      <url><loc>https://example.org/a</loc><mobile:mobile/><x:unknown a="1">text</x:unknown>
        <pm:PageMap><pm:DataObject type="x">
          <pm:Attribute name="loc">https://example.org/not-the-loc</pm:Attribute>
        </pm:DataObject></pm:PageMap>
      </url>
    </urlset>"""
    entries, _ = parse(URL, document)
    assert entries == [
        PageEntry(
            "https://example.org/a",
            mobile=True,
            pagemap=(PageMapObject("x", attributes={"loc": "https://example.org/not-the-loc"}),),
        )
    ]


def test_first_loc_wins_and_entries_keep_document_order(parse):
    document = (
        b"<urlset><url><loc>https://example.org/1</loc><loc>https://example.org/ignored</loc>"
        b"</url><url><loc>https://example.org/2</loc></url><url><loc>https://example.org/1"
        b"</loc></url></urlset>"
    )
    entries, _ = parse(URL, document)
    # Duplicates are the engine's to drop (it counts them); the parser reports what the document says.
    assert urls(entries) == ["https://example.org/1", "https://example.org/2", "https://example.org/1"]


def test_urls_are_reported_as_written_even_when_the_engine_will_refuse_them(parse):
    document = b"<urlset><url><loc>ftp://example.org/file</loc></url><url><loc>/relative</loc></url></urlset>"
    entries, _ = parse(URL, document)
    assert urls(entries) == ["ftp://example.org/file", "/relative"]


def test_nested_root_name_does_not_end_the_document(parse):
    document = (
        b"<urlset><url><loc>https://example.org/1</loc><urlset/></url><url>"
        b"<loc>https://example.org/2</loc></url></urlset>"
    )
    entries, report = parse(URL, document)
    assert urls(entries) == ["https://example.org/1", "https://example.org/2"]
    assert report.truncated is None


def test_parsed_extension_objects_are_ordinary_frozen_values(parse):
    document = (
        b"<urlset><url><loc>https://example.org/</loc>"
        b"<image:image><image:loc>https://example.org/i.png</image:loc></image:image>"
        b'<xhtml:link rel="alternate" hreflang="de" href="https://example.org/de"/></url></urlset>'
    )
    [entry], _ = parse(URL, document)
    [image], [alternate] = entry.images, entry.alternates
    assert type(image) is Image
    assert type(alternate) is Alternate
    assert image == Image("https://example.org/i.png")
    assert hash(image) == hash(Image("https://example.org/i.png"))
    assert alternate == Alternate("de", "https://example.org/de")
    assert hash(alternate) == hash(Alternate("de", "https://example.org/de"))
    with pytest.raises(AttributeError):
        image.loc = "changed"  # type: ignore[misc]


def test_wrong_declared_encoding_in_a_large_document_fed_at_once(parse):
    document = urlset(2000).replace(b'encoding="UTF-8"', b'encoding="UTF-16"')
    assert len(document) > 64 * 1024
    entries, report = parse(URL, document)
    assert len(entries) == 2000
    assert report.warnings == {"wrong_declared_encoding": 1}
    assert feed_in_pieces(URL, document, 1000) == (entries, report)


def test_an_entry_element_wrapping_the_text_of_a_loc_is_read_as_that_text():
    """``<loc><url><![CDATA[…]]></url></loc>`` (seen on a jobs site): the page is read, with its lastmod; the
    inner ``<url>`` did start a new entry, and the page was lost as ``missing_loc``."""
    from harvester.sitemap import parse_bytes

    document = (
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc><url>'
        b"<![CDATA[http://jobs.example.com/2333221]]></url></loc><lastmod>2015-04-28</lastmod></url>"
        b"<url><loc>http://jobs.example.com/2</loc></url></urlset>"
    )
    entries, report = parse_bytes("http://jobs.example.com/sitemap.xml", document)
    assert [(e.url, e.last_modified) for e in entries] == [
        ("http://jobs.example.com/2333221", datetime(2015, 4, 28, tzinfo=UTC)),
        ("http://jobs.example.com/2", None),
    ]
    assert report.warnings == {}

"""What the peers read that a sitemap or a feed says beyond the protocol: a video's TV show and content
segments, Mobile and PageMap (crawler-commons), a feed item's title and date as its news story
(ultimate-sitemap-parser), and a feed item's Google News data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from harvester.sitemap import (
    ContentSegment,
    NewsStory,
    PageEntry,
    PageMapObject,
    SitemapKind,
    TvShow,
    Video,
    parse_bytes,
)
from harvester.sitemap.entries import from_json
from harvester.sitemap.xml_parser import XmlParser

from .helpers import fixture

URL = "https://example.org/sitemap.xml"

# crawler-commons, src/test/java/crawlercommons/sitemaps/SiteMapParserExtensionTest.java,
# testVideosSitemapTVShow, on its src/test/resources/sitemaps/extension/sitemap-videos-tvshow.xml.
TV_SHOW_VIDEO = Video(
    thumbnail_loc="https://example.org/my-tv-show.jpg",
    title="My TV Show! - Thu, Jun 05, 2025",
    description="Dummy description",
    content_loc="https://example.org/video/video/23-13.mp4",
    player_loc="https://example.org/video/embed/23-13",
    duration=2459,
    expiration_date=datetime(2025, 6, 13, 9, tzinfo=UTC),
    publication_date=datetime(2025, 6, 6, 9, tzinfo=UTC),
    requires_subscription=True,
    tags=("talkshow", "interview", "example"),
    category="My TV Show!",
    content_segments=(
        ContentSegment("https://example.org/video/video/23-13-1.mp4", 1287),
        ContentSegment("https://example.org/video/video/23-13-2.mp4", 1172),
    ),
    tvshow=TvShow(
        show_title="My TV Show!",
        video_type="full",
        episode_title="Thu, Jun 05, 2025",
        season_number=23,
        episode_number=13,
        premier_date=datetime(2025, 6, 5, 21, tzinfo=UTC),
    ),
)


def test_a_videos_tv_show_and_content_segments(parse):
    # crawler-commons SiteMapParserExtensionTest.testVideosSitemapTVShow (fixture cc_sitemap-videos-tvshow.xml).
    entries, report = parse(URL, fixture("cc_sitemap-videos-tvshow.xml"))
    assert report.kind is SitemapKind.URLSET and report.warnings == {}
    [entry] = entries
    assert entry.url == "https://example.org/my-tv-show/23/13/"  # (its <loc> written after the video)
    assert entry.videos == (TV_SHOW_VIDEO,)


def test_tv_show_fields_outside_a_tvshow_and_a_tvshow_outside_a_video_are_no_tv_show(parse):
    document = (
        b"<urlset><url><loc>https://example.org/a</loc><video:video><video:show_title>x</video:show_title>"
        b'<video:content_segment_loc duration="nope"> https://example.org/s.mp4 </video:content_segment_loc>'
        b"<video:content_segment_loc/></video:video>"
        b"<video:tvshow><video:show_title>y</video:show_title></video:tvshow></url></urlset>"
    )
    [entry], _ = parse(URL, document)
    assert entry.videos == (Video(content_segments=(ContentSegment("https://example.org/s.mp4"),)),)


def test_mobile_pages(parse):
    # crawler-commons SiteMapParserExtensionTest.testMobileSitemap (fixture cc_sitemap-mobile.xml): the
    # element empty or closed, both mark the page; a page without it is not marked.
    entries, _ = parse(URL, fixture("cc_sitemap-mobile.xml"))
    assert [(e.url, e.mobile) for e in entries] == [
        ("http://www.example.com/mobile-friendly-1/", True),
        ("http://www.example.com/mobile-friendly-2/", True),
        ("http://www.example.com/no-mobile/", False),
    ]
    assert entries[0].extensions() == {"mobile": True} and entries[2].extensions() == {}


def test_pagemap_data_objects_with_their_attributes(parse):
    # crawler-commons SiteMapParserExtensionTest.testPageMapSitemap (fixture cc_pagemaps-sitemap.xml).
    foo, bar = parse(URL, fixture("cc_pagemaps-sitemap.xml"))[0]
    assert foo.pagemap == (
        PageMapObject("document", "one", {"name": "Doc One", "review": "3.5"}),
        PageMapObject("image", None, {"image_src": "http://www.example.com/foo.gif"}),
    )
    assert bar.pagemap == (PageMapObject("document", "two", {"name": "Doc Two", "review": "4.0"}),)


def test_pagemap_attribute_values_given_as_attributes_and_lonesome_elements(parse):
    # crawler-commons PageMapsHandler: an <Attribute>'s value is its text, else its value="" attribute; a
    # DataObject outside a PageMap and an Attribute outside a DataObject are ignored.
    document = b"""<urlset><url><loc>https://example.org/a</loc>
      <DataObject type="lonesome"><Attribute name="a">1</Attribute></DataObject>
      <PageMap><Attribute name="b">2</Attribute>
        <DataObject type="thing" id="t1"><Attribute name="c" value="three"/><Attribute name="d" value="x">four
        </Attribute><Attribute>no name</Attribute><Attribute name="c" value="again"></Attribute></DataObject>
      </PageMap></url></urlset>"""
    [entry], _ = parse(URL, document)
    assert entry.pagemap == (PageMapObject("thing", "t1", {"c": "again", "d": "four"}),)


def test_the_new_extensions_go_to_json_and_back():
    """What ``extensions()`` makes of them (a job record keeps that) reads back as the parser's values."""
    entry = PageEntry(
        "https://example.org/a",
        videos=(TV_SHOW_VIDEO,),
        mobile=True,
        pagemap=(PageMapObject("document", "one", {"name": "Doc One"}), PageMapObject("image")),
    )
    data = entry.extensions()
    assert data["mobile"] is True
    assert data["pagemap"] == [{"type": "document", "id": "one", "attributes": {"name": "Doc One"}}, {"type": "image"}]
    [video] = data["videos"]
    assert video["content_segments"][0] == {"loc": "https://example.org/video/video/23-13-1.mp4", "duration": 1287}
    assert video["tvshow"]["premier_date"] == "2025-06-05T21:00:00+00:00"
    assert from_json(Video, video) == TV_SHOW_VIDEO
    assert [from_json(PageMapObject, o) for o in data["pagemap"]] == list(entry.pagemap)


def test_a_block_with_the_new_elements_reads_the_same_without_the_plain_block_reader(monkeypatch):
    document = (
        fixture("cc_sitemap-videos-tvshow.xml").replace(b"</urlset>", b"")
        + fixture("cc_pagemaps-sitemap.xml").split(b"-->", 1)[1].replace(b"</urlset>", b"")
        + fixture("cc_sitemap-mobile.xml").split(b'1.0">', 1)[1]
    )
    read = {}
    for plain in (True, False):
        monkeypatch.setattr(XmlParser, "read_plain_blocks", plain)
        read[plain] = parse_bytes(URL, document)
    assert read[True] == read[False]
    entries = read[True][0]
    assert len(entries) == 6 and entries[0].videos == (TV_SHOW_VIDEO,) and entries[3].mobile and entries[1].pagemap


# ultimate-sitemap-parser, tests/tree/test_rss_atom.py, test_sitemap_tree_for_homepage_rss_atom: its three
# feeds, each item kept with its title as its news story's title and its date as the story's publish date.
USP_DATE_RFC2822 = "Thu, 17 Dec 2009 12:04:56 +0200"  # (tests/tree/base.py: TEST_DATE_STR_RFC2822 and _ISO8601)
USP_DATE_ISO8601 = "2009-12-17T12:04:56+02:00"
USP_DATE = datetime(2009, 12, 17, 12, 4, 56, tzinfo=timezone(timedelta(hours=2)))
BASE = "http://test_ultimate-sitemap-parser.com"
USP_RSS = f"""<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0"><channel>
  <title>Test RSS 2.0 feed</title><description>This is a test RSS 2.0 feed.</description>
  <link>{BASE}</link><pubDate>{USP_DATE_RFC2822}</pubDate>
  <item><title>Test RSS 2.0 story #1</title><description>This is a test RSS 2.0 story #1.</description>
    <link>{BASE}/rss_story_1.html</link><guid isPermaLink="true">{BASE}/rss_story_1.html</guid>
    <pubDate>{USP_DATE_RFC2822}</pubDate></item>
  <item><title>Test RSS 2.0 story #2</title><description>This is a test RSS 2.0 story #2.</description>
    <link>{BASE}/rss_story_2.html</link><guid isPermaLink="true">{BASE}/rss_story_2.html</guid>
    <pubDate>{USP_DATE_RFC2822}</pubDate></item>
</channel></rss>"""
USP_ATOM_03 = f"""<?xml version="1.0" encoding="UTF-8"?>
<feed version="0.3" xmlns="http://purl.org/atom/ns#">
  <title>Test Atom 0.3 feed</title><link rel="alternate" type="text/html" href="{BASE}" />
  <modified>{USP_DATE_ISO8601}</modified>
  <entry><title>Test Atom 0.3 story #1</title>
    <link rel="alternate" type="text/html" href="{BASE}/atom_0_3_story_1.html" />
    <id>{BASE}/atom_0_3_story_1.html</id><issued>{USP_DATE_ISO8601}</issued></entry>
  <entry><title>Test Atom 0.3 story #2</title>
    <link rel="alternate" type="text/html" href="{BASE}/atom_0_3_story_2.html" />
    <id>{BASE}/atom_0_3_story_2.html</id><issued>{USP_DATE_ISO8601}</issued></entry>
</feed>"""
USP_ATOM_1 = "".join(
    f"""<entry><title>Test Atom 1.0 story #{n}</title>
    <link href="{BASE}/atom_1_0_story_{n}.html" />
    <link rel="alternate" type="text/html" href="{BASE}/atom_1_0_story_{n}.html?alt" />
    <link rel="edit" href="{BASE}/atom_1_0_story_{n}.html?edit" />
    <id>{BASE}/atom_1_0_story_{n}.html</id><updated>{USP_DATE_ISO8601}</updated>
    <summary>This is test atom 1.0 story #{n}.</summary>
    <content type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml"><p>This is test atom 1.0 story #{n}.</p></div>
    </content><author><name>John Doe</name><email>johndoe@example.com</email></author></entry>"""
    for n in (1, 2)
)


@pytest.mark.parametrize(
    ("document", "name"),
    [
        (USP_RSS, "rss_story_{n}.html"),
        (USP_ATOM_03, "atom_0_3_story_{n}.html"),
        (
            '<?xml version="1.0" encoding="UTF-8"?><feed xmlns="http://www.w3.org/2005/Atom"><title>Test Atom 1.0 feed'
            f'</title><link href="{BASE}/sitemap_atom_1_0.xml" rel="self" /><link href="{BASE}" /><id>{BASE}</id>'
            f"<updated>{USP_DATE_ISO8601}</updated>{USP_ATOM_1}</feed>",
            "atom_1_0_story_{n}.html",
        ),
    ],
    ids=["rss2", "atom03", "atom1"],
)
def test_feed_items_keep_their_title_and_date_as_their_news_story(parse, document, name):
    entries, _ = parse(URL, document.encode())
    kind = {"rss": "RSS 2.0", "ato": "Atom 0.3" if "0_3" in name else "Atom 1.0"}[name[:3]]
    assert [(e.url, e.news) for e in entries] == [
        (f"{BASE}/{name.format(n=n)}", NewsStory(title=f"Test {kind} story #{n}", publication_date=USP_DATE))
        for n in (1, 2)
    ]
    assert entries[0].news.publish_date == USP_DATE  # (USP's name for it)


def test_a_feed_items_title_falls_back_to_its_description_and_html_entities_are_decoded(parse):
    # ultimate-sitemap-parser fetch_parse.py PagesRSSSitemapParser.Page.page(): title or description,
    # html_unescape_strip'd; an item with neither has no story (USP drops the item; the page is kept here).
    document = b"""<rss><channel>
      <item><link>https://example.org/a</link><description>Tom &amp;amp; Jerry</description></item>
      <item><link>https://example.org/b</link><pubDate>Tue, 10 Oct 2017 14:41:05 GMT</pubDate></item>
    </channel></rss>"""
    a, b = parse(URL, document)[0]
    assert a.news == NewsStory(title="Tom & Jerry")
    assert b.news is None and b.last_modified == datetime(2017, 10, 10, 14, 41, 5, tzinfo=UTC)


def test_a_feed_items_google_news_is_read_as_a_news_sitemaps(parse):
    news = (
        "<news:news><news:publication><news:name>The Example Times</news:name><news:language>en</news:language>"
        "</news:publication><news:publication_date>2024-03-05</news:publication_date>"
        "<news:title>Budget passes</news:title><news:keywords>budget, parliament</news:keywords></news:news>"
    )
    story = NewsStory(
        title="Budget passes",
        publication_name="The Example Times",
        publication_language="en",
        publication_date=datetime(2024, 3, 5, tzinfo=UTC),
        keywords=("budget", "parliament"),
    )
    rss = (
        f"<rss><channel><item><title>Item title</title><link>https://example.org/a</link>{news}</item></channel></rss>"
    )
    atom = (
        '<feed xmlns="http://www.w3.org/2005/Atom"><entry><title>Entry title</title>'
        f'<link href="https://example.org/a"/>{news}</entry></feed>'
    )
    for document in (rss, atom):
        [entry], _ = parse(URL, document.encode())
        assert entry.news == story, document
        assert entry.extensions()["news"]["publication_name"] == "The Example Times"

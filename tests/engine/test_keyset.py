"""KeySet, the 12-bytes-a-key set of URL keys: exact membership through growth and colliding slots."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvester.keyset import KeySet, bits_of, url_bits
from harvester.model.records import url_key


@given(st.lists(st.integers(0, 2**96 - 1) | st.sampled_from([0, 1, 2**64, 2**64 + 1, 2**95, 2**96 - 1]), max_size=300))
@settings(max_examples=300, deadline=None)
def test_add_says_whether_a_key_is_new_exactly_as_a_set_does(keys):
    seen: set[int] = set()
    keyset = KeySet()
    for key in keys:
        assert (key in keyset) == (key in seen), key
        assert keyset.add(key) == (key not in seen), key
        seen.add(key)
        assert key in keyset
    assert len(keyset) == len(seen)


@given(st.lists(st.lists(st.integers(0, 2**96 - 1) | st.sampled_from([0, 1, 2**64, 2**95]), max_size=3000), max_size=4))
@settings(max_examples=100, deadline=None)
def test_take_says_which_keys_are_new_as_add_does_one_by_one(batches):
    """Batches of keys (repeats within and across them, growth mid-batch) taken at once and added one at a
    time: the same positions new, the same members."""
    taking, adding = KeySet(), KeySet()
    for keys in batches:
        assert taking.take(keys) == [n for n, key in enumerate(keys) if adding.add(key)]
        assert len(taking) == len(adding)
    assert all(key in taking for keys in batches for key in keys)


def test_a_batch_with_a_key_beyond_96_bits_keeps_the_keys_before_it():
    keyset, taken = KeySet(), []
    with pytest.raises(OverflowError):
        keyset.take([5, 6, 2**96 + 7, 8], taken)
    assert len(keyset) == 2 and 5 in keyset and 6 in keyset and 8 not in keyset
    assert taken == [0, 1]  # (what a caller undoing the batch discards)


_CROWDED = (
    st.integers(0, 40)  # neighbouring home slots: runs
    | st.builds(lambda high, low: (high << 64) | low, st.integers(1, 9), st.integers(4090, 4095))  # wrapping runs
    | st.integers(0, 2**96 - 1)
)


@given(st.lists(st.tuples(st.booleans(), _CROWDED), max_size=400))
@settings(max_examples=300, deadline=None)
def test_discard_takes_a_key_out_and_leaves_every_other_reachable(steps):
    """Small keys crowd a few slots, so discards open holes inside long probing runs."""
    seen: set[int] = set()
    keyset = KeySet()
    for add, key in steps:
        if add:
            assert keyset.add(key) == (key not in seen)
            seen.add(key)
        else:
            keyset.discard(key)
            seen.discard(key)
        assert len(keyset) == len(seen)
    assert all(key in keyset for key in seen)
    assert not any(key in keyset for _, key in steps if key not in seen)


def test_a_discarded_key_in_the_middle_of_a_run_leaves_the_rest_reachable():
    keyset = KeySet()
    twins = [(high << 64) | 7 for high in range(1, 50)]  # one home slot: one long run
    for key in twins:
        keyset.add(key)
    for key in twins[::2]:
        keyset.discard(key)
    assert [key in keyset for key in twins] == [i % 2 == 1 for i in range(len(twins))]


def test_keys_that_share_a_slot_or_a_half_stay_apart_through_growth():
    keyset = KeySet()
    low_twins = [(high << 64) | 7 for high in range(1, 3000)]  # one slot for all of them: probing
    high_twins = [(5 << 64) | low for low in range(0, 3000 * 4096, 4096)]  # the same high half
    for key in low_twins + high_twins:
        assert keyset.add(key)
    assert all(not keyset.add(key) for key in low_twins + high_twins)
    assert all(key in keyset for key in low_twins + high_twins)
    assert (3001 << 64) | 7 not in keyset and (5 << 64) | 1 not in keyset  # twins never added
    assert len(keyset) == 5999


def test_url_keys_of_a_large_site():
    keyset = KeySet()
    urls = [f"https://example.com/p/{i}" for i in range(100_000)]
    assert all(keyset.add(bits_of(url_key(u))) for u in urls)
    random.seed(1)
    assert not any(keyset.add(bits_of(url_key(u))) for u in random.sample(urls, 1000))
    assert keyset.add(bits_of(url_key("https://example.com/p/100000")))


def test_a_key_beyond_96_bits_is_refused_and_changes_nothing():
    keyset = KeySet()
    keyset.add(5)
    with pytest.raises(OverflowError):
        keyset.add(2**96 + 7)
    assert len(keyset) == 1 and 7 not in keyset and 5 in keyset
    assert bits_of("0123456789abcdef0123456789abcdef") == 0x0123456789ABCDEF01234567


def test_a_urls_bits_made_without_its_key_are_its_keys_bits():
    """A throwaway run de-duplicates on url_bits (no key text made); a durable one on bits_of(url_key(...)):
    the same 96 bits for any URL, so both de-duplicate alike."""
    for url in ["https://example.com/", "https://例え.jp/ä?q=1#x", "http://127.0.0.1:8080/p/" + "z" * 2000]:
        raw = url_bits(url)
        assert len(raw) == 12 and int.from_bytes(raw) == bits_of(url_key(url))

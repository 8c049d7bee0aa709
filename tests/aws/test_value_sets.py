"""Sets stored apart from the item that names them (``value_sets.py``), on the stack's state table: a few
values inline, many in items of their own read back whole by any container, and collected once no item
names them (a part item collecting its earlier adoptions' sets when a part is put: test_sitemap_parts.py)."""

from __future__ import annotations

from typing import Any

import pytest

from harvester.adapters.aws import AwsAdapters, value_sets
from harvester.adapters.aws.value_sets import ValueSets
from harvester.model.records import key_of
from tests.contract.test_sitemap_parts import stored_items

PK = "CRAWL#https://example.test"


@pytest.fixture
def table(deployed_stack: Any) -> tuple[Any, str]:
    stack, _ = deployed_stack
    adapters = AwsAdapters.from_env(stack.function("PageFunction").environment)
    return adapters.store.client, adapters.store.table


def test_a_few_values_stay_inline_and_many_are_stored_apart_and_read_back_whole(table):
    client, name = table
    sets = ValueSets(client, name)
    few = {f"{i:032x}" for i in range(value_sets.INLINE)}
    assert sets.value(PK, "KEYS#a#", few) == {"SS": sorted(few)}
    assert sets.read(PK, "KEYS#a#", {"SS": sorted(few)}) == few
    many = {key_of(f"https://example.test/{i}") for i in range(40_000)}  # (1.3 MB as text: several items)
    ref = sets.value(PK, "KEYS#a#", many)
    assert value_sets.is_ref(ref)
    items = stored_items(client, name, PK, "KEYS#a#")
    assert len(items) >= 2, items
    assert ValueSets(client, name).read(PK, "KEYS#a#", ref) == many  # (another container: read from the table)
    assert sets.value(PK, "KEYS#a#", set(many)) == ref  # (the same set: the same items, named the same)
    assert stored_items(client, name, PK, "KEYS#a#") == items


def test_a_stored_set_missing_an_item_is_an_error_naming_it(table):
    client, name = table
    ref = ValueSets(client, name).value(PK, "KEYS#b#", {f"{i:032x}" for i in range(100)})
    first = stored_items(client, name, PK, "KEYS#b#")[0]
    client.delete_item(TableName=name, Key={"pk": {"S": PK}, "sk": {"S": first}})
    with pytest.raises(LookupError, match="KEYS#b#"):
        ValueSets(client, name).read(PK, "KEYS#b#", ref)


def test_sets_no_item_names_are_collected_once_old_enough(table, monkeypatch):
    client, name = table
    sets = ValueSets(client, name)
    kept = sets.value(PK, "KEYS#c#", {f"k{i}" for i in range(100)})
    dropped = sets.value(PK, "KEYS#c#", {f"d{i}" for i in range(100)})
    other = sets.value(PK, "KEYS#d#", {f"o{i}" for i in range(100)})
    assert sets.collect(PK, "KEYS#c#", [kept]) == 0  # (too young: a write naming it may be in flight)
    monkeypatch.setattr(value_sets, "COLLECT_AFTER", -1)
    assert sets.collect(PK, "KEYS#c#", [kept, {"S": "plain"}]) == 1
    assert ValueSets(client, name).read(PK, "KEYS#c#", kept) == {f"k{i}" for i in range(100)}
    with pytest.raises(LookupError):
        ValueSets(client, name).read(PK, "KEYS#c#", dropped)
    assert len(ValueSets(client, name).read(PK, "KEYS#d#", other)) == 100  # (another prefix: another sitemap's)


def test_a_set_written_again_while_it_is_collected_stays(table):
    """A set no item names, old enough to go, written again (for a new reference) between the collection's
    reading of it and its deletion: the deletion, conditioned on the write time it read, leaves it."""
    client, name = table
    sets = ValueSets(client, name)
    values = {f"k{i}" for i in range(100)}
    ref = sets.value(PK, "KEYS#e#", values)
    (sk,) = stored_items(client, name, PK, "KEYS#e#")
    key = {"pk": {"S": PK}, "sk": {"S": sk}}
    client.update_item(
        TableName=name,
        Key=key,
        UpdateExpression="SET #at = :old",
        ExpressionAttributeNames={"#at": "at"},
        ExpressionAttributeValues={":old": {"N": "1"}},
    )

    class WrittenAgainFirst:
        def __getattr__(self, attribute: str) -> Any:
            return getattr(client, attribute)

        def delete_item(self, **kwargs: Any) -> Any:
            assert ValueSets(client, name).value(PK, "KEYS#e#", values) == ref
            return client.delete_item(**kwargs)

    sets.client = WrittenAgainFirst()
    assert sets.collect(PK, "KEYS#e#", []) == 0
    assert ValueSets(client, name).read(PK, "KEYS#e#", ref) == values

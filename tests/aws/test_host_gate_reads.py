"""The DynamoDB host gate's moves where several containers move one host (adapters/aws/host_gate.py): a
container whose views of the host keep turning out out of date reads the item before it moves, and so pays
a read, not a write that loses its race; a container alone on its host keeps moving on its own view."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from harvester.adapters.aws import AwsAdapters
from harvester.adapters.aws.host_gate import DynamoHostGate
from harvester.politeness import HostReport

HOST = "example.com"


@pytest.fixture
def aws(deployed_stack: Any) -> AwsAdapters:
    stack, _ = deployed_stack
    return AwsAdapters.from_env(stack.function("PageFunction").environment)


class Container:
    """A container's gate, with what it asked of DynamoDB: requests by operation, and writes refused."""

    def __init__(self, aws: AwsAdapters) -> None:
        self.gate = DynamoHostGate(aws.gate.client, aws.gate.table)
        self.calls: Counter[str] = Counter()
        self.gate.client = _Counted(aws.gate.client, self.calls)

    def batch(self, now: float) -> None:
        """A batch's moves: its arrival, and the release of what it was granted."""
        arrival = self.gate.arrive(HOST, [None] * 5, spacing=0.01, now=now)
        assert arrival.grant.starts, arrival  # (an idle host: granted)
        self.gate.release(HOST, arrival.grant, HostReport(sent=5, latency=0.05), spacing=0.01, now=now + 0.1)


class _Counted:
    def __init__(self, client: Any, calls: Counter[str]) -> None:
        self._client, self._calls = client, calls

    def get_item(self, **request: Any) -> Any:
        self._calls["get_item"] += 1
        return self._client.get_item(**request)

    def put_item(self, **request: Any) -> Any:
        self._calls["put_item"] += 1
        try:
            return self._client.put_item(**request)
        except self._client.exceptions.ConditionalCheckFailedException:
            self._calls["refused"] += 1
            raise


def test_a_container_alone_on_its_host_moves_it_without_reading(aws: AwsAdapters) -> None:
    alone = Container(aws)
    for i in range(10):
        alone.batch(1000.0 + i)
    assert alone.calls == Counter(put_item=20)  # (two moves a batch, a write each)


def test_containers_taking_turns_on_a_host_read_it_first_and_lose_almost_no_write(aws: AwsAdapters) -> None:
    """Two containers whose batches alternate: each one's view is out of date at every batch. After the
    first few refusals each reads first: a read and a write a move, not two writes."""
    a, b = Container(aws), Container(aws)
    for i in range(20):
        (a if i % 2 else b).batch(1000.0 + i)
    for container in (a, b):
        moves = 20  # (ten batches, two moves each)
        assert container.calls["refused"] <= 3, container.calls  # (until its views are known out of date)
        assert container.calls["put_item"] - container.calls["refused"] == moves
        assert container.calls["get_item"] >= moves - 4, container.calls


def test_a_container_left_alone_again_stops_reading_first(aws: AwsAdapters) -> None:
    a, b = Container(aws), Container(aws)
    for i in range(10):
        (a if i % 2 else b).batch(1000.0 + i)
    before = a.calls.copy()
    for i in range(10):
        a.batch(2000.0 + i)
    calls = a.calls - before
    assert calls["refused"] == 0 and calls["put_item"] == 20
    assert 0 < calls["get_item"] <= 8, calls  # (reads while its views still look out of date, then none)


def test_every_slot_held_on_an_out_of_date_view_is_looked_at_again_on_the_item(aws: AwsAdapters) -> None:
    """A container that last saw every slot of the host held does not tell its batch to wait for one before
    it reads the item: the batches holding them may have ended since."""
    a, b = Container(aws), Container(aws)
    held = b.gate.acquire(HOST, 8, spacing=0.0, now=1000.0)
    assert len(held.starts) == 8
    full = a.gate.arrive(HOST, [None] * 5, spacing=0.01, now=1000.1)
    assert full.every_slot_held
    b.gate.release(HOST, held, HostReport(sent=8, latency=0.08), spacing=0.0, now=1000.2)
    reads = a.calls["get_item"]
    arrival = a.gate.arrive(HOST, [None] * 5, spacing=0.01, now=1000.3)
    assert len(arrival.grant.starts) == 5 and a.calls["get_item"] == reads + 1

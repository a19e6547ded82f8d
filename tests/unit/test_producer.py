"""``contracts.producer.Producer``'s recovery paths, on a stand-in for aiokafka's producer:
a real broker cannot be made to answer ``OutOfOrderSequenceNumber`` on demand, or to
leave one record unacknowledged while it takes others. The broker outage itself, on a
real broker, is tests/integration/test_outage.py."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError, OutOfOrderSequenceNumber

from gpusched.contracts import producer as module
from gpusched.contracts.producer import Producer


class _Accumulator:
    def __init__(self) -> None:
        self.pending: list[asyncio.Future[Any]] = []
        self._batches: dict[str, list[Any]] = {}
        self._pending_batches: set[Any] = set()

    def fail_all(self, error: Exception) -> None:
        for future in self.pending:
            if not future.done():
                future.set_exception(error)


class _StandIn:
    """What Producer uses of AIOKafkaProducer. ``script`` says per producer made what
    its sends do: "ok" (acknowledged), "fatal" (the sender has died), "hang" (never
    acknowledged)."""

    script: list[str] = []
    made: list[_StandIn] = []

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.mode = self.script[len(self.made)]
        self.sent: list[bytes | None] = []
        self.stopped = False
        self._message_accumulator = _Accumulator()
        self.made.append(self)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, topic: str, value: bytes | None, **_: Any) -> asyncio.Future[Any]:
        if self.mode == "fatal":
            raise OutOfOrderSequenceNumber()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._message_accumulator.pending.append(future)
        self.sent.append(value)
        if self.mode == "ok":
            future.set_result(topic)
        return future


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> type[_StandIn]:
    monkeypatch.setattr(_StandIn, "made", [])
    monkeypatch.setattr(module, "AIOKafkaProducer", _StandIn)
    return _StandIn


async def test_a_dead_sender_is_replaced_and_the_record_sent_by_the_next(
    stand_in: type[_StandIn],
) -> None:
    stand_in.script = ["fatal", "ok"]
    producer = Producer("127.0.0.1:1")
    await producer.send_and_wait("t", b"x")
    first, second = stand_in.made
    assert first.stopped
    assert (first.sent, second.sent) == ([], [b"x"])
    assert producer.generation == 2
    assert second.options["enable_idempotence"] is True
    assert second.options["acks"] == "all"


async def test_an_unacknowledged_record_fails_after_the_timeout_and_is_dropped(
    stand_in: type[_StandIn],
) -> None:
    stand_in.script = ["hang", "ok"]
    producer = Producer("127.0.0.1:1", delivery_timeout_s=0.05)
    late = await producer.send("t", b"late")
    with pytest.raises(KafkaTimeoutError, match=r"not acknowledged within 0\.05 s"):
        await producer.delivered([late])
    assert stand_in.made[0].stopped  # closed at once: what it holds is not sent later
    assert isinstance(late.exception(), KafkaTimeoutError)
    await producer.send_and_wait("t", b"next")
    assert producer.generation == 2
    await producer.stop()
    assert stand_in.made[1].stopped


async def test_a_record_failed_after_the_producer_was_closed_logs_nothing(
    stand_in: type[_StandIn],
) -> None:
    """A close that outlasts its timeout fails what is left when it ends, after
    ``delivered`` has raised: asyncio must not log "Future exception was never
    retrieved" for it (the caller heard of it through the raised error)."""
    stand_in.script = ["hang"]
    producer = Producer("127.0.0.1:1", delivery_timeout_s=0.05)
    late = await producer.send("t", b"late")
    stand_in.made[0]._message_accumulator.pending.clear()  # not failed by the close
    with pytest.raises(KafkaTimeoutError):
        await producer.delivered([late])
    assert not late.done()
    logged: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: logged.append(context))
    late.set_exception(KafkaTimeoutError("producer closed"))  # when the close ends
    await asyncio.sleep(0)
    del late
    gc.collect()
    assert logged == []


async def _one_batch_sent() -> tuple[Any, Any, Any]:
    """aiokafka's own accumulator (no broker: the calls its sender makes), one record
    queued and its batch taken by the sender: (accumulator, record future, batch)."""
    from aiokafka.producer.message_accumulator import MessageAccumulator
    from aiokafka.structs import TopicPartition

    accumulator = MessageAccumulator(None, 16384, 0, 30)
    tp = TopicPartition("t", 0)
    record = await accumulator.add_message(tp, b"k", b"v", timeout=1)
    return accumulator, record, accumulator._pop_batch(tp)


def _fail(accumulator: Any) -> None:
    class _Holder:
        _message_accumulator = accumulator

    module._fail_pending(_Holder(), KafkaTimeoutError("closed"))


async def test_failing_a_batch_put_back_after_a_retry_logs_nothing() -> None:
    """A batch sent, then put back after a retriable error, is queued again but no longer
    pending; failing it without care runs a callback that raises KeyError (logged by
    asyncio)."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    try:
        accumulator, record, batch = await _one_batch_sent()
        accumulator.reenqueue(batch)  # a retriable error: queued again
        _fail(accumulator)
        await asyncio.sleep(0)  # the batch's callbacks run
        await asyncio.sleep(0)
        assert isinstance(record.exception(), KafkaTimeoutError)
        assert errors == []
    finally:
        loop.set_exception_handler(None)


async def test_a_request_that_fails_after_the_producer_was_failed_puts_nothing_back() -> None:
    """A batch in flight when the producer is failed, whose request then ends in a
    retriable error, is not queued again (the sender would raise KeyError putting it
    back, and end with an error)."""
    accumulator, record, batch = await _one_batch_sent()
    _fail(accumulator)
    await asyncio.sleep(0)  # the batch's callbacks run
    accumulator.reenqueue(batch)  # what the sender does after a retriable error
    assert isinstance(record.exception(), KafkaTimeoutError)
    assert not accumulator._batches

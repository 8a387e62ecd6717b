"""The ZeroMQ ↔ trio bridge over real sockets: sends queued while the owner delivers,
sends from other tasks sent in bursts, nothing lost, reordered or left waiting."""

from __future__ import annotations

import itertools

import trio
import zmq

from runtime.zmqtrio import FLUSH_EVERY, RECV_BATCH, TrioSocket

ENDPOINTS = itertools.count()


def _pair(ctx: zmq.Context) -> tuple[zmq.Socket, zmq.Socket]:
    """A bound ROUTER and a DEALER connected to it (inproc: no file, no port)."""
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    for sock in (router, dealer):
        sock.setsockopt(zmq.LINGER, 0)
    endpoint = f"inproc://zmqtrio-{next(ENDPOINTS)}"
    router.bind(endpoint)
    dealer.setsockopt(zmq.ROUTING_ID, b"client")
    dealer.connect(endpoint)
    return router, dealer


def test_echoes_sent_from_inside_a_delivered_batch_all_come_back_in_order() -> None:
    """A server that answers inside ``on_frames`` (its sends queue until the batch is
    flushed) answers every request of a flood larger than a batch, in order."""
    count = 3 * RECV_BATCH + FLUSH_EVERY // 2  # several full batches and a partial flush

    async def main() -> list[bytes]:
        ctx = zmq.Context()
        router, dealer = _pair(ctx)
        server = TrioSocket(router, lambda frames: server.send(frames))
        got: list[bytes] = []
        done = trio.Event()

        def on_echo(frames: list[bytes]) -> None:
            got.append(frames[0])
            if len(got) == count:
                done.set()

        client = TrioSocket(dealer, on_echo)
        try:
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(server.run)
                    nursery.start_soon(client.run)
                    for i in range(count):  # all at once: the server sees full batches
                        client.send([b"%d" % i])
                    await done.wait()
                    nursery.cancel_scope.cancel()
        finally:
            router.close()
            dealer.close()
            ctx.term()
        assert server.received == count and server.sent == count
        return got

    assert trio.run(main) == [b"%d" % i for i in range(count)]


def test_a_second_send_from_another_task_wakes_the_sleeping_owner_to_send_it() -> None:
    """With the owner asleep on its descriptor, a task's first send goes out at once and
    its next ones queue: they must still leave without any other traffic to wake it."""

    async def main() -> list[list[bytes]]:
        ctx = zmq.Context()
        router, dealer = _pair(ctx)
        got: list[list[bytes]] = []
        arrived = trio.Event()

        def on_request(frames: list[bytes]) -> None:
            got.append(frames[1:])
            if len(got) == 3:
                arrived.set()

        server = TrioSocket(router, on_request)
        client = TrioSocket(dealer, lambda frames: None)
        try:
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(server.run)
                    nursery.start_soon(client.run)
                    await trio.sleep(0.05)  # both owners asleep on their descriptors
                    client.send([b"first"])
                    client.send([b"second", b"two frames"])
                    client.send([b"third"])
                    assert client.pending >= 1  # the second waits for its owner
                    await arrived.wait()
                    nursery.cancel_scope.cancel()
        finally:
            router.close()
            dealer.close()
            ctx.term()
        return got

    assert trio.run(main) == [[b"first"], [b"second", b"two frames"], [b"third"]]


def test_many_tasks_asking_at_once_get_every_answer_of_their_own() -> None:
    """The client pattern of an actor: one task a request in flight, each woken by its
    answer and sending its next request (queued behind the first: a burst)."""
    lanes, rounds = 64, 20

    async def main() -> dict[bytes, list[int]]:
        ctx = zmq.Context()
        router, dealer = _pair(ctx)
        server = TrioSocket(router, lambda frames: server.send(frames))
        waiting: dict[bytes, trio.Event] = {}
        answers: dict[bytes, list[int]] = {}

        def on_answer(frames: list[bytes]) -> None:
            lane, seq = frames
            answers.setdefault(lane, []).append(int(seq))
            waiting.pop(lane).set()

        client = TrioSocket(dealer, on_answer)

        async def lane(name: bytes) -> None:
            for seq in range(rounds):
                done = waiting[name] = trio.Event()
                client.send([name, b"%d" % seq])
                await done.wait()

        try:
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(server.run)
                    nursery.start_soon(client.run)
                    async with trio.open_nursery() as asking:
                        for i in range(lanes):
                            asking.start_soon(lane, b"lane-%d" % i)
                    nursery.cancel_scope.cancel()
        finally:
            router.close()
            dealer.close()
            ctx.term()
        return answers

    answers = trio.run(main)
    assert len(answers) == lanes
    assert all(seqs == list(range(rounds)) for seqs in answers.values())

"""`tests.nodesim.process`: a paused process runs nothing until it resumes, a killed one never
runs again, and the twins' own timers belong to no process."""

from __future__ import annotations

import asyncio

from tests.nodesim.process import PROCESS, NeutralLoop, Process, ProcessLoop


def _run(loop: ProcessLoop, coro: object) -> None:
    loop.run_until_complete(coro)  # type: ignore[arg-type]


def test_a_paused_process_runs_nothing_until_it_resumes() -> None:
    loop = ProcessLoop()
    proc, other = Process("a", None), Process("b", None)
    seen: list[tuple[str, float]] = []

    async def ticker(name: str) -> None:
        for _ in range(5):
            await asyncio.sleep(1.0)
            seen.append((name, round(loop.time(), 6)))

    async def scenario() -> None:
        a = proc.spawn(ticker("a"))
        b = other.spawn(ticker("b"))
        await asyncio.sleep(2.5)
        loop.pause(proc)
        await asyncio.sleep(2.0)  # a's timers at 3 and 4 come due meanwhile: held
        assert [t for n, t in seen if n == "a"] == [1.0, 2.0]
        loop.resume(proc)
        await asyncio.gather(a, b)

    _run(loop, scenario())
    a_times = [t for n, t in seen if n == "a"]
    assert a_times == [1.0, 2.0, 4.5, 5.5, 6.5]  # resumed late, then on its own clock again
    assert [t for n, t in seen if n == "b"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert proc.disturbed == 1 and other.disturbed == 0
    loop.close()


def test_a_killed_process_never_runs_again() -> None:
    loop = ProcessLoop()
    proc = Process("a", None)
    seen: list[float] = []

    async def ticker() -> None:
        try:
            while True:
                await asyncio.sleep(1.0)
                seen.append(round(loop.time(), 6))
        finally:
            seen.append(-1.0)  # a killed process runs no finally

    async def scenario() -> None:
        task = proc.spawn(ticker())
        await asyncio.sleep(2.5)
        loop.kill(proc)
        await asyncio.sleep(5.0)
        assert not task.done()

    _run(loop, scenario())
    assert seen == [1.0, 2.0]
    loop.close()


def test_the_twins_timers_belong_to_no_process() -> None:
    loop = ProcessLoop()
    neutral = NeutralLoop(loop)
    proc = Process("a", None)
    owners: list[object] = []

    async def in_process() -> None:
        neutral.call_later(1.0, lambda: owners.append(PROCESS.get()))
        loop.call_later(1.0, lambda: owners.append(PROCESS.get()))

    async def scenario() -> None:
        await proc.spawn(in_process())
        loop.pause(proc)
        await asyncio.sleep(2.0)
        assert owners == [None]  # the twin's timer ran; the process's own is held
        loop.resume(proc)
        await asyncio.sleep(0)

    _run(loop, scenario())
    assert owners == [None, proc]
    loop.close()


def test_time_moves_while_work_is_ready() -> None:
    """A coroutine that waits out the last femtoseconds of a deadline, while another keeps the
    loop busy, reaches it (on a loop whose time stood still while work was ready it spun
    forever: a timer within the clock's resolution fires at once)."""
    loop = ProcessLoop()

    async def scenario() -> None:
        await asyncio.sleep(6.968)
        deadline = loop.time() + 4e-15

        async def busy() -> None:
            while loop.time() < deadline:
                await asyncio.sleep(0)

        async def waiter() -> None:
            while (remaining := deadline - loop.time()) > 0:
                await asyncio.sleep(remaining)

        await asyncio.gather(busy(), waiter())

    _run(loop, scenario())
    assert loop.time() < 6.969
    loop.close()

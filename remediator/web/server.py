"""The console's HTTP server: uvicorn, without its ten-a-second idle tick.

uvicorn's main loop sleeps 0.1 s at a time only to notice a shutdown request and to refresh the
Date header once a second; on an idle controller those wake-ups were a fifth of a percent of a
core, more than the web server's real work. This server wakes once a second (the Date header's
resolution, so responses carry the same date) and at once when asked to exit.
"""

from __future__ import annotations

import asyncio
import contextlib

import uvicorn

DATE_TICK_SECONDS = 1.0
# uvicorn's on_tick refreshes the Date header when the counter is a multiple of this.
_TICKS_PER_DATE = 10


class QuietServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._exit = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + _TICKS_PER_DATE) % 864_000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), DATE_TICK_SECONDS)
            should_exit = await self.on_tick(counter)

    def request_exit(self) -> None:
        """Stop serving now (from any thread): the loop wakes instead of finishing its tick."""
        self.should_exit = True
        loop, event = self._loop, self._exit
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: it has exited
                loop.call_soon_threadsafe(event.set)

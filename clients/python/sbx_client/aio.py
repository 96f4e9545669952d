# SPDX-License-Identifier: Apache-2.0
"""The asyncio flavour: the same client, each call run on a worker thread
(asyncio.to_thread), so an event loop never blocks on sbxd. Calls in flight
at once use separate connections of the client's pool (pool_size, default 4;
more wait for one or dial their own).

    async with sbx_client.aio.connect(endpoint) as c:
        async with await c.create_run(policy) as run:
            res = await run.exec(["echo", "hi"])
            async for name, data in run.stream(["sh", "-c", "..."]):
                ...
"""
import asyncio

from .client import DEFAULT_TIMEOUT, Client


def connect(endpoint=None, token=None, tls=None, timeout=DEFAULT_TIMEOUT, **options):
    """An AsyncClient: connect()'s arguments."""
    return AsyncClient(Client(endpoint, token=token, tls=tls, timeout=timeout, **options))


class AsyncClient:
    """Client for asyncio: the same calls, awaited."""
    def __init__(self, client):
        self.sync = client

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()

    def close(self):
        """Closes the connections."""
        self.sync.close()

    async def health(self):
        """As Client.health."""
        return await asyncio.to_thread(self.sync.health)

    async def list_runs(self, all=False):
        """As Client.list_runs."""
        return await asyncio.to_thread(self.sync.list_runs, all)

    async def drain(self, undrain=False):
        """As Client.drain."""
        return await asyncio.to_thread(self.sync.drain, undrain)

    def run(self, run_id):
        """An AsyncRun for an existing run (no call is made)."""
        return AsyncRun(self.sync.run(run_id))

    async def create_run(self, policy, **kw):
        """As Client.create_run; an AsyncRun."""
        return AsyncRun(await asyncio.to_thread(self.sync.create_run, policy, **kw))


class AsyncRun:
    """Run for asyncio: the same calls, awaited; `async with` tears it down."""
    def __init__(self, run):
        self.sync = run
        self.id = run.id

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        if self.sync.manifest is None:
            await self.teardown()

    @property
    def manifest(self):
        """The Manifest once torn down (None before)."""
        return self.sync.manifest

    async def exec(self, argv, **kw):
        """As Run.exec."""
        return await asyncio.to_thread(self.sync.exec, argv, **kw)

    async def write_stdin(self, exec_id, data, offset, eof=False):
        """Run.write_stdin: one chunk of a streamed stdin; returns the bytes
        sbxd has taken in all (send the rest again when fewer)."""
        return await asyncio.to_thread(self.sync.write_stdin, exec_id, data, offset, eof)

    async def put(self, path, data):
        """As Run.put."""
        return await asyncio.to_thread(self.sync.put, path, data)

    async def signal(self, exec_id, *sig):
        """As Run.signal."""
        return await asyncio.to_thread(self.sync.signal, exec_id, *sig)

    async def status(self):
        """As Run.status."""
        return await asyncio.to_thread(self.sync.status)

    async def artifacts(self):
        """As Run.artifacts."""
        return await asyncio.to_thread(self.sync.artifacts)

    async def fetch(self, path, dest=None, **kw):
        """As Run.fetch."""
        return await asyncio.to_thread(self.sync.fetch, path, dest, **kw)

    async def teardown(self):
        """As Run.teardown."""
        return await asyncio.to_thread(self.sync.teardown)

    def stream(self, argv, **kw):
        """An AsyncExecStream: `async for (name, bytes) in run.stream(argv)`."""
        return AsyncExecStream(self.sync, argv, kw)


class AsyncExecStream:
    """async for (name, bytes) in run.stream(argv); .result after."""

    def __init__(self, run, argv, kw):
        self._run, self._argv, self._kw = run, argv, kw
        self.result = None
        self.exec_id = None

    async def __aiter__(self):
        loop = asyncio.get_running_loop()
        q = asyncio.Queue()
        end = object()
        s = await asyncio.to_thread(self._run.stream, self._argv, **self._kw)
        self.exec_id = s.exec_id

        def pump():
            try:
                for item in s:
                    loop.call_soon_threadsafe(q.put_nowait, item)
                loop.call_soon_threadsafe(q.put_nowait, (end, None))
            except BaseException as e:
                loop.call_soon_threadsafe(q.put_nowait, (end, e))

        task = loop.run_in_executor(None, pump)
        try:
            while True:
                name, item = await q.get()
                if name is end:
                    if item is not None:
                        raise item
                    break
                yield name, item
            self.result = s.result
        finally:
            s.close()
            await task

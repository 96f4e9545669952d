# SPDX-License-Identifier: Apache-2.0
"""The asyncio twin of sbx_client.Sandbox: the same calls, awaited; each
runs on a worker thread (asyncio.to_thread), so the event loop never blocks
on sbxd.

    from sbx_client import AsyncSandbox
    async with await AsyncSandbox.create() as sbx:
        r = await sbx.commands.run("echo hi", on_stdout=print)
        await sbx.files.write("in.txt", b"x")
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, List, Mapping, Optional, Sequence, Union

from .results import Fetched, Manifest
from .sandbox import (CommandHandle, CommandResult, DataSource, EntryInfo, OutputCallback,
                      Sandbox, StdinSource)


def _in_loop(loop: asyncio.AbstractEventLoop,
             cb: Optional[OutputCallback]) -> Optional[Callable[[str], None]]:
    """An output callback called on the event loop's thread, not the
    worker's (a coroutine function's coroutines are scheduled as tasks)."""
    if cb is None:
        return None

    def call(text: str) -> None:
        def run() -> None:
            r = cb(text)
            if asyncio.iscoroutine(r):
                asyncio.ensure_future(r)
        loop.call_soon_threadsafe(run)
    return call


class AsyncCommandHandle:
    """A command started with background=True: await wait(), await kill()."""

    def __init__(self, handle: CommandHandle):
        self.sync = handle
        self.exec_id: str = handle.exec_id

    async def wait(self, timeout: Optional[float] = None) -> CommandResult:
        """The CommandResult once the command ended (as CommandHandle.wait)."""
        return await asyncio.to_thread(self.sync.wait, timeout)

    async def kill(self) -> None:
        """Kills the command."""
        await asyncio.to_thread(self.sync.kill)

    async def signal(self, sig: int) -> None:
        """Sends sig to the command's process group."""
        await asyncio.to_thread(self.sync.signal, sig)


class AsyncCommands:
    """sbx.commands of an AsyncSandbox."""

    def __init__(self, sandbox: Sandbox):
        self._sync = sandbox.commands

    async def run(self, cmd: Union[str, Sequence[str]], env: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None, timeout: Optional[float] = None,
                  stdin: Optional[StdinSource] = None,
                  on_stdout: Optional[OutputCallback] = None,
                  on_stderr: Optional[OutputCallback] = None, background: bool = False,
                  check: bool = False) -> Any:
        """As Commands.run; on_stdout/on_stderr run on the event loop (a
        coroutine function's coroutines become tasks). background=True gives
        an AsyncCommandHandle."""
        loop = asyncio.get_running_loop()
        r = await asyncio.to_thread(self._sync.run, cmd, env=env, cwd=cwd, timeout=timeout,
                                    stdin=stdin, on_stdout=_in_loop(loop, on_stdout),
                                    on_stderr=_in_loop(loop, on_stderr), background=background,
                                    check=check)
        if background:
            return AsyncCommandHandle(r)
        await asyncio.sleep(0)  # the callbacks scheduled last run before the result
        return r

    async def kill(self, exec_id: str) -> None:
        """Kills a command by its exec_id."""
        await asyncio.to_thread(self._sync.kill, exec_id)


class AsyncFiles:
    """sbx.files of an AsyncSandbox."""

    def __init__(self, sandbox: Sandbox):
        self._sync = sandbox.files

    async def write(self, path: str, data: DataSource, mode: Optional[int] = None) -> str:
        """As Files.write."""
        return await asyncio.to_thread(self._sync.write, path, data, mode)

    async def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        """As Files.read."""
        return await asyncio.to_thread(self._sync.read, path, format)

    async def list(self, path: str = "/out") -> List[EntryInfo]:
        """As Files.list."""
        return await asyncio.to_thread(self._sync.list, path)

    async def exists(self, path: str) -> bool:
        """As Files.exists."""
        return await asyncio.to_thread(self._sync.exists, path)

    async def download(self, path: str = "/out", dest: Any = ".") -> List[Fetched]:
        """As Files.download."""
        return await asyncio.to_thread(self._sync.download, path, dest)


class AsyncSandbox:
    """Sandbox for asyncio: `sbx = await AsyncSandbox.create(...)`, `async
    with` it, await its commands and files, `await sbx.kill()`."""

    def __init__(self, sandbox: Sandbox):
        self.sync = sandbox
        self.commands = AsyncCommands(sandbox)
        self.files = AsyncFiles(sandbox)

    @classmethod
    async def create(cls, *args: Any, **kw: Any) -> "AsyncSandbox":
        """As Sandbox.create (the same arguments)."""
        return cls(await asyncio.to_thread(Sandbox.create, *args, **kw))

    @classmethod
    async def connect(cls, sandbox_id: str, **kw: Any) -> "AsyncSandbox":
        """As Sandbox.connect."""
        return cls(await asyncio.to_thread(Sandbox.connect, sandbox_id, **kw))

    @property
    def sandbox_id(self) -> str:
        """As Sandbox.sandbox_id."""
        return self.sync.sandbox_id

    @property
    def manifest(self) -> Optional[Manifest]:
        """As Sandbox.manifest."""
        return self.sync.manifest

    async def is_running(self) -> bool:
        """As Sandbox.is_running."""
        return await asyncio.to_thread(self.sync.is_running)

    async def kill(self) -> Manifest:
        """As Sandbox.kill."""
        return await asyncio.to_thread(self.sync.kill)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await asyncio.to_thread(self.sync.__exit__, exc_type, exc, tb)


__all__ = ["AsyncSandbox", "AsyncCommands", "AsyncFiles", "AsyncCommandHandle"]

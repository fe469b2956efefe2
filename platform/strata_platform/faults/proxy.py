"""A proxy that misbehaves as networks and object stores do, for fault-injection tests.

``FaultProxy`` listens on 127.0.0.1 and forwards to one upstream, in one of two modes:

* ``http`` (S3, in front of MinIO): it parses every HTTP/1.1 request and reply, so that a fault
  can strike *after* a request landed. Bodies are framed by ``Content-Length`` or
  ``Transfer-Encoding: chunked`` (boto3's and the AWS C++ SDK's ``aws-chunked`` uploads travel
  inside one of the two) and forwarded byte for byte; ``Expect: 100-continue`` is answered by the
  proxy itself (the header is not signed). Connections are kept alive as the client asks. Per
  request, from a seeded RNG:

  - ``lost_reply``: the request is forwarded, the whole reply read, and the client connection
    closed without an answer: the write happened and the client cannot know it;
  - ``slow_down``: forwarded, the reply discarded, and the client answered ``503 SlowDown`` (S3's
    XML error) on its kept-alive connection;
  - ``latency``: the request waits ``latency_ms`` before it is forwarded.

* ``tcp`` (PostgreSQL, the JDBC lock's database): bytes piped both ways.

In both modes a new connection may be ``reset`` (RST, SO_LINGER 0) before anything is forwarded,
and an ``outage`` of ``outage_seconds`` comes about every ``outage_every`` seconds: the proxy stops
listening (connections are refused) and resets every open connection (``outage_cut`` counts
them); the lock database going away is an outage of the ``tcp`` proxy.

``FaultProxy.counts`` holds the faults injected per kind (and the requests and connections seen).
The seed fixes the sequence of draws and the outage schedule. With concurrent clients the order in
which requests meet the draws varies from run to run, so a seed replays the fault mix and timing,
not one exact interleaving.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

HOST = "127.0.0.1"
FAULT_KINDS = ("lost_reply", "slow_down", "reset", "latency", "outage", "outage_cut")
STREAM_LIMIT = 1 << 20  # longest header block accepted
PIPE_CHUNK = 1 << 16
NO_BODY_STATUSES = (204, 304)


@dataclass(frozen=True)
class Faults:
    """Rates are shares of requests (``lost_reply``, ``slow_down``, ``latency``) or of new
    connections (``reset``); ``outage_every`` 0 means no outages."""

    lost_reply: float = 0.0
    slow_down: float = 0.0
    reset: float = 0.0
    latency: float = 0.0
    latency_ms: tuple[float, float] = (20.0, 200.0)
    outage_every: float = 0.0
    outage_seconds: tuple[float, float] = (1.0, 2.0)

    def __post_init__(self) -> None:
        for name in ("lost_reply", "slow_down", "reset", "latency"):
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"fault rate {name} must be within [0, 1], got {rate}")
        if self.lost_reply + self.slow_down > 1.0:
            raise ValueError("lost_reply + slow_down must not exceed 1 (one fault per request)")
        if self.outage_every < 0 or self.outage_seconds[0] > self.outage_seconds[1]:
            raise ValueError(f"bad outage settings: every {self.outage_every} s for {self.outage_seconds} s")

    def scaled(self, factor: float) -> Faults:
        """The same faults at `factor` times the per-request and per-connection rates."""
        return replace(self, lost_reply=self.lost_reply * factor, slow_down=self.slow_down * factor,
                       reset=min(1.0, self.reset * factor), latency=min(1.0, self.latency * factor))


NO_FAULTS = Faults()


@dataclass
class _Message:
    """One HTTP request or reply: its header block as received and its body with its framing."""

    head: bytes
    start: list[bytes]  # the request or status line, split in three
    headers: list[tuple[bytes, bytes]]
    body: bytes = b""

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key.strip().lower() == name:
                return value.strip()
        return None

    def wants_close(self) -> bool:
        connection = (self.header(b"connection") or b"").lower()
        if self.start[0].startswith(b"HTTP/1.0") or self.start[-1] == b"HTTP/1.0":
            return connection != b"keep-alive"
        return connection == b"close"


class _Link:
    """A client connection and the upstream connection its requests go to."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.up_reader: asyncio.StreamReader | None = None
        self.up_writer: asyncio.StreamWriter | None = None
        self.cut = False  # reset by the proxy: nothing more goes upstream

    def reset(self) -> None:
        self.cut = True
        _reset(self.writer)
        self.close_upstream()

    def close(self) -> None:
        self.writer.close()
        self.close_upstream()

    def close_upstream(self) -> None:
        if self.up_writer is not None:
            self.up_writer.transport.abort()
        self.up_reader = self.up_writer = None


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN (SO_LINGER 0), as a crashed peer or a middlebox does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _read_head(reader: asyncio.StreamReader) -> _Message | None:
    """The next header block, or None when the peer closed between messages."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None
    lines = head[:-4].split(b"\r\n")
    headers = [(name, value) for name, _, value in (line.partition(b":") for line in lines[1:])]
    return _Message(head, lines[0].split(b" ", 2), headers)


async def _read_body(reader: asyncio.StreamReader, message: _Message, until_eof: bool) -> bytes:
    """The body with its framing (chunk sizes and trailers kept), as the peer sent it."""
    encoding = (message.header(b"transfer-encoding") or b"").lower()
    if b"chunked" in encoding:
        return await _read_chunked(reader)
    length = message.header(b"content-length")
    if length is not None:
        return await reader.readexactly(int(length))
    return await reader.read() if until_eof else b""


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    raw = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        raw += line
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:  # trailers (aws-chunked checksums), then the empty line
                trailer = await reader.readuntil(b"\r\n")
                raw += trailer
                if trailer == b"\r\n":
                    return bytes(raw)
        raw += await reader.readexactly(size + 2)


def _without_expect(request: _Message) -> bytes:
    """The request's header block minus ``Expect`` (the proxy answered the 100 Continue)."""
    kept = [line for line in request.head[:-4].split(b"\r\n")[1:]
            if line.partition(b":")[0].strip().lower() != b"expect"]
    return b"\r\n".join([request.head.split(b"\r\n", 1)[0], *kept]) + b"\r\n\r\n"


def _slow_down(request: _Message, close: bool) -> bytes:
    """S3's 503 SlowDown, as AWS answers a request rate it throttles."""
    request_id = uuid.uuid4().hex[:16].upper()
    resource = request.start[1].split(b"?", 1)[0].decode("latin-1") if len(request.start) > 1 else "/"
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            f"<Message>Please reduce your request rate.</Message><Resource>{resource}</Resource>"
            f"<RequestId>{request_id}</RequestId></Error>").encode()
    head = (f"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            f"x-amz-request-id: {request_id}\r\nConnection: {'close' if close else 'keep-alive'}\r\n\r\n").encode()
    return head if request.start[0] == b"HEAD" else head + body


class FaultProxy:
    """``with FaultProxy(("127.0.0.1", 19000), faults, seed) as proxy: ...`` runs the proxy in a
    thread of its own (an asyncio loop); ``proxy.endpoint`` is where clients connect."""

    def __init__(self, upstream: tuple[str, int], faults: Faults = NO_FAULTS, seed: int = 0,
                 mode: str = "http", name: str | None = None):
        if mode not in ("http", "tcp"):
            raise ValueError(f"proxy mode must be 'http' or 'tcp', got {mode!r}")
        self.upstream = upstream
        self.faults = faults
        self.seed = seed
        self.mode = mode
        self.name = name or mode
        self.port = 0
        self.counts: dict[str, int] = dict.fromkeys((*FAULT_KINDS, "requests", "connections"), 0)
        self._rng = random.Random(f"{seed}:{self.name}:requests")
        self._schedule = random.Random(f"{seed}:{self.name}:outages")
        self._links: set[_Link] = set()
        self._background: set[asyncio.Future[None]] = set()  # outages (referenced until the loop ends)
        self._server: asyncio.Server | None = None
        self._in_outage = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    # -- control (from any thread) ---------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}" if self.mode == "http" else f"{HOST}:{self.port}"

    def injected(self) -> dict[str, int]:
        """Faults injected so far, per kind."""
        return {kind: self.counts[kind] for kind in FAULT_KINDS}

    def set_faults(self, faults: Faults) -> None:
        """Change the rates from now on (NO_FAULTS: a plain proxy; a running outage still ends)."""
        self.faults = faults

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """No new faults within the block."""
        before = self.faults
        self.faults = NO_FAULTS
        try:
            yield
        finally:
            self.faults = before

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._run, name=f"fault-proxy-{self.name}", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=30)
        if self._failure is not None:
            raise RuntimeError(f"fault proxy {self.name} did not start: {self._failure}") from self._failure
        if not self._ready.is_set():
            raise RuntimeError(f"fault proxy {self.name} did not start within 30 s")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(timeout=30)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- the loop --------------------------------------------------------------------------------
    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:  # reported by start() when it happens before ready
            self._failure = exc
            self._ready.set()
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        await self._listen()
        self._ready.set()
        self._background.add(asyncio.ensure_future(self._outages()))
        await self._stopped.wait()
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.reset()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, HOST, self.port, reuse_address=True,
                                                  limit=STREAM_LIMIT)
        self.port = self._server.sockets[0].getsockname()[1]

    def begin_outage(self, seconds: float) -> None:
        """An outage now, besides the scheduled ones (from any thread): returns once the proxy
        stopped listening and cut its connections; it listens again `seconds` later."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._begin_outage(seconds), self._loop).result(timeout=30)

    async def _begin_outage(self, seconds: float) -> None:
        if self._cut_all():
            self._background.add(asyncio.ensure_future(self._end_outage(seconds)))

    async def _outages(self) -> None:
        while True:
            every = self.faults.outage_every
            if not every:
                await asyncio.sleep(0.5)
                continue
            await asyncio.sleep(every * self._schedule.uniform(0.5, 1.5))
            seconds = self._schedule.uniform(*self.faults.outage_seconds)
            if self.faults.outage_every and self._cut_all():
                await self._end_outage(seconds)

    def _cut_all(self) -> bool:
        """Stop listening (new connections are refused) and reset every open connection; False
        if an outage is under way already."""
        if self._in_outage:
            return False
        self.counts["outage"] += 1
        self._in_outage = True
        assert self._server is not None
        self._server.close()
        for link in list(self._links):
            self.counts["outage_cut"] += 1
            link.reset()
        return True

    async def _end_outage(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self._in_outage = False
        await self._listen()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counts["connections"] += 1
        if self._in_outage:  # accepted just before the listener closed
            self.counts["outage_cut"] += 1
            _reset(writer)
            return
        if self._rng.random() < self.faults.reset:
            self.counts["reset"] += 1
            _reset(writer)
            return
        link = _Link(reader, writer)
        self._links.add(link)
        try:
            if self.mode == "http":
                await self._serve_http(link)
            else:
                await self._pipe(link)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, asyncio.CancelledError):
            pass  # a peer went away mid-message (or an outage, or stop(), cut it): drop both sides
        finally:
            self._links.discard(link)
            link.close()

    async def _delay(self) -> None:
        draw, millis = self._rng.random(), self._rng.uniform(*self.faults.latency_ms)
        if draw < self.faults.latency:
            self.counts["latency"] += 1
            await asyncio.sleep(millis / 1000)

    # -- http --------------------------------------------------------------------------------------
    async def _serve_http(self, link: _Link) -> None:
        while True:
            request = await _read_head(link.reader)
            if request is None:
                return
            self.counts["requests"] += 1
            head = request.head
            if (request.header(b"expect") or b"").lower() == b"100-continue":
                link.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await link.writer.drain()
                head = _without_expect(request)
            request.body = await _read_body(link.reader, request, until_eof=False)
            fault = self._rng.random()
            await self._delay()
            reply = await self._forward(link, head + request.body, request)
            close = request.wants_close() or reply.wants_close() or self._delimited_by_close(request, reply)
            if fault < self.faults.lost_reply:
                self.counts["lost_reply"] += 1
                return  # the request landed; the client hears nothing
            if fault < self.faults.lost_reply + self.faults.slow_down:
                self.counts["slow_down"] += 1
                link.writer.write(_slow_down(request, close))
            else:
                link.writer.write(reply.head + reply.body)
            await link.writer.drain()
            if close:
                return

    @staticmethod
    def _delimited_by_close(request: _Message, reply: _Message) -> bool:
        return not _no_body(request, reply) and reply.header(b"content-length") is None \
            and b"chunked" not in (reply.header(b"transfer-encoding") or b"").lower()

    async def _forward(self, link: _Link, raw: bytes, request: _Message) -> _Message:
        """Send one request upstream and read its whole reply. A kept-alive upstream connection
        that the server closed while idle gets the request again on a new one (nothing was read)."""
        reused = link.up_writer is not None and link.up_reader is not None and not link.up_reader.at_eof()
        if not reused:
            await self._connect_upstream(link)
        try:
            return await self._exchange(link, raw, request)
        except (asyncio.IncompleteReadError, ConnectionResetError) as exc:
            if link.cut or not reused or (isinstance(exc, asyncio.IncompleteReadError) and exc.partial):
                raise
        await self._connect_upstream(link)
        return await self._exchange(link, raw, request)

    async def _connect_upstream(self, link: _Link) -> None:
        link.close_upstream()
        link.up_reader, link.up_writer = await asyncio.open_connection(*self.upstream, limit=STREAM_LIMIT)

    async def _exchange(self, link: _Link, raw: bytes, request: _Message) -> _Message:
        assert link.up_reader is not None and link.up_writer is not None
        link.up_writer.write(raw)
        await link.up_writer.drain()
        while True:
            reply = await _read_head(link.up_reader)
            if reply is None:
                raise asyncio.IncompleteReadError(b"", None)
            if not reply.start[1].startswith(b"1"):  # interim 1xx replies are not relayed
                break
        reply.body = b"" if _no_body(request, reply) else await _read_body(link.up_reader, reply, until_eof=True)
        if reply.wants_close() or self._delimited_by_close(request, reply):
            link.close_upstream()
        return reply

    # -- tcp ---------------------------------------------------------------------------------------
    async def _pipe(self, link: _Link) -> None:
        await self._delay()
        link.up_reader, link.up_writer = await asyncio.open_connection(*self.upstream, limit=STREAM_LIMIT)
        copies = [asyncio.ensure_future(_copy(link.reader, link.up_writer)),
                  asyncio.ensure_future(_copy(link.up_reader, link.writer))]
        _, pending = await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*copies, return_exceptions=True)


def _no_body(request: _Message, reply: _Message) -> bool:
    return request.start[0] == b"HEAD" or int(reply.start[1]) in NO_BODY_STATUSES


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(PIPE_CHUNK):
        writer.write(data)
        await writer.drain()

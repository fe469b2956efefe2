"""Storage faults of the simulation: a FileIO that fails chosen calls the way real storage does.

Every storage call of an actor is one *step*: the scheduler may switch to another actor before it
(see ``concurrency``), then the actor's own seeded random stream decides, in the actor's call
order, whether the call fails and how. File names (random uuids) never enter a decision, so one
seed gives one sequence of faults. The errors are the ones real object stores raise (OSError
subclasses), so the engine's three-outcome logic meets them as it would in production:

* before the effect (nothing happened): a 503, a connection error;
* after the effect (the request landed): a lost reply (a timeout), a 503;
* a slow call: a competitor runs between the request and its effect;
* a kill: the actor's process dies at the call, before or after its effect. ``ActorKilled`` is a
  BaseException, so no ``except Exception`` of the engine catches it; every later storage call of
  a killed actor raises it again, without effect (a dead process reaches no storage), and the files
  it wrote stay.

Data files are written through ``arrow_fs()`` and read through ``open_input_file``: both are
wrapped, so data files get steps and faults too (a data file's write lands when its stream closes,
as a multipart upload completes).
"""

from __future__ import annotations

import contextlib
import io
import random
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Protocol, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from strata.fs.file_io import FileIO, FileStatus, LocalFileIO

if TYPE_CHECKING:
    from typing import Any

T = TypeVar("T")

BEFORE_KINDS = ("unavailable_before", "error_before")  # the request never reached the store
AFTER_KINDS = ("lost_reply", "unavailable_after")  # the request landed, the caller hears an error
OUTAGE_CALLS = 8  # the longest outage, in calls of the actor
READ_OPS = frozenset({"read_bytes", "exists", "list_status", "open_input_file", "file_size", "file_info", "list"})


class ActorKilled(BaseException):
    """The actor's process died. A BaseException: it unwinds the actor past every ``except
    Exception`` (a dead process runs no error handling that reaches storage)."""


class LostReplyError(TimeoutError):
    """The request landed; its reply never came (a read timeout)."""


class ServiceUnavailableError(OSError):
    """HTTP 503 Slow Down / Service Unavailable."""


class ConnectionFailedError(ConnectionError):
    """The connection failed before the request was sent."""


# fields FaultConfig.random never sets (a new kind left out keeps every seed's fault mix as it was)
RANDOM_EXCLUDED = ("outage", "reads", "only_on", "only_op", "lock_timeout_after_publish")


@dataclass(frozen=True)
class FaultConfig:
    """Probabilities per storage call (per lock acquisition for ``lock_timeout``, per storage call
    under a held lock for ``lease_expiry``); all 0 = no faults."""

    lost_reply: float = 0.0  # the request landed, the reply is lost (a TimeoutError)
    unavailable_before: float = 0.0  # 503 before the request: nothing happened
    unavailable_after: float = 0.0  # 503 after the request landed
    error_before: float = 0.0  # a connection error before the request
    slow: float = 0.0  # a competitor runs between the request and its effect
    kill: float = 0.0  # the actor's process dies at this call (before or after its effect)
    lock_timeout: float = 0.0  # JDBC lock: acquiring times out (LockAcquireTimeoutError)
    # the same, in place of `lock_timeout`, for an actor that already published a snapshot in its run:
    # a commit's COMPACT wanting the lock after its APPEND went out (not in random mixes)
    lock_timeout_after_publish: float = 0.0
    lease_expiry: float = 0.0  # JDBC lock: the holder stalls past its lease (another may take it)
    # a failed call starts an outage: the actor's next 2..OUTAGE_CALLS calls fail before their effect
    # (the outage that lost a reply often fails the reads that would settle it, too)
    outage: float = 0.0
    # the error rates of reads relative to writes: a client retries an idempotent read by itself,
    # so fewer of its failures reach the engine (1: as often as writes)
    reads: float = 1.0
    # faults only on calls whose path holds this text (e.g. "/snapshot/snapshot-": the snapshot
    # publish and its read-back); "" = every call
    only_on: str = ""
    # faults start only at calls of this kind (e.g. "write_new"); an outage they start still fails the
    # other calls on `only_on`'s paths (the read-back); "" = every kind
    only_op: str = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("only_on", "only_op"):
                continue
            if not 0.0 <= value <= 1.0 and f.name != "reads":
                raise ValueError(f"FaultConfig.{f.name} is a probability in [0, 1], got {value!r}")
        if self.reads < 0:
            raise ValueError(f"FaultConfig.reads is a factor of the rates, at least 0, got {self.reads!r}")
        if sum(getattr(self, kind) for kind in (*BEFORE_KINDS, *AFTER_KINDS, "kill")) > 1.0:
            raise ValueError("FaultConfig: the failure probabilities of one call add up to more than 1")

    @classmethod
    def random(cls, rng: random.Random) -> FaultConfig:
        """A mix of a few fault kinds at rates that leave most operations done: rare enough that a
        run reaches deep states, frequent enough that each kind meets the commit path."""
        kinds = [f.name for f in fields(cls) if f.name not in RANDOM_EXCLUDED]
        chosen = rng.sample(kinds, rng.randint(1, 4))
        rates: dict[str, Any] = {name: rng.choice((0.005, 0.01, 0.03)) for name in chosen}
        return cls(**rates, outage=rng.choice((0.0, 0.5)), reads=rng.choice((0.1, 1.0)))

    @property
    def any(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self) if f.name not in ("reads", "only_on", "only_op"))

    def hits(self, path: str) -> bool:
        """Whether a call on `path` may fail (`only_on`)."""
        return not self.only_on or self.only_on in path


# named fault mixes a scenario can ask for (``--faults NAME``)
PRESETS = {
    # lost replies and 503s after the request landed, on the snapshot PUT alone, each starting an outage
    # that fails the read-back of that snapshot too: the commit's outcome-unknown path
    "snapshot-unknown": FaultConfig(lost_reply=0.5, unavailable_after=0.2, outage=1.0, only_on="/snapshot/snapshot-",
                                    only_op="write_new"),
    # under the JDBC lock: acquisitions time out now and then, and often once the actor has published
    # a snapshot (the COMPACT of a commit whose APPEND is out): the half-published commit's path
    "lock-timeout": FaultConfig(lock_timeout=0.05, lock_timeout_after_publish=0.5),
}
# the presets whose faults need snapshots published under the JDBC lock
PRESETS_UNDER_LOCK = frozenset({"lock-timeout"})


@dataclass(frozen=True)
class CallPlan:
    """What happens to one storage call: a fault before or after its effect (or none), whether
    a competitor runs first, whether the process dies."""

    before: str | None = None
    after: str | None = None
    slow: bool = False
    outage: int = 0  # the actor's calls after this one that fail before their effect

    def fail_before(self, op: str, path: str) -> None:
        _raise(self.before, op, path)

    def fail_after(self, op: str, path: str) -> None:
        _raise(self.after, op, path)


def draw_plan(config: FaultConfig, rng: random.Random, op: str) -> CallPlan:
    """One call's faults from the actor's stream: always the same number of draws per call, so a
    change of rates shifts no later decision of another kind."""
    slow = rng.random() < config.slow
    pick = rng.random()
    when = rng.random()
    outage = rng.randint(2, OUTAGE_CALLS) if rng.random() < config.outage else 0
    scale = config.reads if op in READ_OPS else 1.0
    for kind in (*BEFORE_KINDS, *AFTER_KINDS, "kill"):
        rate = getattr(config, kind) * (1.0 if kind == "kill" else scale)
        if pick < rate:
            if kind == "kill":
                return CallPlan(before="kill", slow=slow) if when < 0.5 else CallPlan(after="kill", slow=slow)
            if kind in BEFORE_KINDS:
                return CallPlan(before=kind, slow=slow, outage=outage)
            return CallPlan(after=kind, slow=slow, outage=outage)
        pick -= rate
    return CallPlan(slow=slow)


def in_outage(plan: CallPlan) -> CallPlan:
    """A call during an outage: it fails before its effect (a kill still kills)."""
    if "kill" in (plan.before, plan.after):
        return plan
    return CallPlan(before="unavailable_before", slow=plan.slow)


def _raise(kind: str | None, op: str, path: str) -> None:
    if kind is None:
        return
    if kind == "kill":
        raise ActorKilled(f"process killed at {op} {path}")
    if kind == "lost_reply":
        raise LostReplyError(f"simulated: {op} {path}: the request landed but its reply was lost (read timeout)")
    if kind in ("unavailable_before", "unavailable_after"):
        raise ServiceUnavailableError(f"simulated: {op} {path}: 503 Service Unavailable")
    if kind == "error_before":
        raise ConnectionFailedError(f"simulated: {op} {path}: connection refused before the request was sent")
    raise AssertionError(f"unknown fault kind {kind!r}")


class StorageSteps(Protocol):
    """What the fault-injecting FileIO asks the scheduler at each call (``concurrency.World``)."""

    def plan_call(self, actor: str | None, op: str, path: str) -> CallPlan:
        """A switch point, then the call's faults (a fault-free plan outside a run)."""
        ...

    def competitor_runs(self, actor: str | None) -> None:
        """Let another actor run now (a slow call, check-then-put's window)."""
        ...

    def landed(self, actor: str | None, op: str, path: str) -> None:
        """The call's effect took place (a fault after it may still hide that from the actor)."""
        ...

    def exclusive(self, actor: str | None, path: str) -> contextlib.AbstractContextManager[object]:
        """A lock on `path` that waits by switching to other actors, never by blocking."""
        ...


class FaultyFileIO(FileIO):
    """The local FileIO seen by one actor through the simulation's faults and switch points.

    `object_store`: behave as an object store (no file locks, ``is_object_store``), as the
    production stores do. `check_then_put`: a store without conditional PUT, where
    ``write_new`` is a HEAD then a PUT with a window between them (what the JDBC lock protects);
    otherwise ``write_new`` is atomic, as S3's ``If-None-Match: *``."""

    def __init__(self, inner: LocalFileIO, steps: StorageSteps, actor: str | None,
                 object_store: bool = True, check_then_put: bool = False):
        self.inner = inner
        self.steps = steps
        self.actor = actor
        self.object_store = object_store
        self.check_then_put = check_then_put
        self._arrow = pafs.PyFileSystem(_FaultyArrowHandler(self))

    def call(self, op: str, path: str, effect: Callable[[], T]) -> T:
        """One storage call: a switch point, faults before, the effect, faults after."""
        plan = self.steps.plan_call(self.actor, op, path)
        plan.fail_before(op, path)
        if plan.slow:
            self.steps.competitor_runs(self.actor)
        result = effect()
        self.steps.landed(self.actor, op, path)
        plan.fail_after(op, path)
        return result

    @property
    def is_object_store(self) -> bool:
        return self.object_store

    def conditional_put_supported(self, path: str) -> bool:
        """What the JDBC catalog probes to pick lock-free publishing."""
        return not self.check_then_put

    def read_bytes(self, path: str) -> bytes:
        return self.call("read_bytes", path, lambda: self.inner.read_bytes(path))

    def write_bytes(self, path: str, data: bytes) -> None:
        self.call("write_bytes", path, lambda: self.inner.write_bytes(path, data))

    def write_new(self, path: str, data: bytes) -> bool:
        if not self.check_then_put:
            return self.call("write_new", path, lambda: self.inner.write_new(path, data))
        if self.call("exists", path, lambda: self.inner.exists(path)):
            return False
        self.call("write_new", path, lambda: self.inner.write_bytes(path, data))
        return True

    def exists(self, path: str) -> bool:
        return self.call("exists", path, lambda: self.inner.exists(path))

    def delete(self, path: str) -> None:
        self.call("delete", path, lambda: self.inner.delete(path))

    def delete_dir(self, path: str) -> None:
        self.call("delete_dir", path, lambda: self.inner.delete_dir(path))

    def delete_empty_dir(self, path: str) -> bool:
        return self.call("delete_empty_dir", path, lambda: self.inner.delete_empty_dir(path))

    def list_status(self, path: str) -> list[FileStatus]:
        return self.call("list_status", path, lambda: self.inner.list_status(path))

    def mkdirs(self, path: str) -> None:
        self.call("mkdirs", path, lambda: self.inner.mkdirs(path))

    def arrow_fs(self) -> tuple[pafs.FileSystem, str]:
        return self._arrow, ""

    def arrow_path(self, path: str) -> str:
        return self.inner.arrow_path(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.call("open_input_file", path, lambda: self.inner.open_input_file(path))

    def file_size(self, path: str) -> int:
        return self.call("file_size", path, lambda: self.inner.file_size(path))

    def exclusive_lock(self, path: str) -> contextlib.AbstractContextManager[object] | None:
        """None on an object store; on a local disk, a lock that waits by letting the holder run
        (a blocking flock would stall the single running actor for ever)."""
        if self.object_store:
            return None
        return self.steps.exclusive(self.actor, path)


class _UploadOnClose(io.RawIOBase):
    """An output stream whose bytes land when it closes (a multipart upload's completion): the
    close is the storage call, with its step and faults."""

    def __init__(self, file_io: FaultyFileIO, path: str):
        self.file_io = file_io
        self.path = path
        self.buffer = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.buffer += bytes(data)
        return len(data)

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        data = bytes(self.buffer)
        self.buffer = bytearray()
        self.file_io.call("upload", self.path, lambda: self.file_io.inner.write_bytes(self.path, data))


class _FaultyArrowHandler(pafs.FileSystemHandler):
    """The pyarrow side of FaultyFileIO: each filesystem call is a storage call of the actor."""

    def __init__(self, file_io: FaultyFileIO):
        self.file_io = file_io
        self.fs = pafs.LocalFileSystem()

    def _call(self, op: str, path: str, effect: Callable[[], T]) -> T:
        return self.file_io.call(op, path, effect)

    def get_type_name(self) -> str:
        return "strata-simulated"

    def normalize_path(self, path: str) -> str:
        return path

    def __eq__(self, other: object) -> bool:
        return other is self

    def __ne__(self, other: object) -> bool:
        return other is not self

    def __hash__(self) -> int:
        return id(self)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self._call("file_info", ",".join(paths), lambda: self.fs.get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self._call("list", selector.base_dir, lambda: self.fs.get_file_info(selector))

    def create_dir(self, path: str, recursive: bool) -> None:
        self._call("mkdirs", path, lambda: self.fs.create_dir(path, recursive=recursive))

    def delete_dir(self, path: str) -> None:
        self._call("delete_dir", path, lambda: self.fs.delete_dir(path))

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self._call("delete_dir", path, lambda: self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok))

    def delete_root_dir_contents(self) -> None:
        raise OSError("simulated storage: deleting the root's contents is refused")

    def delete_file(self, path: str) -> None:
        self._call("delete", path, lambda: self.fs.delete_file(path))

    def move(self, src: str, dest: str) -> None:
        self._call("move", src, lambda: self.fs.move(src, dest))

    def copy_file(self, src: str, dest: str) -> None:
        self._call("copy", src, lambda: self.fs.copy_file(src, dest))

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self._call("open_input_file", path, lambda: self.fs.open_input_stream(path))

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self._call("open_input_file", path, lambda: self.fs.open_input_file(path))

    def open_output_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        return pa.PythonFile(_UploadOnClose(self.file_io, path), mode="w")

    def open_append_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        raise OSError("simulated storage is an object store: appending to a file is refused")


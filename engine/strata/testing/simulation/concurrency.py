"""Deterministic concurrency of the simulation: actors interleaved by a seed at every storage call.

Each actor (a writer, a compaction job, a maintenance job...) runs in its own thread, but exactly
one runs at a time: it holds the baton. At each storage call of the running actor, the
scheduler's seeded random stream picks who runs next (itself or another), so the interleaving is
a function of the seed, and so are the faults (``faults``: drawn from each actor's own stream in
its call order). What would make a run depend on the machine is replaced while ``World.run``
lasts, for actor threads only (other threads see the real thing):

* thread pools run their tasks inline in the submitting actor's thread (a writer's per-bucket
  pool, read and prefetch pools): a pool thread's storage calls in a racing order would reorder
  the actor's draws;
* ``time.sleep`` (retry backoff, lock waits) advances a virtual clock and is a switch point;
  ``time.monotonic`` reads that clock: backoff costs no wall time and timeouts fire at the same
  step every run;
* ``uuid.uuid4`` draws from a seeded stream, so file names, and with them the trace, repeat;
* the global ``random`` (the commit's backoff jitter, the lock's) is seeded, and restored after.

A JDBC-lock world publishes snapshots under a JDBC lock on a SQLite file, over a store without
conditional PUT (check-then-put with a window between the two), with lock timeouts and lease
expiry injected; otherwise snapshots are published by conditional PUT (atomic ``write_new``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, text

from strata.catalog.base import Catalog
from strata.catalog.filesystem import FileSystemCatalog
from strata.catalog.jdbc import JdbcCatalog
from strata.catalog.lock import LOCK_TABLE, JdbcCatalogLock, JdbcLock, LockAcquireTimeoutError
from strata.errors import CommitStateUnknownError
from strata.fs.file_io import LocalFileIO
from strata.testing.simulation.faults import ActorKilled, CallPlan, FaultConfig, FaultyFileIO, draw_plan, in_outage
from strata.testing.simulation.invariants import InvariantBroken

# short leases and waits keep a lock world's runs to few steps; the margin (a quarter of the
# lease) still leaves a commit room to write
LEASE_SECONDS = 20
LOCK_OPTIONS = {"lock.expire-time": f"{LEASE_SECONDS} s", "lock-acquire-timeout": "2 min",
                "lock-check-max-sleep": "2 s"}
DONE, NOT_DONE, UNKNOWN, KILLED = "done", "not_done", "unknown", "killed"


@dataclass
class Outcome:
    actor: str
    status: str  # "done" | "not_done" | "unknown" | "killed"
    value: object = None  # the actor's return value when done
    error: BaseException | None = None


class World:
    """One simulated storage world for one seed: a fault-injecting FileIO over a real local
    warehouse, a deterministic scheduler that switches between actors at every storage call,
    counters of faults and switches by kind."""

    def __init__(self, seed: int, warehouse: str, faults: FaultConfig, use_jdbc_lock: bool = False,
                 lapse_before_put: bool = True):
        self.seed = seed
        self.warehouse = warehouse.rstrip("/")
        self.faults = faults
        self.use_jdbc_lock = use_jdbc_lock
        # whether a lease may lapse between the holder's last lease check and its snapshot's PUT
        # (a check-then-put's check included): the documented limit of publishing under a lease
        # (README, Commit guarantees), which a run that looks for other bugs leaves out
        self.lapse_before_put = lapse_before_put
        self.counters: collections.Counter[str] = collections.Counter()
        # every step in order: ("call", actor, op, path, fault) and ("switch", from, to); file
        # paths are relative to the warehouse, so two runs of a seed compare equal
        self.trace: list[tuple[str, ...]] = []
        self._store = LocalFileIO()
        self._schedule = random.Random(f"schedule:{seed}")
        self._uuids = random.Random(f"uuid:{seed}")
        self._streams: dict[str, random.Random] = {}
        self._baton = threading.Condition()
        self._turn: str | None = None
        self._actor_of: dict[int, str] = {}  # thread id -> actor
        self._runnable: list[str] = []  # actors of the current run not finished, in name order
        self._dead: set[str] = set()
        self._outage: dict[str, int] = {}  # actor -> calls its outage still fails
        self._exclusive: dict[str, str] = {}  # local lock file -> holding actor
        self._clock = 0.0  # virtual seconds elapsed in runs
        self._clock_origin = time.monotonic()
        self._leases: dict[tuple[str, str], float] = {}  # (lock id, owner) -> virtual time acquired
        self._lease_actors: dict[tuple[str, str], str] = {}  # (lock id, owner) -> actor that took it
        self._held: dict[str, SimulatedJdbcLock] = {}  # actor -> JDBC lock it holds
        self._published: set[str] = set()  # actors of the current run that wrote a snapshot file
        # actors between a lease check that passed and their snapshot's put: a lapse there is the
        # documented limit (lapse_before_put)
        self._put_window: set[str] = set()
        os.makedirs(self.warehouse, exist_ok=True)

    # -- catalogs ---------------------------------------------------------------------------
    def catalog(self, actor: str | None = None) -> Catalog:
        """A catalog whose storage calls go through `actor`'s faults and switch points (only on
        that actor's thread during a run); None: the checker's fault-free view."""
        file_io = FaultyFileIO(self._store, self, actor, object_store=True, check_then_put=self.use_jdbc_lock)
        if not self.use_jdbc_lock:
            return FileSystemCatalog(self.warehouse, file_io=file_io)
        options = {"uri": f"sqlite:///{self.warehouse}/catalog.sqlite", **LOCK_OPTIONS}
        catalog = JdbcCatalog(self.warehouse, options, file_io=file_io)
        assert catalog.locks is not None  # an object store without conditional PUT: publishes under the lock
        catalog.locks = SimulatedCatalogLock(catalog.locks, self, actor)
        return catalog

    # -- running actors ---------------------------------------------------------------------
    def run(self, actors: dict[str, Callable[[Catalog], Any]]) -> dict[str, Outcome]:
        """Run the actors interleaved, each with its own catalog; every one's outcome. Actors
        are started in name order, so the dict's order does not matter."""
        names = sorted(actors)
        if not names:
            return {}
        outcomes: dict[str, Outcome] = {}
        catalogs = {name: self.catalog(name) for name in names}
        threads = [threading.Thread(target=self._actor_main, args=(name, actors[name], catalogs[name], outcomes),
                                    name=f"sim-{name}", daemon=True) for name in names]
        self._dead -= set(names)
        self._published -= set(names)
        leases_before = set(self._leases)  # a dead actor's of an earlier run stay until they expire
        with self._baton:
            self._runnable = list(names)
        with _patched_runtime(self):
            for thread in threads:
                thread.start()
            with self._baton:
                self._turn = self._schedule.choice(self._runnable)
                self._baton.notify_all()
                self._baton.wait_for(lambda: not self._runnable)
            for thread in threads:
                thread.join()
        self._check_no_leaked_lease(names, outcomes, leases_before)
        return {name: outcomes[name] for name in names}

    def _check_no_leaked_lease(self, names: list[str], outcomes: dict[str, Outcome],
                               leases_before: set[tuple[str, str]]) -> None:
        """A live actor that returned holding a JDBC lease leaked it: waiters only take over when
        it expires, so outcomes stay right and the leak shows only here (a dead one's stays)."""
        for key, actor in self._lease_actors.items():
            lock_id = key[0]
            if key in self._leases and key not in leases_before and actor in names and actor not in self._dead:
                outcome = outcomes[actor]
                raise InvariantBroken(f"{actor} returned ({outcome.status}: {outcome.error!r}) still holding "
                                      f"the JDBC lock {lock_id!r}: its lease was never released")

    def _actor_main(self, name: str, act: Callable[[Catalog], Any], catalog: Catalog,
                    outcomes: dict[str, Outcome]) -> None:
        with self._baton:
            self._actor_of[threading.get_ident()] = name
            self._baton.wait_for(lambda: self._turn == name)
        try:
            outcome = Outcome(name, DONE, act(catalog))
        except ActorKilled as exc:
            outcome = Outcome(name, KILLED, error=exc)
        except CommitStateUnknownError as exc:
            outcome = Outcome(name, UNKNOWN, error=exc)
        except BaseException as exc:  # an actor's failure is its outcome
            outcome = Outcome(name, NOT_DONE, error=exc)
        self.counters[f"outcome:{outcome.status}"] += 1
        self.trace.append(("outcome", name, outcome.status, type(outcome.error).__name__ if outcome.error else ""))
        with self._baton:
            outcomes[name] = outcome
            self._held.pop(name, None)
            self._runnable.remove(name)
            del self._actor_of[threading.get_ident()]
            self._turn = self._schedule.choice(self._runnable) if self._runnable else None
            self._baton.notify_all()

    def current_actor(self) -> str | None:
        """The actor whose thread this is, during a run (None elsewhere)."""
        return self._actor_of.get(threading.get_ident())

    # -- the scheduler ------------------------------------------------------------------------
    def _hand_over(self, me: str, to: str) -> None:
        """Give the baton to `to` and wait until it comes back (called holding the condition)."""
        self.counters["switch"] += 1
        self.trace.append(("switch", me, to))
        self._turn = to
        self._baton.notify_all()
        self._baton.wait_for(lambda: self._turn == me)

    def switch_point(self, actor: str) -> None:
        """The scheduler's choice of who runs next (`actor` itself included)."""
        with self._baton:
            chosen = self._schedule.choice(self._runnable)
            if chosen != actor:
                self._hand_over(actor, chosen)

    def competitor_runs(self, actor: str | None) -> None:
        """Another actor runs now, if there is one (a slow call; a lock waited for)."""
        if actor is None or self.current_actor() != actor:
            return
        with self._baton:
            others = [name for name in self._runnable if name != actor]
            if others:
                self._hand_over(actor, self._schedule.choice(others))

    def plan_call(self, actor: str | None, op: str, path: str) -> CallPlan:
        """A storage call of `actor`: a switch point, then its faults from the actor's stream.
        Fault-free and without a switch off the actor's thread (setup, the checker)."""
        if actor is None or self.current_actor() != actor:
            return CallPlan()
        if actor in self._dead:
            raise ActorKilled(f"{actor} is dead: {op} {path} never reaches storage")
        self.switch_point(actor)
        stream = self._stream(actor)
        if actor in self._held and stream.random() < self.faults.lease_expiry \
                and (self.lapse_before_put or actor not in self._put_window):
            self._lapse_lease(actor)
        if "/snapshot/snapshot-" in path and op in ("write_new", "write_bytes"):
            self._put_window.discard(actor)  # the put: the window closes with it
        plan = draw_plan(self.faults, stream, op)
        if not self.faults.hits(path):
            plan = CallPlan(slow=plan.slow)
        elif self._outage.get(actor, 0) > 0:
            self._outage[actor] -= 1
            self.counters["fault:outage"] += 1
            plan = in_outage(plan)
        elif self.faults.only_op and op != self.faults.only_op:
            plan = CallPlan(slow=plan.slow)
        elif plan.outage:
            self._outage[actor] = plan.outage
        fault = plan.before or plan.after or ""
        if fault:
            self.counters[f"fault:{fault}"] += 1
        if plan.slow:
            self.counters["fault:slow"] += 1
        if "kill" in (plan.before, plan.after):
            self._dead.add(actor)
        self.counters[f"call:{op}"] += 1
        self.trace.append(("call", actor, op, self._relative(path), fault, "slow" if plan.slow else ""))
        return plan

    def landed(self, actor: str | None, op: str, path: str) -> None:
        if op == "write_new" and "/snapshot/snapshot-" in path and actor is not None \
                and self.current_actor() == actor:
            self._published.add(actor)

    def _stream(self, actor: str) -> random.Random:
        if actor not in self._streams:
            self._streams[actor] = random.Random(f"faults:{self.seed}:{actor}")
        return self._streams[actor]

    def _relative(self, path: str) -> str:
        return ",".join(p[len(self.warehouse):] if p.startswith(self.warehouse) else p for p in path.split(","))

    @contextlib.contextmanager
    def exclusive(self, actor: str | None, path: str) -> Iterator[object]:
        """A lock file held by one actor at a time; a waiter lets others run until it is free."""
        owner = actor or "<checker>"
        while self._exclusive.get(path, owner) != owner:
            if self.current_actor() != actor:
                raise RuntimeError(f"{path} is locked by {self._exclusive[path]} outside the simulation's run")
            self.competitor_runs(actor)
        self._exclusive[path] = owner
        try:
            yield path
        finally:
            del self._exclusive[path]

    # -- virtual time ------------------------------------------------------------------------
    def sleep(self, seconds: float) -> None:
        """An actor's sleep: the clock moves on and others may run."""
        actor = self.current_actor()
        assert actor is not None
        if actor in self._dead:
            raise ActorKilled(f"{actor} is dead")
        self._clock += max(0.0, seconds)
        self.counters["sleep"] += 1
        self.switch_point(actor)

    def settle(self) -> None:
        """Time passes between two runs: a lease a dead holder left runs out before the next
        lock is wanted (the checker, outside runs, would wait for it on the wall's clock)."""
        if self._leases:
            self._clock += LEASE_SECONDS + 1

    def monotonic(self) -> float:
        return self._clock_origin + self._clock

    @property
    def clock(self) -> float:
        """Virtual seconds the actors have slept (or stalled) in this world's runs."""
        return self._clock

    @property
    def live_leases(self) -> int:
        """JDBC lock rows taken in runs and not released (a dead holder's stay until they expire)."""
        return len(self._leases)

    # -- the JDBC lock -----------------------------------------------------------------------
    def lock_step(self, actor: str | None, lock_id: str) -> None:
        """Before acquiring: a switch point, and an injected acquire timeout."""
        if actor is None or self.current_actor() != actor:
            return
        if actor in self._dead:
            raise ActorKilled(f"{actor} is dead: it acquires no lock")
        self.switch_point(actor)
        published = actor in self._published
        rate = self.faults.lock_timeout_after_publish if published else self.faults.lock_timeout
        if self._stream(actor).random() < rate:
            self.counters["fault:lock_timeout"] += 1
            if published:
                self.counters["fault:lock_timeout_after_publish"] += 1
            self.trace.append(("call", actor, "lock", lock_id, "lock_timeout", ""))
            raise LockAcquireTimeoutError(f"simulated: could not acquire lock {lock_id!r}: another writer holds it")
        self.trace.append(("call", actor, "lock", lock_id, "", ""))

    def _lapse_lease(self, actor: str) -> None:
        """The holder stalls past its lease (a GC pause, a suspended VM): the clock moves on by a
        whole lease, and others run meanwhile, free to take the lock over."""
        lock = self._held[actor]
        self.counters["fault:lease_expiry"] += 1
        self.trace.append(("call", actor, "stall", lock.lock_id, "lease_expiry", ""))
        self._clock += lock.expire_seconds + 1
        self.competitor_runs(actor)

    def lease_taken(self, lock: SimulatedJdbcLock) -> None:
        self._leases[(lock.lock_id, lock.owner)] = self._clock
        if lock.actor is not None:
            self._lease_actors[(lock.lock_id, lock.owner)] = lock.actor
        if lock.actor is not None and self.current_actor() == lock.actor:
            self._held[lock.actor] = lock

    def lease_checked(self, lock: SimulatedJdbcLock, valid_for: float) -> None:
        """The holder asked how long its lease lasts, and it is held: a put may follow."""
        if valid_for > 0 and lock.actor is not None and self._held.get(lock.actor) is lock:
            self._put_window.add(lock.actor)

    def lease_released(self, lock: SimulatedJdbcLock) -> None:
        if lock.actor is not None:
            self._put_window.discard(lock.actor)
        self._leases.pop((lock.lock_id, lock.owner), None)
        self._lease_actors.pop((lock.lock_id, lock.owner), None)
        if lock.actor is not None and self._held.get(lock.actor) is lock:
            del self._held[lock.actor]

    def age_lease_rows(self, engine: Engine, lock_id: str) -> None:
        """Date the lock's row back by its age on the virtual clock, so that the database's own
        staleness test (by its real clock) sees the time the actors slept."""
        for (held_id, owner), since in list(self._leases.items()):
            if held_id != lock_id:
                continue
            age = int(self._clock - since)
            with engine.begin() as conn:
                conn.execute(text(f"UPDATE {LOCK_TABLE} SET acquired_at = datetime('now', :shift) "
                                  "WHERE lock_id = :id AND lock_owner = :owner"),
                             {"shift": f"-{age} seconds", "id": lock_id, "owner": owner})

    def is_dead(self, actor: str | None) -> bool:
        return actor is not None and actor in self._dead and self.current_actor() == actor


class SimulatedCatalogLock(JdbcCatalogLock):
    """The catalog's lock factory, handing out locks with the simulation's faults."""

    def __init__(self, inner: JdbcCatalogLock, world: World, actor: str | None):
        self.__dict__.update(inner.__dict__)  # the catalog's options, engine and key, as built
        self.world = world
        self.actor = actor

    def lock(self, database: str, table: str) -> JdbcLock:
        return SimulatedJdbcLock(self.world, self.actor, self.engine, self.lock_id(database, table),
                                 self.acquire_timeout_ms, self.check_max_sleep_ms, self.expire_seconds)


class SimulatedJdbcLock(JdbcLock):
    """A JDBC lock whose acquisition is a switch point and may time out (injected), whose lease
    ages by the virtual clock, and which a dead actor never releases (its row expires)."""

    def __init__(self, world: World, actor: str | None, *args: Any):
        super().__init__(*args)
        self.world = world
        self.actor = actor

    def acquire(self) -> None:
        self.world.lock_step(self.actor, self.lock_id)
        super().acquire()

    def _insert(self) -> bool:
        if not super()._insert():
            return False
        self.world.lease_taken(self)
        return True

    def expire_stale(self) -> int:
        self.world.age_lease_rows(self.engine, self.lock_id)
        return super().expire_stale()

    def valid_for(self) -> float:
        seconds = super().valid_for()
        self.world.lease_checked(self, seconds)
        return seconds

    def release(self) -> bool:
        if self.world.is_dead(self.actor):
            raise ActorKilled(f"{self.actor} is dead: its lock {self.lock_id} stays until its lease expires")
        self.world.lease_released(self)
        return super().release()


# -- what a run replaces, for actor threads ----------------------------------------------------
@contextlib.contextmanager
def _patched_runtime(world: World) -> Iterator[None]:
    real_sleep, real_monotonic, real_uuid4 = time.sleep, time.monotonic, uuid.uuid4
    real_submit = ThreadPoolExecutor.submit
    random_state = random.getstate()

    def sleep(seconds: float) -> None:
        if world.current_actor() is None:
            real_sleep(seconds)
        else:
            world.sleep(seconds)

    def monotonic() -> float:
        return real_monotonic() if world.current_actor() is None else world.monotonic()

    def uuid4() -> uuid.UUID:
        if world.current_actor() is None:
            return real_uuid4()
        return uuid.UUID(int=world._uuids.getrandbits(128), version=4)

    def submit(pool: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if world.current_actor() is None:
            return real_submit(pool, fn, *args, **kwargs)
        return _run_inline(fn, *args, **kwargs)

    random.seed(f"global:{world.seed}")
    time.sleep, time.monotonic, uuid.uuid4 = sleep, monotonic, uuid4  # type: ignore[assignment]
    ThreadPoolExecutor.submit = submit  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        time.sleep, time.monotonic, uuid.uuid4 = real_sleep, real_monotonic, real_uuid4
        ThreadPoolExecutor.submit = real_submit  # type: ignore[method-assign]
        random.setstate(random_state)


def _run_inline(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
    """A pool task run at once in the actor's thread; a kill unwinds the actor, not the future."""
    future: Future[Any] = Future()
    try:
        future.set_result(fn(*args, **kwargs))
    except ActorKilled:
        raise
    except BaseException as exc:  # the future carries it, as a pool's would
        future.set_exception(exc)
    return future

"""`strata-services {install,up,down,check,status,env} [names...]`: drive the local services.

`strata-services run NAME... -- COMMAND...` runs a command with those services up and their client
environment set, then stops the ones it had to start (those already running stay up).

`strata-services prebuild` does the slow set-ups of the container tests ahead of them: helm, the
stack's images, and their copy in the cluster node's image store (``make test`` runs it beside the
engine tests; see strata_platform.services.prebuild).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from strata_platform.services import registry


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        argv, command = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    parser = argparse.ArgumentParser(prog="strata-services", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["install", "up", "down", "check", "status", "env", "run", "prebuild"])
    parser.add_argument("names", nargs="*", help="services (default: all)")
    parser.add_argument("--except", dest="excluded", action="append", default=[], metavar="NAME",
                        help="leave this service out of the default 'all' (make test builds kubernetes beside)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names + args.excluded if name not in registry.SERVICES]
    if unknown:
        parser.error(f"unknown service(s) {', '.join(unknown)}; known: {', '.join(registry.SERVICES)}")
    if args.action == "run":
        if not command:
            parser.error("run needs a command after --")
        return run_with(args.names, command)
    if args.action == "prebuild":
        if args.names:
            parser.error("prebuild takes no service names")
        return prebuild()
    names = [name for name in args.names or registry.SERVICES if name not in args.excluded]
    if args.action == "install":
        install(names)
        return 0
    failed = False
    if args.action == "down":
        names = list(reversed(names))
    for name in names:
        service = registry.get(name)
        if args.action == "up":
            seconds = service.start()
            print(f"{name:<11} up in {seconds:.1f}s", flush=True)
        elif args.action == "down":
            service.stop()
            print(f"{name:<11} down", flush=True)
        elif args.action == "status":
            pid = service.running_pid()
            print(f"{name:<11} {'running pid ' + str(pid) if pid else 'stopped'}", flush=True)
        elif args.action == "env":
            for key, value in service.client_env().items():
                print(f"export {key}={value}")
        else:
            result = service.run_check()
            service.stop()
            print(result.line(), flush=True)
            failed |= not result.ok
    return 1 if failed else 0


# installs that are long builds on a cold machine (minutes of CPU at the lowest priority): they run
# beside the others, which mostly download
BACKGROUND_INSTALLS = ("kubernetes",)


def install(names: list[str]) -> None:
    """Install each service (cached); the long builds overlap the downloads of the rest."""
    background = [n for n in names if n in BACKGROUND_INSTALLS and len(names) > 1]
    with ThreadPoolExecutor(max_workers=max(1, len(background))) as pool:
        builds = {name: pool.submit(_install_one, name) for name in background}
        for name in names:
            if name not in builds:
                _install_one(name)
        for future in builds.values():
            future.result()


def _install_one(name: str) -> None:
    service = registry.get(name)
    service.install()
    print(f"{name:<11} installed ({service.version()})", flush=True)


def prebuild() -> int:
    from strata_platform.services.prebuild import prebuild as build_all

    lock = threading.Lock()

    def report(line: str) -> None:
        with lock:
            print(line, flush=True)

    began = time.monotonic()
    try:
        build_all(report)
    except Exception as exc:
        print(f"prebuild failed after {time.monotonic() - began:.1f}s: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)
        return 1
    print(f"prebuild done in {time.monotonic() - began:.1f}s", flush=True)
    return 0


def run_with(names: list[str], command: list[str]) -> int:
    services = [registry.get(name) for name in names]
    started = []
    env = dict(os.environ)
    try:
        for service in services:
            if service.running_pid() is None:
                started.append(service)
            seconds = service.start()
            print(f"{service.name:<11} up in {seconds:.1f}s", file=sys.stderr, flush=True)
            env.update(service.client_env())
        return subprocess.run(command, env=env, check=False).returncode
    finally:
        for service in reversed(started):
            service.stop()
            print(f"{service.name:<11} down", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""`strata-services {install,up,down,check,status,env} [names...]`: drive the local services."""

from __future__ import annotations

import argparse
import sys

from strata_platform.services import registry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="strata-services", description=__doc__)
    parser.add_argument("action", choices=["install", "up", "down", "check", "status", "env"])
    parser.add_argument("names", nargs="*", help="services (default: all)")
    args = parser.parse_args(argv)
    names = args.names or list(registry.SERVICES)
    failed = False
    if args.action == "down":
        names = list(reversed(names))
    for name in names:
        service = registry.get(name)
        if args.action == "install":
            service.install()
            print(f"{name:<11} installed ({service.version()})", flush=True)
        elif args.action == "up":
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


if __name__ == "__main__":
    sys.exit(main())

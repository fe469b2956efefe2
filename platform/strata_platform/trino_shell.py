"""An interactive SQL prompt on Trino's ``strata`` catalog: ``python -m strata_platform.trino_shell``
(``make trino-shell`` starts MinIO, the Iceberg REST catalog and Trino first when they are not running).

Statements end with ``;`` and may span lines; results print as a table, errors as one line (no
trace). ``quit``, ``exit`` or Ctrl-D leave; Ctrl-C abandons the statement being typed or cancels the
running query. History is kept in ``~/.strata_trino_history``. Without a terminal the statements are
read from stdin and run in order (``echo 'SHOW SCHEMAS;' | python -m strata_platform.trino_shell``);
``-e 'SQL'`` runs the given statements and exits.

Trino is found at ``--url`` or ``STRATA_TRINO_URL`` (what ``strata-services env trino`` exports),
default ``http://127.0.0.1:18080``; the session's catalog is ``--catalog`` (default ``strata``),
its schema ``--schema`` (or ``USE <schema>;``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import sys
import time
import urllib.parse
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

DEFAULT_URL = "http://127.0.0.1:18080"
HISTORY = Path.home() / ".strata_trino_history"
MAX_WIDTH = 60  # a wider value is cut, with an ellipsis


def split_statements(text: str) -> tuple[list[str], str]:
    """The complete ``;``-terminated statements of `text` (without the ``;``) and the incomplete
    rest. A ``;`` inside quotes ('string', "identifier") or a ``--`` comment does not end one."""
    statements: list[str] = []
    current: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            current.append(ch)
            if ch == quote:
                if i + 1 < len(text) and text[i + 1] == quote:  # '' or "" escapes the quote
                    current.append(text[i + 1])
                    i += 1
                else:
                    quote = None
        elif ch in ("'", '"'):
            quote = ch
            current.append(ch)
        elif ch == "-" and text.startswith("--", i):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            current.append(text[i:end])
            i = end - 1
        elif ch == ";":
            statement = _strip_comments("".join(current)).strip()
            if statement:
                statements.append(statement)
            current = []
        else:
            current.append(ch)
        i += 1
    return statements, "".join(current)


def _strip_comments(statement: str) -> str:
    """`statement` without its whole-line ``--`` comments (Trino takes the rest as it is)."""
    return "\n".join(line for line in statement.splitlines() if not line.lstrip().startswith("--"))


def format_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray):
        return "X'" + bytes(value).hex() + "'"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, float | Decimal | int) and not isinstance(value, bool):
        return str(value)
    text = str(value).replace("\n", "\\n")
    return text if len(text) <= MAX_WIDTH else text[:MAX_WIDTH - 1] + "…"


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An aligned text table (numbers right-aligned), with a line count."""
    cells = [[format_value(v) for v in row] for row in rows]
    def is_number(value: Any) -> bool:
        return isinstance(value, int | float | Decimal) and not isinstance(value, bool)

    present = [[row[i] for row in rows if row[i] is not None] for i in range(len(columns))]
    numeric = [bool(values) and all(is_number(v) for v in values) for values in present]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return " | ".join(v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i])
                          for i, v in enumerate(values)).rstrip()

    out = [line(columns), "-+-".join("-" * w for w in widths), *(line(r) for r in cells)]
    out.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(out)


class Shell:
    def __init__(self, url: str, catalog: str, schema: str | None, user: str, out: TextIO = sys.stdout):
        import trino

        parsed = urllib.parse.urlsplit(url)
        self.connection = trino.dbapi.connect(host=parsed.hostname or "127.0.0.1", port=parsed.port or 8080,
                                              http_scheme=parsed.scheme or "http", user=user, catalog=catalog,
                                              schema=schema)
        self.out = out

    def execute(self, statement: str) -> bool:
        """Run one statement and print its result or its error; True if it succeeded."""
        import trino

        cursor = self.connection.cursor()
        started = time.perf_counter()
        try:
            cursor.execute(statement)
            rows = cursor.fetchall()
            columns = [d[0] for d in cursor.description or []]
        except KeyboardInterrupt:
            _cancel(cursor)
            print("Query cancelled.", file=self.out)
            return False
        except trino.exceptions.TrinoQueryError as exc:
            print(f"ERROR: {exc.error_name}: {exc.message}", file=self.out)
            return False
        except Exception as exc:  # connection refused, a timeout, an HTTP error: one line, no trace
            print(f"ERROR: {type(exc).__name__}: {exc}", file=self.out)
            return False
        finally:
            cursor.close()
        seconds = time.perf_counter() - started
        if columns:
            print(format_table(columns, rows), file=self.out)
        update = getattr(cursor, "update_type", None)
        if update:
            print(update, file=self.out)
        print(f"[{seconds:.2f}s]\n", file=self.out)
        return True

    def run_text(self, text: str) -> int:
        """Run every statement of `text` (a missing final ``;`` is tolerated); 1 if any failed."""
        statements, rest = split_statements(text)
        if _strip_comments(rest).strip():
            statements.append(_strip_comments(rest).strip())
        failed = False
        for statement in statements:
            failed |= not self.execute(statement)
        return 1 if failed else 0

    def interact(self, prompts: tuple[str, str] = ("strata> ", "     -> ")) -> int:
        _readline()
        print(f"Trino SQL on catalog {self.connection.catalog!r}: end statements with ';', quit with "
              "'quit' or Ctrl-D.", file=self.out)
        buffer = ""
        while True:
            try:
                line = input(prompts[1] if buffer.strip() else prompts[0])
            except EOFError:
                print(file=self.out)
                return 0
            except KeyboardInterrupt:  # abandon the statement being typed
                print(file=self.out)
                buffer = ""
                continue
            if not buffer.strip() and line.strip().rstrip(";").lower() in ("quit", "exit", r"\q"):
                return 0
            buffer += line + "\n"
            statements, buffer = split_statements(buffer)
            for statement in statements:
                self.execute(statement)


def _cancel(cursor: Any) -> None:
    with contextlib.suppress(Exception):
        cursor.cancel()


def _readline() -> None:
    try:
        import atexit
        import readline
    except ImportError:  # no readline (e.g. Windows): plain input()
        return
    with contextlib.suppress(OSError):
        readline.read_history_file(HISTORY)
    readline.set_history_length(1000)

    def save() -> None:
        with contextlib.suppress(OSError):
            readline.write_history_file(HISTORY)

    atexit.register(save)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strata_platform.trino_shell", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("STRATA_TRINO_URL", DEFAULT_URL), help="Trino's URL")
    parser.add_argument("--catalog", default="strata", help="the session's catalog (default strata)")
    parser.add_argument("--schema", default=None, help="the session's schema (a Strata database)")
    parser.add_argument("--user", default=os.environ.get("USER", "strata"), help="Trino user name")
    parser.add_argument("-e", "--execute", default=None, help="run these statements and exit")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        shell = Shell(args.url, args.catalog, args.schema, args.user)
    except ImportError:
        print("ERROR: the trino client is not installed (pip install 'strata[trino]')", file=sys.stderr)
        return 2
    if args.execute is not None:
        return shell.run_text(args.execute)
    if not sys.stdin.isatty():
        return shell.run_text(sys.stdin.read())
    return shell.interact()


if __name__ == "__main__":
    sys.exit(main())

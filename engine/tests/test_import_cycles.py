"""No import cycle in engine/strata, counting every import: those inside functions and those under
TYPE_CHECKING too. The layers contract in ``make lint`` only sees imports that point up a layer; a
cycle between modules of one layer (or of one package) is caught here."""

from __future__ import annotations

import grimp


def import_cycles(package: str) -> list[tuple[str, ...]]:
    """One cycle per import that closes one: (importer, imported, ..., importer)."""
    graph = grimp.build_graph(package, include_external_packages=False, cache_dir=None)
    cycles: dict[frozenset[str], tuple[str, ...]] = {}
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                cycles.setdefault(frozenset(back), (importer, *back))
    return list(cycles.values())


def test_engine_has_no_import_cycle() -> None:
    cycles = import_cycles("strata")
    assert not cycles, "import cycles in engine/strata:\n" + "\n".join(" -> ".join(c) for c in cycles)

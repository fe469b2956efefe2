"""Fault injection between Strata and the services it stores into (strata_platform.faults.proxy)."""

from strata_platform.faults.proxy import FAULT_KINDS, FaultProxy, Faults

__all__ = ["FAULT_KINDS", "FaultProxy", "Faults"]

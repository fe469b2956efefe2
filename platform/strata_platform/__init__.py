"""Strata's platform: deployable jobs and services, and local provisioning of real components."""

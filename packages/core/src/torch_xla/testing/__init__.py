"""Test helpers shipped with the core; `conformance` is the kit plugin vendors run."""

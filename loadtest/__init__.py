"""Locust load tests of cmq's native HTTP API (see loadtest/README.md); not part of the package."""

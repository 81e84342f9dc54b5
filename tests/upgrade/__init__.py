"""Upgrades between releases: the previous release's code from the git history
(`tests.upgrade.releases`), rolling upgrades and downgrades on real processes."""

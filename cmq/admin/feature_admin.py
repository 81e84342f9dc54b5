"""`FeatureAdmin`: list the feature flags with each node's support, and enable them.

A flag (`cmq.upgrade.features`) is enabled only when every registered node supports it, asked live
at that moment over the peer connections (`cmq.admin.peer_releases.PeerReleases.ask_now`): a node
that does not answer, or answers from a release without the flag, makes the request fail with
`FeatureUnsupported` naming it, and nothing changes. Then the enabling is a replicated,
idempotent catalog command (`cmq.catalog.meta.CatalogMachine.enable_feature`). A node that joins
later with a release lacking an enabled flag refuses to start (`cmq.node.queue_node`); disabling is
not offered.
"""

from __future__ import annotations

from dataclasses import dataclass

from cmq.admin.peer_releases import PeerReleases
from cmq.catalog import META_GROUP
from cmq.catalog.meta import CatalogMachine
from cmq.errors import FeatureUnsupported, InvalidParameter
from cmq.routing.router import Router
from cmq.routing.rpc import CatalogCall
from cmq.upgrade import features


@dataclass(frozen=True, slots=True)
class FeatureView:
    """One flag as `cmq cluster features` shows it."""

    name: str
    since: str
    description: str
    enabled: bool
    supported_by: tuple[int, ...]
    """Registered nodes that answered with a release supporting it."""
    missing: tuple[int, ...]
    """Registered nodes that did not answer, or run a release without it."""


class FeatureAdmin:
    """The feature flags of the cluster (see the module docstring)."""

    def __init__(self, catalog: CatalogMachine, router: Router, releases: PeerReleases) -> None:
        self._catalog = catalog
        self._router = router
        self._releases = releases

    async def views(self) -> list[FeatureView]:
        """Every flag this release knows, plus any enabled one it does not, with who supports
        it now."""
        answers = await self._releases.ask_now()
        names = [f.name for f in features.FEATURES] + features.unknown(self._catalog.features)
        out = []
        for name in names:
            flag = features.by_name(name)
            ok = tuple(
                n for n, a in sorted(answers.items()) if a is not None and name in a.features
            )
            out.append(
                FeatureView(
                    name=name,
                    since=flag.since if flag else "",
                    description=flag.description if flag else "not known to this release",
                    enabled=self._catalog.feature_enabled(name),
                    supported_by=ok,
                    missing=tuple(n for n in sorted(answers) if n not in ok),
                )
            )
        return out

    async def enable(self, names: list[str] | None) -> list[str]:
        """Enable ``names`` (None: every flag this release knows), each once every registered
        node supports it; the names newly enabled, in order. `InvalidParameter` for a name this
        release does not know, `FeatureUnsupported` naming a node that lacks one (nothing is
        enabled then)."""
        wanted = [f.name for f in features.FEATURES] if names is None else list(names)
        for name in wanted:
            if features.by_name(name) is None:
                raise InvalidParameter(
                    f"unknown feature flag {name!r}; this release knows "
                    f"{', '.join(sorted(features.KNOWN))}"
                )
        todo = [n for n in wanted if not self._catalog.feature_enabled(n)]
        if not todo:
            return []
        answers = await self._releases.ask_now()
        for node, seen in sorted(answers.items()):
            if seen is None:
                raise FeatureUnsupported(
                    f"node {node} did not answer: every registered node must support "
                    f"{', '.join(todo)} before it is enabled (start the node, or remove it)"
                )
            lacking = [n for n in todo if n not in seen.features]
            if lacking:
                raise FeatureUnsupported(
                    f"node {node} runs release {seen.release}, which does not support "
                    f"{', '.join(lacking)}: upgrade it first"
                )
        done = []
        for name in todo:
            changed = await self._router.run(
                CatalogCall(META_GROUP, CatalogMachine.enable_feature(name))
            )
            if changed:
                done.append(name)
        return done

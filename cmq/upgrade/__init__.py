"""Living with versions: this release's identity (`release`), feature flags (`features`,
`feature_admin`, the data directory's `feature_marker`) and what peers run (`peer_releases`)."""

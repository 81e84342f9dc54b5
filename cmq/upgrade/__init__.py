"""What this release is (`release`: its version and the peer protocols it speaks) and the
feature flags it knows (`features`). The node checks them at start and enables flags through
`cmq.admin.feature_admin`; the data directory's marker is `cmq.node.feature_marker`."""

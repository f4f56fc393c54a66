"""Build-time tooling: manifest, engine snapshots, rendering, platform client. Never shipped in
an image's runtime package (`common/`)."""

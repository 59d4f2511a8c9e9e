"""Shared machinery for labs: manifests, source fingerprints, environment capture, atomic records."""

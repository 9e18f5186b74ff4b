"""Models: the registry of immutable versions, their manifests, the preprocessing that
export and workers share, and the torch export of the reference models."""

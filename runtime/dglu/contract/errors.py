"""The errors the contract raises (standard library only; dglu.errors re-exports them)."""


class DgluError(Exception):
    """Base class of every error dglu raises on purpose."""


class ManifestError(DgluError, ValueError):
    """A manifest.json that cannot be used: unreadable, wrong schema, malformed entry."""

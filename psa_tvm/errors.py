"""The one error type for a build that is not there."""

from __future__ import annotations


class ArtifactNotFoundError(LookupError):
    """No artifact (manifest, build, binary or library) for what was asked, and none could be
    built here. The message says what is missing and the command or package that provides it."""

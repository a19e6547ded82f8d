"""gpusched.api — skeleton: its capability arrives with its own issue (see README)."""

from gpusched.api.settings import ApiSettings

__all__ = ["ApiSettings"]

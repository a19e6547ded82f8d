"""gpusched.forecaster — skeleton: its capability arrives with its own issue (see README)."""

from gpusched.forecaster.settings import ForecasterSettings

__all__ = ["ForecasterSettings"]

"""gpusched.dispatcher — skeleton: its capability arrives with its own issue (see README)."""

from gpusched.dispatcher.settings import DispatcherSettings

__all__ = ["DispatcherSettings"]

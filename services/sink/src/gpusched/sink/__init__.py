"""gpusched.sink — skeleton: its capability arrives with its own issue (see README)."""

from gpusched.sink.settings import SinkSettings

__all__ = ["SinkSettings"]

"""gpusched.processor — skeleton: its capability arrives with its own issue (see README)."""

from gpusched.processor.settings import ProcessorSettings

__all__ = ["ProcessorSettings"]

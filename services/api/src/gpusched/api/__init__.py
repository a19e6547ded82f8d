"""gpusched.api: the `gpusched` command line and the REST API."""

from gpusched.api.settings import ApiSettings

__all__ = ["ApiSettings"]

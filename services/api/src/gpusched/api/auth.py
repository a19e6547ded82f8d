"""Bearer-token enforcement for the REST API: ``Access`` gives each route the role it needs.

401 when no token, a malformed one, an unknown or a revoked one is presented (with
``WWW-Authenticate: Bearer``); 403 when the token's role is below the route's, or (checked
by the route) it does not act for the tenant concerned. Both say what was missing. With
``GPUSCHED_API_AUTH=off`` every request acts as an anonymous admin: only for tests that
say why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpusched.contracts.tokens import ALL_TENANTS, Role, TokenFile, TokenRecord

__all__ = ["Access", "require_tenant"]

_BEARER = HTTPBearer(auto_error=False, description="a token from `gpusched token create`")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]

_ANONYMOUS = TokenRecord(
    id="-",
    name="anonymous (GPUSCHED_API_AUTH=off)",
    role=Role.ADMIN,
    tenants=[ALL_TENANTS],
    secret_hash="-",
    created_at=datetime(2026, 1, 1, tzinfo=UTC),
)


class Access:
    """The API's token check, as FastAPI dependencies: ``access.needs(Role.VIEWER)``."""

    def __init__(self, tokens: TokenFile, enabled: bool) -> None:
        self.tokens, self.enabled = tokens, enabled

    def needs(self, role: Role) -> Callable[[Credentials], Awaitable[TokenRecord]]:
        async def check(credentials: Credentials) -> TokenRecord:
            if not self.enabled:
                return _ANONYMOUS
            if credentials is None:
                raise _unauthorized("no bearer token: send 'Authorization: Bearer <token>'")
            who = self.tokens.identify(credentials.credentials)
            if who is None:
                raise _unauthorized("the token is unknown, malformed or revoked")
            if not who.role.holds(role):
                raise HTTPException(
                    403,
                    f"token {who.name!r} has role {who.role.value}; this needs {role.value} "
                    "or above",
                )
            return who

        return check


def require_tenant(who: TokenRecord, tenant: str) -> None:
    """403 unless the token acts for ``tenant``."""
    if not who.acts_for(tenant):
        held = ", ".join(who.tenants) or "none"
        raise HTTPException(
            403, f"token {who.name!r} does not act for tenant {tenant!r} (it holds: {held})"
        )


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})

"""Console sign-in: a token of ``gpusched token create`` exchanged for a session cookie.

The cookie (``gpusched_session``) is HttpOnly, SameSite=Strict and holds only a random
session id; the session, kept in the API process, holds the token and a CSRF secret.
Every request re-identifies the token, so a revoked token ends its sessions within the
token file's reread (about a second). Every unsafe request must carry the CSRF secret
(the ``X-CSRF-Token`` header htmx sends, or the ``csrf`` form field) and, when the
browser sends an ``Origin``, come from the console's own origin.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from fastapi import HTTPException, Request

from gpusched.contracts.tokens import TokenFile, TokenRecord

__all__ = ["COOKIE", "Session", "Sessions"]

COOKIE = "gpusched_session"
_LIFETIME_S = 8 * 3600
_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Session:
    token: str
    csrf: str
    started: float


class Sessions:
    """The console's signed-in sessions, by id."""

    def __init__(self, tokens: TokenFile) -> None:
        self.tokens = tokens
        self._sessions: dict[str, Session] = {}

    def sign_in(self, token: str) -> tuple[str, TokenRecord] | None:
        """A new session id for a valid token, and who it is; None for a bad token."""
        who = self.tokens.identify(token.strip())
        if who is None:
            return None
        now = time.time()
        for old in [k for k, v in self._sessions.items() if now - v.started > _LIFETIME_S]:
            del self._sessions[old]  # expired sessions nobody came back to
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = Session(token.strip(), secrets.token_urlsafe(32), time.time())
        return sid, who

    def sign_out(self, sid: str | None) -> None:
        self._sessions.pop(sid or "", None)

    def current(self, request: Request) -> tuple[Session, TokenRecord] | None:
        """The request's session and who it acts as; None when signed out, expired or
        revoked."""
        sid = request.cookies.get(COOKIE, "")
        session = self._sessions.get(sid)
        if session is None or time.time() - session.started > _LIFETIME_S:
            self._sessions.pop(sid, None)
            return None
        who = self.tokens.identify(session.token)
        if who is None:
            self._sessions.pop(sid, None)
            return None
        return session, who

    @staticmethod
    def check_unsafe(request: Request, session: Session, form_csrf: str | None = None) -> None:
        """403 for an unsafe request without the session's CSRF secret or from another
        origin."""
        if request.method not in _UNSAFE:
            return
        origin = request.headers.get("origin")
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin is not None and origin != own:
            raise HTTPException(403, f"cross-origin request from {origin} refused")
        sent = request.headers.get("x-csrf-token") or form_csrf or ""
        if not secrets.compare_digest(sent, session.csrf):
            raise HTTPException(403, "missing or wrong CSRF token: reload the page")

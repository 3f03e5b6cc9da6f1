"""Who may act through the console: the holder of the operator token, as a Bearer header (scripts) or through a
login that sets a session cookie (the browser), whose forms then carry a token against cross-site requests.

Hand-written on purpose, and small: one shared secret, no users, no server-side sessions. The cookie holds an HMAC
of the token (never the token), so changing the token logs every browser out; it is HttpOnly and SameSite=Strict.
A form posted with the cookie must also carry the CSRF value, an HMAC of the cookie that only the console's own
pages know (double submit), so another site cannot make a logged-in browser act. Comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac

SESSION_COOKIE = "dataq_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"


class Guard:
    """Checks requests against the operator token (empty: every action is refused)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    @property
    def enabled(self) -> bool:
        """Whether actions are possible at all (a token is configured)."""
        return bool(self._token)

    def _mac(self, purpose: str, value: str = "") -> str:
        return hmac.new(self._token, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    def session(self) -> str:
        """The session cookie's value."""
        return self._mac("session")

    def csrf(self) -> str:
        """The value a logged-in page's forms carry."""
        return self._mac("csrf", self.session())

    def token_matches(self, offered: str) -> bool:
        return self.enabled and hmac.compare_digest(offered.encode(), self._token)

    def bearer(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header holds the token."""
        scheme, _, credentials = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(credentials.strip())

    def logged_in(self, cookie: str | None) -> bool:
        return self.enabled and cookie is not None and hmac.compare_digest(cookie, self.session())

    def form_allowed(self, cookie: str | None, csrf: str | None) -> bool:
        """A browser's form: logged in, and carrying the CSRF value of its session."""
        return self.logged_in(cookie) and csrf is not None and hmac.compare_digest(csrf, self.csrf())

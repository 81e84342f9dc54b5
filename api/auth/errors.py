"""The refusals of request authentication, with the codes and statuses AWS answers them with.
Pure."""

from __future__ import annotations


class AuthError(Exception):
    """A request whose signature cannot be accepted. ``code`` and ``status`` are AWS's."""

    code = "AccessDenied"
    status = 403

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MissingAuthenticationToken(AuthError):
    """The request is not signed (no ``Authorization`` header)."""

    code = "MissingAuthenticationToken"


class IncompleteSignature(AuthError):
    """The ``Authorization`` header or the signed headers are malformed or incomplete."""

    code = "IncompleteSignature"
    status = 400


class InvalidClientTokenId(AuthError):
    """The access key id is unknown."""

    code = "InvalidClientTokenId"


class SignatureDoesNotMatch(AuthError):
    """The signature is wrong: tampered request, wrong secret, or a credential scoped to
    another region or service."""

    code = "SignatureDoesNotMatch"


class RequestExpired(AuthError):
    """The request was signed too long ago, or too far in the future (clock skew window)."""

    code = "RequestExpired"

"""Request authentication and authorization for the HTTP surfaces.

* `sigv4`: verification of AWS Signature Version 4 (the ``Authorization`` header form that
  boto3, every AWS SDK and ``curl --aws-sigv4`` send); `errors`: its refusals (pure);
* `access`: the action and queue each native route and SQS operation needs (pure);
* `guard`: the aiohttp middleware that verifies and authorizes every request of both surfaces
  before its handler runs; `key_routes`: the ``/v1/keys`` administration routes; `whoami`:
  ``GET /v1/whoami``, the caller's key and grants.

The keys themselves live in the catalog (`cmq.catalog.keys`), their grants in the contract
(`cmq.grants`).
"""

"""Request authentication for the HTTP surfaces. Pure.

* `sigv4`: verification of AWS Signature Version 4 (the ``Authorization`` header form that
  boto3, every AWS SDK and ``curl --aws-sigv4`` send); `errors`: its refusals.

Not wired into the request path yet: that comes with the access keys kept in the catalog.
"""

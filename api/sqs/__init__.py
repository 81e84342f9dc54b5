"""The SQS surface: Amazon SQS's JSON protocol (``POST /`` with ``X-Amz-Target: AmazonSQS.<Op>``)
and its query protocol (form-encoded ``Action=<Op>``, XML answers) over the same
`cmq.service.QueueService` the native API calls. Standard and FIFO queues (``.fifo`` names:
message groups, deduplication and sequence numbers are decided by the queue's state machine).

* `protocol`: request parsing of both protocols into one parameter shape, and rendering of
  results and errors in each protocol's shape;
* `operations`: each SQS operation mapped onto the queue service;
* `moves`: message move tasks (committed in the catalog, run by the node that started them);
* `queues` (queue URLs, queue attributes, redrive policies) and `messages` (message attributes,
  their cmq encoding, system attributes); `md5`: SQS's checksums;
* `errors`: SQS's error codes and statuses, and the translation of cmq's errors;
* `http`: the aiohttp handler `api.app` mounts.

Pure but for `http`: no aiohttp elsewhere.
"""

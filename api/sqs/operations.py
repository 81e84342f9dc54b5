"""Every SQS operation cmq serves, by name: `OPERATIONS` maps the operation (the JSON protocol's
``X-Amz-Target`` suffix, the query protocol's ``Action``) to its implementation in
`api.sqs.queue_ops` or `api.sqs.message_ops`. An operation takes the `Caller` and the request's
parameters (the JSON protocol's shape) and returns its result in the same shape, None when it
answers nothing, or raises an `api.sqs.errors.SqsError`.
"""

from __future__ import annotations

from api.sqs import message_ops as m
from api.sqs import moves
from api.sqs import queue_ops as q
from api.sqs.calls import Operation

OPERATIONS: dict[str, Operation] = {
    "CreateQueue": q.create_queue,
    "GetQueueUrl": q.get_queue_url,
    "ListQueues": q.list_queues,
    "DeleteQueue": q.delete_queue,
    "PurgeQueue": q.purge_queue,
    "GetQueueAttributes": q.get_queue_attributes,
    "SetQueueAttributes": q.set_queue_attributes,
    "TagQueue": q.tag_queue,
    "UntagQueue": q.untag_queue,
    "ListQueueTags": q.list_queue_tags,
    "ListDeadLetterSourceQueues": q.list_dead_letter_source_queues,
    "StartMessageMoveTask": moves.start_message_move_task,
    "ListMessageMoveTasks": moves.list_message_move_tasks,
    "CancelMessageMoveTask": moves.cancel_message_move_task,
    "AddPermission": q.permissions,
    "RemovePermission": q.permissions,
    "SendMessage": m.send_message,
    "SendMessageBatch": m.send_message_batch,
    "ReceiveMessage": m.receive_message,
    "DeleteMessage": m.delete_message,
    "DeleteMessageBatch": m.delete_message_batch,
    "ChangeMessageVisibility": m.change_message_visibility,
    "ChangeMessageVisibilityBatch": m.change_message_visibility_batch,
}
"""Operation name -> implementation. Any other name is ``InvalidAction`` (query) or
``UnknownOperationException`` (JSON)."""

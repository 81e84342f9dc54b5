"""The front-end socket: HTTP worker processes reach the node's `QueueService` through a local
socket (`proxy`)."""

"""The command line (``cmq``, `cmq.cli.main`) and the serving entry point (`cmq.cli.server`,
which composes a node with the HTTP API): the only part of cmq that starts processes."""

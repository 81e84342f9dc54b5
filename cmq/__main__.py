# PYTHON_ARGCOMPLETE_OK
"""``python -m cmq`` runs the ``cmq`` command."""

from cmq.cli.main import main

raise SystemExit(main())

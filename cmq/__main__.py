"""``python -m cmq`` runs the ``cmq`` command."""

from cmq.cli import main

raise SystemExit(main())

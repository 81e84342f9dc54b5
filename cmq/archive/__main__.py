"""``python -m cmq.archive ...`` (also the entry point for ``spark-submit``)."""

from cmq.archive.main import main

raise SystemExit(main())

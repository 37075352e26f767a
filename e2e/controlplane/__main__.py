"""Entry point of ``python -m e2e.controlplane``; the CLI lives in `e2e.controlplane.cli`."""

import sys

from e2e.controlplane.cli import main

sys.exit(main())

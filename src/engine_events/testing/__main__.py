"""`python -m engine_events.testing`: a reference engine run under faults (see `main`)."""

import sys

from .main import main

sys.exit(main())

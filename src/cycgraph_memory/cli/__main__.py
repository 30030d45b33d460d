"""``python -m cycgraph_memory.cli``: the same as the ``cycgraph-memory`` command."""

import sys

from cycgraph_memory.cli import main

sys.exit(main())

"""``python -m acp_client.cli``: the ``acp-client`` command."""

import sys

from acp_client.cli import main

sys.exit(main())

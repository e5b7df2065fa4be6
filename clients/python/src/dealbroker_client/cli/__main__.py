"""``python -m dealbroker_client.cli``: the ``dealbroker-client`` command."""

import sys

from dealbroker_client.cli import main

sys.exit(main())

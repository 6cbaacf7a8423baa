"""``python -m chakra_convert_fast.converter``: the ``chakra-convert-fast`` command."""

import sys

from .cli import main

sys.exit(main())

"""``python -m schedule_gym.cli``: the ``schedule-gym`` command line."""

import sys

from schedule_gym.cli import main

if __name__ == "__main__":
    sys.exit(main())

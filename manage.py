#!/usr/bin/env python
"""Django's manage.py, run through `ragmux manage` so the embedded default applies here too."""

import sys

from ragmux.launch.cli import main

if __name__ == "__main__":
    sys.exit(main(["manage", *sys.argv[1:]]))

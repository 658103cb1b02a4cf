#!/usr/bin/python3
"""Study runner: the command line of the package tools/study/ (what it does: tools/study/__init__.py,
or --help). `import study` here finds that package: a package folder wins over a module file."""
import sys

from study.cli import main

if __name__ == "__main__":
    sys.exit(main())

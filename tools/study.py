#!/usr/bin/python3
"""Study runner: the command line of the package tools/study/ (what it does: tools/study/__init__.py,
or --help). `import study` here finds that package: a package folder wins over a module file."""
import sys

from study.cli import main
from study.run import stop_on_sigterm

if __name__ == "__main__":
    stop_on_sigterm()
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        if str(e):
            print(f"study.py: {e}", file=sys.stderr)
        print("study.py: interrupted: the cell in progress was stopped (at a step, with a checkpoint there, when "
              "it stopped in time) and is not recorded (the finished cells are in the report); rerun the same "
              "command to go on: with resume_cells that cell resumes from its newest checkpoint, else it starts "
              "again", file=sys.stderr)
        sys.exit(130)

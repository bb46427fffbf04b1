import sys

from harness.run.cli import main

sys.exit(main())

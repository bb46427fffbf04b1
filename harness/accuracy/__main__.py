import sys

from harness.accuracy.cli import main

sys.exit(main())

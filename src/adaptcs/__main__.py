import sys

from adaptcs.cli import main

sys.exit(main())

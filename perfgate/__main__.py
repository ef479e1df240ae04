import sys

from perfgate.cli import main

sys.exit(main())

import sys

from specrl.cli.main import main

sys.exit(main())

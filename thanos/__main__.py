import sys

from thanos.cli import main

sys.exit(main())

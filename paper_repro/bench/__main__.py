import sys

from paper_repro.bench.cli import main

sys.exit(main())

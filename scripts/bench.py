"""`psa-tvm bench` from a checkout: the same arguments (psa_tvm/tools/bench.py defines them)."""

import sys

from psa_tvm.tools.bench import main

if __name__ == "__main__":
    sys.exit(main())

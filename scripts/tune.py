"""`psa-tvm tune` from a checkout: the same arguments (psa_tvm/tools/tune.py defines them)."""

import sys

from psa_tvm.tools.tune import main

if __name__ == "__main__":
    sys.exit(main())

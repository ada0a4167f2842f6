"""`psa-tvm tune` as a script: see psa_tvm/tools/tune.py."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from psa_tvm.tools.tune import main

if __name__ == "__main__":
    sys.exit(main())

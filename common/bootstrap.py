"""Run the compat CLI from where the image installed it, without setting PYTHONPATH.

entrypoint.sh runs `python3 $COMPAT_HOME/common/bootstrap.py launch -- ARGS`: vLLM is exec'd from
this process and inherits its environment, so the package is found through sys.path alone and
a clean model reaches vLLM with the environment the platform gave (red line 3).
`bootstrap.py check` exits 0 when the package imports on this Python (the entrypoint's guard).
"""

import os
import sys

# Python put this script's folder (common/) first on sys.path; its module names (profile, log,
# plan) would shadow the standard library, so the package root takes that place.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if sys.argv[1:] == ["check"]:
    import common.start.launch  # noqa: F401

    sys.exit(0)

from common.cli import main  # noqa: E402

sys.exit(main())

set -euo pipefail
spec=$(dirname "${BASH_SOURCE[0]}")
"$PY" -m pip install -q -r "$spec/requirements.txt" -c "$spec/lock.txt"

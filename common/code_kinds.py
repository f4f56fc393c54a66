"""The kinds of the code registry's codes (common/codes.py), apart from the registry: the rules
name their kind on every container start, and the registry is too large to import there."""

RUNTIME = "runtime repair"  # a rule that may repair (R*, H*)
CHECK = "runtime check"  # a rule that only finds what no repair fixes
BUILD_PATCH = "build patch"
BUILD_CHECK = "build check"
TRIAGE_ONLY = "triage only"
FINDING = "preflight finding"
